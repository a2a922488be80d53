"""Inside the Slurm job (--launcher=slurm): the batch script runs this, on the job's first node.

    python -m frontend.slurm_job --launch_dir=LOGDIR/launch --run_id=ID --learners=L \\
        --actors_per_learner=A --evaluators=E --cpus=CL,CA,CE [--gpus_per_learner=G] \\
        [--hetjob] [restart policy] -- TRAINING FLAGS...

1. Learns each worker's host from Slurm's environment (frontend/slurm_hosts.py): in a
   homogeneous job task i is worker i (learners, then actors, then evaluators); in a het job
   component 0 holds the learners, 1 the actors, 2 the evaluators. TF ports: a block from the
   job's id (slurm_hosts.first_port).
2. Plans the run as the CSV launcher does (launcher.plan: worker sets, one script and log per
   worker under the launch dir, the cluster files), and writes the scripts and cluster files.
3. Starts the learners with one MPMD mpirun (from here, inside the allocation: Open MPI reads
   the allocation and starts its daemons on the other nodes through srun), and every actor and
   evaluator as an `srun` step of its own with exactly its CPUs on its host.
4. Supervises: a failed actor or evaluator step is started again after the RestartPolicy's
   backoff, within --max_restarts per --restart_window_secs (else the job ends, status 1). When
   the learners end, the evaluators get --final_evaluation_secs for the final parameters, the
   rest is stopped and the job exits with mpirun's status. SIGTERM (scancel, the time limit)
   stops everything: exit 128 + 15.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import types

from absl import flags

import exit_codes
from frontend import launcher, slurm_hosts, supervisor, workers_csv

ROLES = ("learner", "actor", "evaluator")  # Het-job component k holds the ROLES[k] tasks.
POLL_SECS = 1.0


# Its own FlagValues: this entry point's flags are not the frontend's.
FLAGS = flags.FlagValues()
flags.DEFINE_string("launch_dir", None, "The run's LOGDIR/launch.", flag_values=FLAGS)
flags.DEFINE_string("run_id", None, "The run's id, exported to every worker.", flag_values=FLAGS)
flags.DEFINE_integer("learners", None, "Learners.", flag_values=FLAGS)
flags.DEFINE_integer("actors_per_learner", None, "Actors of each learner.", flag_values=FLAGS)
flags.DEFINE_integer("evaluators", 0, "Evaluators, at most one a learner.", flag_values=FLAGS)
flags.DEFINE_list("cpus", None, "CPUs of a learner, an actor, an evaluator.", flag_values=FLAGS)
flags.DEFINE_integer("gpus_per_learner", 0, "GPUs of each learner.", flag_values=FLAGS)
flags.DEFINE_bool("hetjob", False, "Component k holds the ROLES[k] tasks.", flag_values=FLAGS)
flags.DEFINE_float("restart_backoff_secs", 5, "As the frontend's flag.", flag_values=FLAGS)
flags.DEFINE_integer("max_restarts", 5, "As the frontend's flag.", flag_values=FLAGS)
flags.DEFINE_float("restart_window_secs", 600, "As the frontend's flag.", flag_values=FLAGS)
flags.DEFINE_float("final_evaluation_secs", 900, "As the frontend's flag.", flag_values=FLAGS)
flags.mark_flags_as_required(
    ["launch_dir", "run_id", "learners", "actors_per_learner", "cpus"], flag_values=FLAGS
)


def parse_args(argv):
    """The job's settings from `argv` (no program name): its flags, then after `--` the
    training flags, as `training_flags`."""
    remaining = FLAGS(["frontend.slurm_job", *argv])
    return types.SimpleNamespace(**FLAGS.flag_values_dict(), training_flags=remaining[1:])


def role_counts(args):
    """{role: how many} of the job's shape."""
    counts = {"learner": args.learners, "actor": args.learners * args.actors_per_learner}
    if args.evaluators:
        counts["evaluator"] = args.evaluators
    return counts


def worker_hosts(args, environ):
    """{role: [host of each worker of that role]}, from the job's environment."""
    counts = role_counts(args)
    if args.hetjob:
        return {
            role: slurm_hosts.task_hosts(environ, ROLES.index(role))[:count]
            for role, count in counts.items()
        }
    hosts = slurm_hosts.task_hosts(environ)
    placed, start = {}, 0
    for role, count in counts.items():
        placed[role] = hosts[start : start + count]
        start += count
    return placed


def learner_gpus(hosts, gpus_per_learner):
    """CUDA_VISIBLE_DEVICES of each learner: the next `gpus_per_learner` devices of its node,
    counted from 0 (as Slurm numbers a job's devices when it confines them, ConstrainDevices);
    '' (no GPU) when it has none."""
    seen = {}
    devices = []
    for host in hosts:
        first = seen.get(host, 0)
        seen[host] = first + gpus_per_learner
        devices.append(",".join(str(d) for d in range(first, first + gpus_per_learner)))
    return devices


def worker_sets(args, environ):
    """The run's workers_csv.WorkerSets, their hosts and ports from Slurm's environment."""
    hosts = worker_hosts(args, environ)
    port = slurm_hosts.first_port(environ, sum(map(len, hosts.values())))
    gpus = {"learner": learner_gpus(hosts["learner"], args.gpus_per_learner)}
    workers = []
    for role, role_hosts in hosts.items():
        for index, host in enumerate(role_hosts):
            devices = gpus.get(role, [""] * len(role_hosts))[index]
            workers.append(_worker(role, host, port, devices))
            port += 1
    return workers_csv.split_worker_sets(workers)


def _worker(job, host, port, cuda_visible_devices):
    """A worker as launcher.plan takes it; not from a CSV (row 0) and never reached over SSH:
    `is_local` False makes mpirun address it by its host and leaves an actor's log to srun."""
    return workers_csv.Worker(
        row=0,
        line=0,
        job=job,
        ip=host,
        tf_port=port,
        cuda_visible_devices=cuda_visible_devices,
        is_local=False,
        ssh_port=None,
        ssh_username="",
        ssh_key_path="",
        password_source="",
    )


def srun_argv(launch, args, cpus):
    """The srun step of an actor or evaluator: one task with exactly `cpus` CPUs on its host,
    its output appended to its log."""
    role = launch.worker.job
    argv = ["srun"]
    if args.hetjob:
        argv.append(f"--het-group={ROLES.index(role)}")
    argv += [
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={cpus[role]}",
        "--exact",
        f"--nodelist={launch.worker.ip}",
        f"--job-name={launch.name}",
        f"--output={launch.log_path}",
        "--open-mode=append",
        "bash",
        launch.script_path,
    ]
    return argv


class Step:
    """A started process of the job (the mpirun, or an actor's or evaluator's srun step)."""

    def __init__(self, name, argv, env=None):
        self.name, self.argv, self.env = name, argv, env
        self.restarts = []  # When it was restarted (time.monotonic), within the window.
        self.restart_at = None
        self.start()

    def start(self):
        self.process = subprocess.Popen(
            self.argv, env=self.env, stdout=subprocess.DEVNULL, start_new_session=True
        )
        self.restart_at = None

    def status(self):
        """None while it runs, else its exit status (-N if signal N killed it)."""
        return self.process.poll()

    def stop(self, signum=signal.SIGTERM):
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # It ended since.
                os.killpg(self.process.pid, signum)


def say(text):
    print(f"[slurm job {time.strftime('%H:%M:%S')}] {text}", flush=True)


def start(args, environ):
    """Plans the run, writes its files, starts the mpirun and the steps: (mpirun, clients)."""
    sets = worker_sets(args, environ)
    place = launcher.Place(sys.executable, os.getcwd())
    plan = launcher.plan(
        sets,
        tuple(args.training_flags),
        args.launch_dir,
        args.run_id,
        place,
        place,
        shutil.which("mpirun") or "mpirun",
        os.geteuid() == 0,
    )
    launcher.write_cluster_files(plan)
    for launch in plan.all:
        launcher.write_script(launch)
    for worker_set in sets:
        names = ", ".join(w.host for w in worker_set.workers)
        say(f"worker set {worker_set.index}: {names}")
    # Open MPI starts its daemons on the learners' other nodes with srun, whose step would
    # otherwise take those nodes' every CPU and keep the actors' steps from starting.
    mpirun = Step("learners", ["bash", plan.mpirun.script_path], dict(environ, SLURM_OVERLAP="1"))
    cpus = dict(zip(ROLES, map(int, args.cpus), strict=True))
    clients = [Step(c.name, srun_argv(c, args, cpus), dict(environ)) for c in plan.clients]
    return mpirun, clients


def supervise(mpirun, clients, policy, signals):
    """Restarts failed clients until the learners end or a signal comes; returns the job's
    exit status. Clients that exited 0 stay ended."""
    running = list(clients)
    while mpirun.status() is None:
        if signals.received is not None:
            return 128 + signals.received
        for step in list(running):
            status = step.status()
            if step.restart_at is not None and time.monotonic() >= step.restart_at:
                say(f"restarting {step.name}")
                step.start()
            elif status == 0:
                running.remove(step)
            elif status is not None and not _schedule_restart(step, status, policy):
                return 1
        time.sleep(POLL_SECS)
    return mpirun.status()


def _schedule_restart(step, status, policy):
    """Sets the step's restart time after its backoff (once: True while one is due); False if
    its budget is spent or its status says a restart cannot mend it."""
    if step.restart_at is not None:
        return True
    # srun exits 128 + N when signal N killed its task.
    cause = supervisor.describe_exit(-(status - 128) if status > 128 else status)
    now = time.monotonic()
    step.restarts = [t for t in step.restarts if now - t <= policy.window_secs]
    if status == exit_codes.EXIT_BAD_INPUT or len(step.restarts) >= policy.max_restarts:
        say(f"ERROR: {step.name} {cause}: not restarting it; ending the job")
        return False
    delay = policy.backoff(len(step.restarts))
    step.restarts.append(now)
    step.restart_at = now + delay
    say(f"{step.name} {cause}: restarting it in {delay:g} s")
    return True


def finish(clients, final_evaluation_secs, signals):
    """After the learners: waits for the evaluators' final evaluation (unless a signal comes),
    then stops the rest."""
    deadline = time.monotonic() + final_evaluation_secs
    evaluators = [s for s in clients if s.name.startswith("evaluator")]
    while time.monotonic() < deadline and any(s.status() is None for s in evaluators):
        if signals.received is not None:
            break
        time.sleep(POLL_SECS)
    for step in clients:
        step.stop()
    for step in clients:
        try:
            step.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            step.stop(signal.SIGKILL)


def main(argv=None, environ=os.environ):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signals = supervisor.Signals((signal.SIGTERM, signal.SIGINT))
    policy = supervisor.RestartPolicy(
        args.restart_backoff_secs, args.max_restarts, args.restart_window_secs
    )
    mpirun, clients = start(args, environ)
    status = supervise(mpirun, clients, policy, signals)
    if signals.received is not None:
        say(f"{signal.Signals(signals.received).name} received: stopping every worker")
    elif mpirun.status() is None:
        say("ending the job: stopping the learners")
    else:
        say(f"the learners' mpirun {supervisor.describe_exit(status)}; stopping the rest")
    mpirun.stop()
    finish(clients, args.final_evaluation_secs if status == 0 else 0, signals)
    return status


if __name__ == "__main__":
    sys.exit(main())
