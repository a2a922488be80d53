"""Chaos: the main job's shape run under the frontend's --follow while its workers are broken.

  .venv/bin/python -m bench.chaos [--level_name=CartPole-v1] [--kill_interval_secs=S]

(from the repository root). Two learners (one MPMD mpirun), three actors and an evaluator on
loopback (free ports), started by run_experiment_mm_raw.py --follow, which supervises them.
Over the run, one fault at a time, each --kill_interval_secs after the run began training or
recovered from the previous one, or sooner for the first four once rank 0's frames passed 1/5,
2/5, 3/5 and 4/5 of the budget (so that each kind comes before the budget on a fast machine):

  kill     SIGKILL to a random worker (an actor, the evaluator, a learner rank);
  stop     SIGSTOP to learner rank 1 for --stop_secs (longer than --learner_wait_secs: the
           learners stall, the actors give up, exit 7 and are restarted; the learner tells its
           own freeze from its actors' silence), then SIGCONT. Not an actor: tmux continues a
           stopped pane's process at once (its server_child_stopped), and the frontend's
           local actors are their panes' processes;
  cut      actor-1-0 cut off from its learner for --cut_secs: it runs in a network namespace
           the benchmark made (bench/chaos_network.py), whose veth link goes down, then up;
  preempt  SIGTERM to a random learner rank (it saves and exits 6; the supervisor restarts
           the learners, which restore their checkpoint).

The order is kill, stop, cut, preempt, then kills until the learners reach their budget (or
--max_faults are made: the test's bound on its time). A
fault's recovery: an actor's or the evaluator's next "connected to learner", the learners' next
"training from" followed by a progress line, or (stop, cut) rank 0's frames growing again after
the SIGCONT or the link's return.

At the end it checks that the run reached its budget, that each restart of the learners lost
at most one checkpoint interval of frames (bench/chaos_checks.py), that the learning bar of the
shape without chaos holds (the mean of the last 20 training games above --return_bar, or the
final evaluation at least that), and that no process, tmux session or namespace of the run is
left. Printed: the timeline of the faults (seconds from the start) and, last, one JSON line.
Needs root (the namespace).
"""

import contextlib
import dataclasses
import functools
import json
import os
import pathlib
import random
import re
import signal
import sys
import tempfile
import time
import uuid

import libtmux
import psutil
from absl import app, flags

import config as config_lib
from bench import chaos_checks, chaos_network, cluster
from tools import local_cluster

FRONTEND = str(local_cluster.REPO / "run_experiment_mm_raw.py")
LEARNER_ACTOR = "actor-1-0"  # Learner 1's only actor (actor k feeds learner k mod 2).
STOPPED = "learner-1"
FIRST_KINDS = ("kill", "stop", "cut", "preempt")  # One of each, in this order, then kills.
WORKERS = ["actor-0-0", "actor-0-1", LEARNER_ACTOR, "evaluator-0", "learner-0", "learner-1"]
# Per environment family: the run's training settings (flags given on the command line win)
# and the chaos's own defaults.
SETTINGS = {
    # The main job's settings (config.Config's), ~30 minutes here, frequent checkpoints.
    "image": {
        "training": {
            "total_environment_frames": 1_500_000,
            "checkpoint_secs": 60,
            # Longer than an actor's restart (as CartPole's 40 s; Pong's actors start slower).
            "learner_wait_secs": 90,
        },
        "kill_interval_secs": 180,
        "stop_secs": 120,
        "cut_secs": 30,
        # Where the shape without chaos is at 1.5M frames (bench/README.md, docs/chaos/).
        "return_bar": -19.5,
        "restart_backoff_secs": 5,
        "restart_window_secs": 600,
    },
    # The vector family's defaults, a short budget and short intervals: a few minutes.
    "vector": {
        "training": {
            # CartPole with 100K frames (the learning rate decays to 0 over them) ended at a
            # mean of 71 (20 games) and an evaluation of 96 in one chaos run.
            "total_environment_frames": 150_000,
            "checkpoint_secs": 5,
            "log_secs": 1,
            # Longer than an actor's restart plus the learners' first (compiled) step on a
            # loaded machine: an actor whose learner stalls for want of another's restarting
            # actor gives up after this, and shorter waits made the actors give up in turn,
            # never all up at once (docs/history.md: 40 s did so on the slowest machines).
            "learner_wait_secs": 120,
            # Longer than an actor's restart: a learner whose only actor restarts waits for it.
            "batch_timeout_secs": 240,
            "eval_interval_frames": 25_000,
            "eval_games": 3,
        },
        "kill_interval_secs": 15,
        "stop_secs": 150,
        "cut_secs": 15,
        "return_bar": 150.0,
        "restart_backoff_secs": 1,
        # Every actor gives up on each restart of the learners: the backoff, which doubles
        # with each restart in this window, would outgrow the short run.
        "restart_window_secs": 60,
    },
}
flags.DEFINE_float("kill_interval_secs", None, "Seconds between faults (CartPole 15, Pong 180).")
flags.DEFINE_float(
    "stop_secs",
    None,
    "How long learner rank 1 stays stopped (CartPole 150, Pong 120): above --learner_wait_secs.",
)
flags.DEFINE_float("cut_secs", None, "How long actor-1-0 is cut off (CartPole 15, Pong 30).")
flags.DEFINE_float("return_bar", None, "The learning bar (CartPole 150, Pong -19.5).")
flags.DEFINE_float("restart_backoff_secs", None, "The frontend's (CartPole 1, Pong 5).")
flags.DEFINE_float("restart_window_secs", None, "The frontend's (CartPole 60, Pong 600).")
flags.DEFINE_integer(
    "max_faults", 0, "Faults in all, the kill, stop, cut and preempt first; 0: until the budget."
)
flags.DEFINE_float("recovery_timeout_secs", 600, "A fault not recovered from by then fails.")
flags.DEFINE_float("timeout_secs", 3600, "The whole run's bound; then everything is killed.")
flags.DEFINE_integer("chaos_seed", None, "Seed of the kills' targets; none: a random one.")
flags.DEFINE_string("output_dir", "/tmp/impala_bench_chaos", "The runs' logdirs and logs.")
FLAGS = flags.FLAGS
POLL_SECS = 0.5


def chaos_settings():
    """(training Config, the chaos's settings) for --level_name: the family's, flags win."""
    given = config_lib.given_flags(FLAGS)
    family, _ = config_lib.environment_family(given.get("level_name", config_lib.Config.level_name))
    settings = SETTINGS[family]
    config = config_lib.configure({**settings["training"], **given})
    chaos = {
        name: settings[name] if FLAGS[name].value is None else FLAGS[name].value
        for name in (
            "kill_interval_secs",
            "stop_secs",
            "cut_secs",
            "return_bar",
            "restart_backoff_secs",
            "restart_window_secs",
        )
    }
    if chaos["stop_secs"] <= config.learner_wait_secs:
        raise app.UsageError("--stop_secs must be longer than --learner_wait_secs")
    return config, chaos


def workers_csv(path, learner_1_ip):
    """sandbox/local_workers_example.csv's shape on free ports of this host: learner 1 at
    `learner_1_ip` (actor-1-0's namespace reaches it there), the others on loopback."""
    ports = local_cluster.free_ports(6)
    jobs = ["learner", "learner", "actor", "actor", "actor", "evaluator"]
    ips = ["127.0.0.1", learner_1_ip, *["127.0.0.1"] * 4]
    lines = ["job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password"]
    lines += [f"{j},{ip},{port},,,," for j, ip, port in zip(jobs, ips, ports, strict=True)]
    pathlib.Path(path).write_text("\n".join(lines) + "\n")


def worker_name(process):
    """The frontend's name of a worker process (its window and log), or None for others."""
    args = process.cmdline()
    values = dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)
    job = values.get("job_name")
    if job == "learner":
        return f"learner-{process.environ().get('OMPI_COMM_WORLD_RANK', '0')}"
    if job not in ("actor", "evaluator"):
        return None
    worker_set = re.search(r"cluster-(\d+)\.txt$", values["cluster_file"]).group(1)
    return f"actor-{worker_set}-{values['task']}" if job == "actor" else f"evaluator-{worker_set}"


@dataclasses.dataclass
class Fault:
    """One fault and what was seen of the run when it was made, then of its recovery."""

    kind: str  # kill, stop, cut or preempt
    target: str  # the worker's name
    t: float  # seconds from the start
    unix: float
    restarts: int  # the supervisor's restart lines of the target so far
    connects: int  # "connected to learner" in the target's log so far
    learners_log: str  # rank 0's log so far
    frames: int  # rank 0's last progress frames so far
    until_t: float | None = None  # stop, cut: when the SIGCONT or the link's return is due
    resume: object = None  # stop, cut: what ends it
    resumed: bool = False
    restart_t: float | None = None
    recovered_t: float | None = None
    recovery: str = ""
    lost: tuple | None = None  # learners restarted: chaos_checks.frames_lost

    @property
    def restarts_learners(self):
        """Whether the supervisor restarts the learners after it (from their checkpoint)."""
        return self.kind in ("kill", "preempt") and self.target.startswith("learner")

    def line(self):
        """Its row of the timeline."""
        restart = "-" if self.restart_t is None else f"{self.restart_t:.0f}"
        recovered = "never" if self.recovered_t is None else f"{self.recovered_t:.0f}"
        lost = "" if self.lost is None else f"  lost {self.lost[0]:,} of at most {self.lost[1]:,}"
        until = "" if self.until_t is None else f" until {self.until_t:.0f}"
        return (
            f"{self.t:>7.0f}  {self.kind:<8}{self.target:<12}{until}  restart line {restart:>5}"
            f"  recovered {recovered:>5}: {self.recovery}{lost}"
        )


class Run:
    """The frontend following the run, and what the faults need of it: the logs, the time."""

    def __init__(self, run_dir, config, chaos, link):
        self.run_dir, self.config, self.link = pathlib.Path(run_dir), config, link
        self.logdir = self.run_dir / "logdir"
        self.tmux_socket = f"chaos-{uuid.uuid4().hex[:8]}"
        workers_csv(self.run_dir / "workers.csv", link.learner_ip)
        argv = [
            sys.executable,
            FRONTEND,
            "--follow",
            f"--workers_csv_path={self.run_dir / 'workers.csv'}",
            f"--tmux_socket_name={self.tmux_socket}",
            f"--repo_dir={link.repo_dir}",
            f"--restart_backoff_secs={chaos['restart_backoff_secs']}",
            f"--restart_window_secs={chaos['restart_window_secs']}",
            "--max_restarts=10",
            *cluster.worker_flags(config, logdir=str(self.logdir)),
        ]
        self.start = time.monotonic()
        self.frontend = local_cluster.Process(argv, self.run_dir / "frontend.log")

    def t(self):
        return time.monotonic() - self.start

    def out(self):
        return self.frontend.log()

    def log(self, name):
        path = self.logdir / "launch" / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def run_id(self):
        found = re.match(r"Run (\S+): ", self.out())
        return found and found.group(1)

    def restarts(self, name):
        """The supervisor's restart lines of `name` (the learners' mpirun for a learner)."""
        window = "learners" if name.startswith("learner") else name
        return len(re.findall(rf"\] {window} \(.*: restarting it in ", self.out()))

    def worker(self, name):
        """The running process of worker `name`, or None (e.g. being restarted)."""
        for process in local_cluster.run_processes(self.run_id()):
            try:
                if worker_name(process) == name:
                    return process
            except psutil.Error:
                continue
        return None

    def finished(self):
        return chaos_checks.budget_frames(self.log("learner-0")) is not None

    def tmux_session_left(self):
        server = libtmux.Server(socket_name=self.tmux_socket)
        return server.is_alive() and bool(server.sessions)

    def close(self):
        """Stops the frontend (SIGTERM stops the whole run), then kills anything left."""
        if self.frontend.popen.poll() is None:
            self.frontend.signal(signal.SIGTERM)
            with contextlib.suppress(AssertionError):  # killed below
                self.frontend.wait(timeout=60)
        self.frontend.kill()
        run_id = self.run_id()
        leftovers = local_cluster.run_processes(run_id) if run_id else []
        for process in leftovers:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGCONT)  # a stopped one, too
                process.kill()
        psutil.wait_procs(leftovers, timeout=10)
        server = libtmux.Server(socket_name=self.tmux_socket)
        if server.is_alive():
            server.kill()
        socket_dir = pathlib.Path(os.environ.get("TMUX_TMPDIR", "/tmp"), f"tmux-{os.getuid()}")
        (socket_dir / self.tmux_socket).unlink(missing_ok=True)  # tmux leaves it behind


def make_fault(run, kind, target):
    """The Fault of `kind` on `target`, with the run's state before it (not made yet)."""
    learners_log = run.log("learner-0")
    return Fault(
        kind,
        target,
        run.t(),
        time.time(),
        run.restarts(target),
        run.log(target).count("connected to learner"),
        learners_log,
        chaos_checks.last_frames(learners_log),
    )


SIGNALS = {"kill": signal.SIGKILL, "preempt": signal.SIGTERM}


def inject(run, kind, rng, chaos_config):
    """Makes a fault of `kind` on its target; its Fault, or None if the target is not running
    right now."""
    if kind == "stop":
        target = STOPPED
    elif kind == "cut":
        target = LEARNER_ACTOR
    elif kind == "preempt":
        target = rng.choice(["learner-0", "learner-1"])
    else:
        target = rng.choice(WORKERS)
    process = run.worker(target)
    if process is None:
        return None
    fault = make_fault(run, kind, target)
    try:
        if kind == "stop":
            process.send_signal(signal.SIGSTOP)
            fault.resume = functools.partial(_continue, process)
        elif kind == "cut":
            run.link.cut()
            fault.resume = run.link.restore
        else:
            process.send_signal(SIGNALS[kind])
    except psutil.NoSuchProcess:
        return None
    if fault.resume:
        fault.until_t = fault.t + chaos_config[f"{kind}_secs"]
    return fault


def _continue(process):
    with contextlib.suppress(psutil.NoSuchProcess):
        process.send_signal(signal.SIGCONT)


def follow_fault(run, fault):
    """Advances `fault`'s record: its end when due (stop, cut), the restart line, its
    recovery."""
    if fault.resume and not fault.resumed:
        if run.t() >= fault.until_t:
            fault.resume()
            fault.resumed = True
            fault.frames = chaos_checks.last_frames(run.log("learner-0"))
        return
    if fault.restart_t is None and run.restarts(fault.target) > fault.restarts:
        fault.restart_t = run.t()
    recovery = _recovery(run, fault)
    if recovery:
        fault.recovered_t, fault.recovery = run.t(), recovery


def _recovery(run, fault):
    """How the run recovered from `fault`, or "" if it has not (yet)."""
    log = run.log("learner-0")
    if fault.resume:
        if chaos_checks.last_frames(log) > fault.frames:
            return "training progressed again"
    elif fault.restarts_learners:
        after = log[len(fault.learners_log) :]
        lost = chaos_checks.frames_lost(
            fault.learners_log, after, fault.unix, run.config.checkpoint_secs, run.config.log_secs
        )
        resumed = after.rfind("training from")
        if lost and cluster.progress_points(after[resumed:]):
            fault.lost = lost
            return f"training from {lost[2]:,}, then progressing"
    elif run.log(fault.target).count("connected to learner") > fault.connects:
        return "reconnected to its learner"
    if run.finished():
        return "the learners reached their budget first"
    return ""


def chaos(run, rng, chaos_config):
    """Makes the faults, one at a time, until the run ends; returns them."""
    interval = chaos_config["kill_interval_secs"]
    faults, current = [], None
    deadline = run.start + FLAGS.timeout_secs
    next_at = None
    while run.frontend.popen.poll() is None and time.monotonic() < deadline:
        if next_at is None and chaos_checks.last_frames(run.log("learner-0")):
            next_at = run.t() + interval  # training has begun
        if current:
            follow_fault(run, current)
            if current.recovered_t or run.t() - current.t > FLAGS.recovery_timeout_secs:
                print(current.line(), flush=True)
                next_at, current = run.t() + interval, None
        elif next_at is not None and _fault_due(run, faults, next_at):
            kind = FIRST_KINDS[len(faults)] if len(faults) < len(FIRST_KINDS) else "kill"
            current = inject(run, kind, rng, chaos_config)
            if current:
                print(f"{current.t:>7.0f}  {current.kind} {current.target}", flush=True)
                faults.append(current)
        time.sleep(POLL_SECS)
    if current:  # the run ended meanwhile: its budget reached first, or not recovered
        follow_fault(run, current)
        print(current.line(), flush=True)
    return faults


def _fault_due(run, faults, next_at):
    """Whether the next fault is due: training goes on, --max_faults are not made yet, and
    either next_at has come or, for each of FIRST_KINDS, training passed its share of the budget
    (1/5, 2/5, 3/5, 4/5): on a fast machine the budget came before the last of them."""
    if run.finished() or (FLAGS.max_faults and len(faults) >= FLAGS.max_faults):
        return False
    if run.t() >= next_at:
        return True
    share = (len(faults) + 1) / (len(FIRST_KINDS) + 1)
    frames = chaos_checks.last_frames(run.log("learner-0"))
    return len(faults) < len(FIRST_KINDS) and frames >= share * run.config.total_environment_frames


def checks(run, faults, chaos_config):
    """The end's checks, each a bool, and the figures behind them."""
    run_id = run.run_id()
    left_deadline = time.monotonic() + 30
    while run_id and local_cluster.run_processes(run_id) and time.monotonic() < left_deadline:
        time.sleep(1)
    budgets = [chaos_checks.budget_frames(run.log(f"learner-{i}")) for i in (0, 1)]
    training, evaluation = chaos_checks.learning(str(run.logdir), run.config.level_name)
    learner_faults = [f for f in faults if f.restarts_learners]
    results = {
        "frontend_exit_0": run.frontend.popen.poll() == 0,
        "budget_reached": all(b is not None for b in budgets),
        "every_fault_recovered": all(f.recovered_t is not None for f in faults),
        "lost_at_most_one_checkpoint_interval": all(
            f.lost is not None and f.lost[0] <= f.lost[1] for f in learner_faults
        ),
        "learning_bar": chaos_checks.learned(training, evaluation, chaos_config["return_bar"]),
        "nothing_left": not (run_id and local_cluster.run_processes(run_id))
        and not run.tmux_session_left(),
    }
    figures = {
        "budget_frames": budgets,
        "mean_return_last_games": training,
        "eval_return_mean": evaluation,
    }
    return results, figures


def print_timeline(faults):
    print("\n      t  fault   target      recovery (seconds from the start)")
    for fault in faults:
        print(fault.line())


def main(argv):
    del argv
    config, chaos_config = chaos_settings()
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    local_cluster.exit_cleanly_on_termination()
    run_dir = tempfile.mkdtemp(prefix="chaos_", dir=FLAGS.output_dir)
    seed = FLAGS.chaos_seed if FLAGS.chaos_seed is not None else random.randrange(2**31)
    with (
        contextlib.closing(chaos_network.CutLink(run_dir)) as link,
        contextlib.closing(Run(run_dir, config, chaos_config, link)) as run,
    ):
        faults = chaos(run, random.Random(seed), chaos_config)
        run.frontend.wait(timeout=max(60, FLAGS.timeout_secs - run.t()))
        results, figures = checks(run, faults, chaos_config)
    results["nothing_left"] = results["nothing_left"] and not link.left()
    print_timeline(faults)
    if not results["frontend_exit_0"]:  # its logs may not outlive the machine (as in CI)
        errors = chaos_checks.frontend_errors(run.out())
        print("\nthe frontend's errors and last lines:", *errors, sep="\n")
    print(f"\nchecks: {results}\nlogs: {run_dir}")
    print(
        json.dumps(
            {
                "passed": all(results.values()),
                "checks": results,
                **figures,
                "level_name": config.level_name,
                "budget": config.total_environment_frames,
                "seed": seed,
                "wall_secs": round(run.t()),
                "faults": [_fault_json(f) for f in faults],
                "logs": run_dir,
                **chaos_config,
            }
        )
    )


def _fault_json(fault):
    keep = ("kind", "target", "t", "until_t", "restart_t", "recovered_t", "recovery", "lost")
    return {name: getattr(fault, name) for name in keep}


if __name__ == "__main__":
    app.run(main)
