"""Frontend: starts a multi-learner IMPALA run described by a workers CSV, or stops it.

    python run_experiment_mm_raw.py --workers_csv_path=sandbox/local_workers_example.csv \\
        --level_name=PongNoFrameskip-v4 --logdir=/tmp/impala [other training flags]
    python run_experiment_mm_raw.py --logdir=/tmp/impala --stop

1. Reads and validates the whole CSV (workers_csv.py); any problem: exit 2, nothing started.
2. Groups actors round-robin under learners into worker sets and prints the plan: every
   command, where it runs, where its log goes (--dry_run stops here).
3. Starts every actor: local ones in windows of the tmux session --tmux_sess, remote ones over
   SSH as detached process groups whose PIDs go to LOGDIR/launch/run_state.json.
4. Starts all learners with one MPMD mpirun in the tmux window 'learners'.
5. After --startup_check_secs, lists the workers that failed to start or already died, with
   host, port and reason. A failed learner, or a failed actor without
   --tolerate_actor_failures, stops everything started and exits 1.

The training flags (training_flags.py) given here are forwarded unchanged to every worker.
"""

import datetime
import json
import logging
import os
import shutil
import sys
import time
import traceback
import uuid

from absl import app, flags

import launcher
import training_flags
import workers_csv

REPO_DIR = os.path.dirname(os.path.abspath(__file__))
FLAGS = flags.FLAGS

flags.DEFINE_string(
    "workers_csv_path",
    os.path.join(REPO_DIR, "sandbox", "local_workers_example.csv"),
    "Workers CSV: job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password"
    "[,ssh_key_path]; see sandbox/README.md.",
)
flags.DEFINE_string("tmux_sess", "impala", "tmux session for the local workers.")
flags.DEFINE_string("tmux_socket_name", "", "tmux -L socket name; empty: tmux's default server.")
flags.DEFINE_bool("dry_run", False, "Print the plan and every command; start nothing.")
flags.DEFINE_bool("stop", False, "Stop the run recorded under --logdir, then exit.")
flags.DEFINE_string("repo_dir", REPO_DIR, "Directory holding experiment.py; the workers' cwd.")
flags.DEFINE_string("remote_repo_dir", "", "--repo_dir on remote hosts; empty: same as here.")
flags.DEFINE_string("remote_python", "", "Python on remote hosts; empty: this one's path.")
flags.DEFINE_string("known_hosts", "~/.ssh/known_hosts", "Known host keys for SSH.")
flags.DEFINE_bool(
    "accept_unknown_host_keys", False, "Accept (with a warning) host keys not in --known_hosts."
)
flags.DEFINE_bool(
    "tolerate_actor_failures",
    False,
    "Keep the run going (exit 0) when some actors failed to start.",
)
flags.DEFINE_float("ssh_timeout_secs", 15, "Timeout of each SSH connection and command.")
flags.DEFINE_float("startup_check_secs", 3, "Wait this long, then check every worker still runs.")
flags.DEFINE_float("stop_timeout_secs", 10, "Wait this long after SIGTERM/SIGHUP, then SIGKILL.")
flags.DEFINE_bool(
    "follow",
    False,
    "After starting, print the learners' log until they exit (Ctrl-C stops following only).",
)

STATE_FILE = "run_state.json"


class Console:
    """Prints, with every secret (an SSH password) replaced by '********'."""

    def __init__(self):
        self._secrets = []

    def add_secrets(self, secrets):
        self._secrets = sorted({*self._secrets, *filter(None, secrets)}, key=len, reverse=True)

    def mask(self, text):
        for secret in self._secrets:
            text = text.replace(secret, "********")
        return text

    def say(self, text="", file=sys.stdout):
        print(self.mask(str(text)), file=file, flush=True)


def _launch_dir():
    return os.path.join(FLAGS.logdir, "launch")


def _read_state():
    with open(os.path.join(_launch_dir(), STATE_FILE)) as f:
        return json.load(f)


def _write_state(state):
    path = os.path.join(_launch_dir(), STATE_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump(state, f, indent=2)
    os.replace(path + ".tmp", path)  # Never a half-written state, even if we die here.


class Connections:
    """SSH clients, one per (host, ssh port, user), opened on first use; failures remembered."""

    def __init__(self, console, known_hosts):
        self._console = console
        self._known_hosts = known_hosts
        self._clients = {}

    def get(self, worker):
        key = (worker.ip, worker.ssh_port, worker.ssh_username)
        if key not in self._clients:
            try:
                self._clients[key] = launcher.ssh_connect(
                    worker,
                    self._known_hosts,
                    FLAGS.accept_unknown_host_keys,
                    FLAGS.ssh_timeout_secs,
                    lambda text: self._console.say(text, file=sys.stderr),
                )
            except Exception as e:
                self._clients[key] = e
        client = self._clients[key]
        if isinstance(client, Exception):
            raise client
        return client

    def close(self):
        for client in self._clients.values():
            if not isinstance(client, Exception):
                client.close()


def _describe(launch, error, console):
    """'actor-0-1 (row 4, bob@10.0.0.2 ssh port 22, auth: key K, tf 10.0.0.2:9001): reason'."""
    worker = launch.worker
    if worker is None:
        return console.mask(f"{launch.name} (mpirun): {error}")
    where = f"{worker.where}, auth: {worker.auth}" if not worker.is_local else "this host"
    reason = error if isinstance(error, str) else launcher.describe_error(error)
    return console.mask(f"{launch.name} (row {worker.row}, {where}, tf {worker.host}): {reason}")


def _print_plan(worker_sets, plan, run_id, console):
    actors = sum(len(ws.actors) for ws in worker_sets)
    console.say(
        f"Run {run_id}: {len(worker_sets)} worker sets from {FLAGS.workers_csv_path} "
        f"({len(worker_sets)} learners, {actors} actors; actor k -> learner k % "
        f"{len(worker_sets)})"
    )
    for ws in worker_sets:
        console.say(f"  worker set {ws.index}: learner {ws.learner.host} (row {ws.learner.row})")
        for task, actor in enumerate(ws.actors):
            console.say(f"    actor task {task}: {actor.host} (row {actor.row}, {actor.where})")
    console.say(f"Commands (scripts and logs under {_launch_dir()}):")
    for launch in plan.all:
        worker = launch.worker
        if worker is None:
            where = f"tmux window {FLAGS.tmux_sess}:learners, one rank per learner"
        elif worker.job == "learner":
            where = f"mpirun rank {plan.learners.index(launch)} on {worker.ip}"
        elif worker.is_local:
            where = f"tmux window {FLAGS.tmux_sess}:{launch.name}"
        else:
            where = f"over SSH as {worker.where} (auth: {worker.auth})"
        console.say(f"  {launch.name}: {where}; log {launch.log_path}")
        console.say(f"    {launch.command}")


def _start(plan, state, connections):
    """Starts the actors, then (unless an actor failed and that is not tolerated) the learners.

    Returns the failures as (launch, reason) pairs; `state` records what was started.
    """
    server = launcher.tmux_server(FLAGS.tmux_socket_name)
    failures, started = [], []
    for actor in plan.actors:
        try:
            if actor.is_remote:
                client = connections.get(actor.worker)
                pid = launcher.start_remote(client, actor, FLAGS.ssh_timeout_secs)
                worker = actor.worker
                state["remote"].append(
                    {
                        "name": actor.name,
                        "ip": worker.ip,
                        "ssh_port": worker.ssh_port,
                        "ssh_username": worker.ssh_username,
                        "pid": pid,
                    }
                )
                _write_state(state)
            else:
                launcher.write_script(actor)
                launcher.open_window(server, FLAGS.tmux_sess, actor)
            started.append(actor)
        except Exception as e:
            failures.append((actor, e))
    if failures and not FLAGS.tolerate_actor_failures:
        return failures

    try:
        for learner in plan.learners:
            if learner.is_remote:
                client = connections.get(learner.worker)
                launcher.upload_script(client, learner, FLAGS.ssh_timeout_secs)
            else:
                launcher.write_script(learner)
        launcher.write_script(plan.mpirun)
        launcher.open_window(server, FLAGS.tmux_sess, plan.mpirun)
        started.append(plan.mpirun)
    except Exception as e:
        failures.append((plan.mpirun, e))
        return failures

    # A worker that cannot start (bad path, import error, port in use) dies within seconds.
    time.sleep(FLAGS.startup_check_secs)
    pids = {entry["name"]: entry["pid"] for entry in state["remote"]}
    for launch in started:
        try:
            if launch.is_remote:
                client = connections.get(launch.worker)
                if launcher.remote_alive(client, pids[launch.name], FLAGS.ssh_timeout_secs):
                    continue
                status = "exited"
                tail = launcher.remote_tail(client, launch.log_path, FLAGS.ssh_timeout_secs)
            else:
                status = launcher.window_exit_status(server, FLAGS.tmux_sess, launch.name)
                if status is None:
                    continue
                status = f"exited with status {status}"
                with open(launch.log_path, errors="replace") as f:
                    tail = "".join(f.readlines()[-15:])
            reason = f"{status} within {FLAGS.startup_check_secs} s; {launch.log_path} ends:"
            failures.append((launch, f"{reason}\n{tail}"))
        except Exception as e:
            failures.append((launch, e))
    return failures


def _stop(state, workers, connections, console):
    """Stops what `state` records; returns True if all of it is known to be stopped."""
    ok = True
    server = launcher.tmux_server(state["tmux_socket_name"])
    session = state["tmux_session"]
    if server.has_session(session):
        processes, killed = launcher.stop_tmux_session(server, session, FLAGS.stop_timeout_secs)
        sigkill = f", {len(killed)} of them by SIGKILL" if killed else ""
        console.say(f"Killed tmux session {session!r}: {len(processes)} processes ended{sigkill}.")
    else:
        console.say(f"tmux session {session!r}: not running.")
    login = {(w.ip, w.ssh_port, w.ssh_username): w for w in workers if not w.is_local}
    for entry in state["remote"]:
        what = f"{entry['name']} (PID {entry['pid']} on {entry['ssh_username']}@{entry['ip']})"
        worker = login.get((entry["ip"], entry["ssh_port"], entry["ssh_username"]))
        try:
            if worker is None:
                raise LookupError(f"no row of {state['workers_csv_path']} has its login any more")
            client = connections.get(worker)
            result = launcher.stop_remote(
                client,
                entry["pid"],
                state["run_id"],
                FLAGS.stop_timeout_secs,
                FLAGS.ssh_timeout_secs,
            )
            console.say(f"{what}: {result}.")
        except Exception as e:
            console.say(f"Cannot stop {what}: {launcher.describe_error(e)}", file=sys.stderr)
            ok = False
    return ok


def stop_main(console):
    path = os.path.join(_launch_dir(), STATE_FILE)
    if not os.path.exists(path):
        console.say(f"No run recorded at {path}: give the --logdir of the run.", file=sys.stderr)
        return 1
    state = _read_state()
    # The CSV holds the SSH credentials; the state file never does. Flags given now win.
    csv_path, known_hosts = state["workers_csv_path"], state["known_hosts"]
    if FLAGS["workers_csv_path"].present:
        csv_path = FLAGS.workers_csv_path
    if FLAGS["known_hosts"].present:
        known_hosts = FLAGS.known_hosts
    workers = workers_csv.read_workers(csv_path) if state["remote"] else []
    console.add_secrets(w.password for w in workers)
    connections = Connections(console, known_hosts)
    try:
        ok = _stop(state, workers, connections, console)
    finally:
        connections.close()
    if not ok:
        console.say(f"Some processes may still run; {path} is kept for another --stop.")
        return 1
    os.remove(path)
    return 0


def _preflight_problems(local, mpirun):
    """Why the run cannot start, checked before anything starts."""
    problems = []
    state_path = os.path.join(_launch_dir(), STATE_FILE)
    if os.path.exists(state_path):
        problems.append(f"{state_path} records a run: stop it first with --stop")
    if mpirun is None:
        problems.append("mpirun is not on PATH (install Open MPI)")
    if not os.path.isfile(os.path.join(local.repo_dir, "experiment.py")):
        problems.append(f"no experiment.py in --repo_dir={local.repo_dir}")
    if launcher.tmux_server(FLAGS.tmux_socket_name).has_session(FLAGS.tmux_sess):
        problems.append(
            f"tmux session {FLAGS.tmux_sess!r} exists already: pick another --tmux_sess"
        )
    return problems


def launch_main(console):
    worker_sets = workers_csv.load_worker_sets(FLAGS.workers_csv_path)
    workers = [w for ws in worker_sets for w in (ws.learner, *ws.actors)]
    console.add_secrets(w.password for w in workers)
    run_id = f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:8]}"
    local = launcher.Place(sys.executable, os.path.abspath(FLAGS.repo_dir))
    remote = launcher.Place(
        FLAGS.remote_python or local.python, FLAGS.remote_repo_dir or local.repo_dir
    )
    mpirun = shutil.which("mpirun")
    plan = launcher.plan(
        worker_sets,
        training_flags.forwarded_flag_args(FLAGS),
        _launch_dir(),
        run_id,
        local,
        remote,
        mpirun or "mpirun",
        os.geteuid() == 0,
    )
    _print_plan(worker_sets, plan, run_id, console)
    if FLAGS.dry_run:
        console.say("Dry run: nothing started.")
        return 0
    problems = _preflight_problems(local, mpirun)
    if problems:
        console.say("Not starting: " + "; ".join(problems) + ".", file=sys.stderr)
        return 2

    os.makedirs(_launch_dir(), exist_ok=True)
    state = {
        "run_id": run_id,
        "workers_csv_path": os.path.abspath(FLAGS.workers_csv_path),
        "known_hosts": os.path.abspath(os.path.expanduser(FLAGS.known_hosts)),
        "tmux_socket_name": FLAGS.tmux_socket_name,
        "tmux_session": FLAGS.tmux_sess,
        "remote": [],  # Remote actors: name, ip, ssh_port, ssh_username, pid.
    }
    _write_state(state)
    connections = Connections(console, FLAGS.known_hosts)
    try:
        failures = _start(plan, state, connections)
        console.say(f"Failed workers: {len(failures)}")
        for launch, error in failures:
            console.say(f"  {_describe(launch, error, console)}")
        failed = {launch.name for launch, _ in failures}
        if failures and (plan.mpirun.name in failed or not FLAGS.tolerate_actor_failures):
            console.say("The run cannot go on: stopping everything it started.")
            if _stop(state, workers, connections, console):
                os.remove(os.path.join(_launch_dir(), STATE_FILE))
            else:
                console.say("Some processes may still run: stop them with --stop.")
            return 1
    finally:
        connections.close()
    for ws in worker_sets:
        if all(f"actor-{ws.index}-{task}" in failed for task in range(len(ws.actors))):
            console.say(
                f"WARNING: learner {ws.index} has no running actor; it will stop the whole job "
                f"after --batch_timeout_secs={FLAGS.batch_timeout_secs}."
            )
    tmux = f"tmux -L {FLAGS.tmux_socket_name}" if FLAGS.tmux_socket_name else "tmux"
    console.say(f"Run {run_id} started; logs in {_launch_dir()} (on each worker's host).")
    console.say(f"Watch: {tmux} attach -t {FLAGS.tmux_sess}; tensorboard --logdir={FLAGS.logdir}")
    console.say(f"Stop:  {sys.executable} {__file__} --logdir={FLAGS.logdir} --stop")
    if not FLAGS.follow:
        return 0
    status = follow_learners(plan.mpirun, console)
    if status is None:  # Ctrl-C: the run goes on.
        return 0
    console.say(f"The learners exited with status {status}: stopping what is left of the run.")
    connections = Connections(console, FLAGS.known_hosts)
    try:
        if _stop(state, workers, connections, console):
            os.remove(os.path.join(_launch_dir(), STATE_FILE))
    finally:
        connections.close()
    return 0 if status == 0 else 1


def follow_learners(mpirun_launch, console, poll_secs=1.0):
    """Prints the learners' log as it grows until mpirun exits; returns its exit status.

    Ctrl-C stops following, leaves the run going and returns None.
    """
    server = launcher.tmux_server(FLAGS.tmux_socket_name)
    console.say(f"Following {mpirun_launch.log_path} (Ctrl-C stops following, not the run).")
    position = 0
    try:
        while True:
            status = launcher.window_exit_status(server, FLAGS.tmux_sess, mpirun_launch.name)
            if os.path.exists(mpirun_launch.log_path):
                with open(mpirun_launch.log_path, errors="replace") as log:
                    log.seek(position)
                    text = log.read()
                    position = log.tell()
                if text:
                    console.say(text.rstrip("\n"))
            if status is not None:
                return status
            time.sleep(poll_secs)
    except KeyboardInterrupt:
        console.say("Stopped following; the run goes on.")
        return None


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    # Workers run in the repo dir, maybe on other hosts: give them an absolute --logdir.
    FLAGS.logdir = os.path.abspath(os.path.expanduser(FLAGS.logdir))
    for chatty in ("libtmux", "paramiko"):  # 'window created', 'Connected (version 2.0 ...)'.
        logging.getLogger(chatty).setLevel(logging.WARNING)
    console = Console()
    try:
        code = stop_main(console) if FLAGS.stop else launch_main(console)
    except workers_csv.CsvError as e:
        console.say(e, file=sys.stderr)
        code = 2
    except Exception:  # Masked: an exception's text could quote a password.
        console.say(traceback.format_exc(), file=sys.stderr)
        code = 1
    sys.exit(code)


def cli():
    app.run(main)


if __name__ == "__main__":
    cli()
