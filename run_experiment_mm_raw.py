"""Frontend: starts a multi-learner IMPALA run described by a workers CSV, or stops it.

    python run_experiment_mm_raw.py --workers_csv_path=sandbox/local_workers_example.csv \\
        --level_name=PongNoFrameskip-v4 --logdir=/tmp/impala [other training flags]
    python run_experiment_mm_raw.py --logdir=/tmp/impala --stop

1. Reads and validates the whole CSV (frontend/workers_csv.py); any problem: exit 2, nothing
   started.
2. Groups actors (and evaluators, at most one a set) round-robin under learners into worker
   sets and prints the plan, one line per worker: its role, TF address, where it runs, its
   script and log (--verbose: its command too; --dry_run stops here). Each worker set's
   addresses go to a file its workers read.
3. Starts every actor and evaluator: local ones in windows of the tmux session --tmux_sess,
   remote ones over SSH as detached process groups whose PIDs go to
   LOGDIR/launch/run_state.json (frontend/run_state.py).
4. Starts all learners with one MPMD mpirun in the tmux window 'learners' (frontend/launcher.py).
5. After --startup_check_secs, lists the workers that failed to start or already died, with
   host, port and reason. A failed learner, or a failed actor or evaluator without
   --tolerate_actor_failures, stops everything started and exits 1.
6. With --follow, prints the learners' log and supervises the run until training ends
   (frontend/supervisor.py): failed workers are restarted, within --max_restarts per
   --restart_window_secs; then tears the run down.

The training flags (the fields of config.Config) given here are resolved once over the defaults
of --level_name's environment family (config.from_flags; the plan names the family) and all of
them forwarded to every worker. This module reads the flags once, into `Options`; the rest takes
them as arguments.
"""

import dataclasses
import datetime
import logging
import os
import shutil
import signal
import sys
import time
import traceback
import uuid

from absl import app, flags

import config as config_lib
from frontend import launcher, run_state, supervisor, workers_csv
from frontend.console import Console, short_learner_line
from frontend.ssh_connections import Connections

REPO_DIR = os.path.dirname(os.path.abspath(__file__))
FLAGS = flags.FLAGS
config_lib.define_flags(FLAGS)

flags.DEFINE_string(
    "workers_csv_path",
    os.path.join(REPO_DIR, "sandbox", "local_workers_example.csv"),
    "Workers CSV: job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password"
    "[,ssh_key_path]; see sandbox/README.md.",
)
flags.DEFINE_string("tmux_sess", "impala", "tmux session for the local workers.")
flags.DEFINE_string("tmux_socket_name", "", "tmux -L socket name; empty: tmux's default server.")
flags.DEFINE_bool("dry_run", False, "Print the plan; start nothing.")
flags.DEFINE_bool("verbose", False, "Print each worker's command under its line of the plan.")
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
    "Keep the run going (exit 0) when some actors or evaluators failed to start.",
)
flags.DEFINE_float("ssh_timeout_secs", 15, "Timeout of each SSH connection and command.")
flags.DEFINE_float("startup_check_secs", 3, "Wait this long, then check every worker still runs.")
flags.DEFINE_float("stop_timeout_secs", 10, "Wait this long after SIGTERM/SIGHUP, then SIGKILL.")
flags.DEFINE_bool(
    "follow",
    False,
    "After starting, print the learners' log and supervise the run until training ends: a "
    "worker that fails (exits non-zero or is killed) is restarted, within --max_restarts; then "
    "stop what is left. Ctrl-C stops following and supervising only (the run goes on); SIGTERM "
    "or SIGHUP stop the whole run (exit 128 + the signal's number).",
)
flags.DEFINE_float(
    "restart_backoff_secs",
    5,
    "--follow: wait this long before restarting a failed worker; the wait doubles with each "
    f"restart of that worker within --restart_window_secs (at most "
    f"{supervisor.MAX_BACKOFF_SECS:g} s).",
    lower_bound=0,
)
flags.DEFINE_integer(
    "max_restarts",
    5,
    "--follow: restarts allowed per worker (each actor; the learners' mpirun counts as one) "
    "within --restart_window_secs. A worker that fails again after that many stops the whole "
    "run with an error naming it (exit 1). 0: never restart.",
    lower_bound=0,
)
flags.DEFINE_float(
    "restart_window_secs",
    600,
    "--follow: the sliding window, in seconds, in which --max_restarts counts restarts.",
)
flags.register_validator(
    "restart_window_secs", lambda secs: secs > 0, "--restart_window_secs must be positive."
)
flags.DEFINE_float(
    "final_evaluation_secs",
    900,
    "--follow: once the learners have finished, wait at most this long for the evaluators to "
    "end their evaluation of the final parameters before stopping what is left of the run.",
    lower_bound=0,
)


@dataclasses.dataclass(frozen=True)
class Options:
    """The frontend's settings: its own flags and the training flags it forwards."""

    logdir: str  # Absolute.
    workers_csv_path: str
    workers_csv_path_given: bool  # On the command line (--stop: wins over the recorded one).
    known_hosts: str
    known_hosts_given: bool
    tmux_sess: str
    tmux_socket_name: str
    dry_run: bool
    verbose: bool
    stop: bool
    repo_dir: str
    remote_repo_dir: str
    remote_python: str
    accept_unknown_host_keys: bool
    tolerate_actor_failures: bool
    ssh_timeout_secs: float
    startup_check_secs: float
    stop_timeout_secs: float
    follow: bool
    restart_policy: supervisor.RestartPolicy
    final_evaluation_secs: float
    training_flag_args: tuple  # Every training flag as --name=value, for the workers.
    defaults_line: str  # Which environment family's defaults the training flags started from.
    batch_timeout_secs: int
    minibatch_unrolls: int

    @classmethod
    def from_flags(cls, flag_values):
        # Workers run in the repo dir, maybe on other hosts: give them an absolute --logdir.
        logdir = os.path.abspath(os.path.expanduser(flag_values.logdir))
        training = dataclasses.replace(config_lib.from_flags(flag_values), logdir=logdir)
        return cls(
            logdir=logdir,
            workers_csv_path=flag_values.workers_csv_path,
            workers_csv_path_given=flag_values["workers_csv_path"].present,
            known_hosts=flag_values.known_hosts,
            known_hosts_given=flag_values["known_hosts"].present,
            tmux_sess=flag_values.tmux_sess,
            tmux_socket_name=flag_values.tmux_socket_name,
            dry_run=flag_values.dry_run,
            verbose=flag_values.verbose,
            stop=flag_values.stop,
            repo_dir=flag_values.repo_dir,
            remote_repo_dir=flag_values.remote_repo_dir,
            remote_python=flag_values.remote_python,
            accept_unknown_host_keys=flag_values.accept_unknown_host_keys,
            tolerate_actor_failures=flag_values.tolerate_actor_failures,
            ssh_timeout_secs=flag_values.ssh_timeout_secs,
            startup_check_secs=flag_values.startup_check_secs,
            stop_timeout_secs=flag_values.stop_timeout_secs,
            follow=flag_values.follow,
            restart_policy=supervisor.RestartPolicy(
                backoff_secs=flag_values.restart_backoff_secs,
                max_restarts=flag_values.max_restarts,
                window_secs=flag_values.restart_window_secs,
            ),
            final_evaluation_secs=flag_values.final_evaluation_secs,
            training_flag_args=tuple(config_lib.flag_args(training)),
            defaults_line=config_lib.defaults_line(training),
            batch_timeout_secs=training.batch_timeout_secs,
            minibatch_unrolls=training.minibatch_unrolls,
        )

    @property
    def launch_dir(self):
        return run_state.launch_dir(self.logdir)

    def connections(self, console, known_hosts=None):
        return Connections(
            known_hosts or self.known_hosts,
            self.accept_unknown_host_keys,
            self.ssh_timeout_secs,
            console.warn,
        )


def _describe(launch, error, console):
    """'actor-0-1 (row 4, bob@10.0.0.2 ssh port 22, auth: key K, tf 10.0.0.2:9001): reason'."""
    worker = launch.worker
    if worker is None:
        return console.mask(f"{launch.name} (mpirun): {error}")
    where = f"{worker.where}, auth: {worker.auth}" if not worker.is_local else "this host"
    reason = error if isinstance(error, str) else launcher.describe_error(error)
    return console.mask(f"{launch.name} (row {worker.row}, {where}, tf {worker.host}): {reason}")


def _print_plan(worker_sets, plan, run_id, console, options):
    """One line per worker (what, where, its files), so the plan grows with the workers only."""
    actors = sum(len(ws.actors) for ws in worker_sets)
    evaluators = f", {len(plan.evaluators)} evaluator(s)" if plan.evaluators else ""
    console.say(
        f"Run {run_id}: {len(worker_sets)} worker sets from {options.workers_csv_path} "
        f"({len(worker_sets)} learners, {actors} actors{evaluators}; actor k -> learner k % "
        f"{len(worker_sets)})"
    )
    console.say(options.defaults_line)
    console.say(f"Plan (the files named are in {options.launch_dir} on each worker's host):")
    file_name = os.path.basename

    def say(launch, what, where):
        files = f"script {file_name(launch.script_path)}; log {file_name(launch.log_path)}"
        console.say(f"  {launch.name}: {what}; {where}; {files}")
        if options.verbose:
            console.say(f"    {launch.command}")

    def say_client(launch, what):
        """An actor's or evaluator's line: started in its tmux window or over SSH."""
        worker = launch.worker
        if worker.is_local:
            where = f"tmux window {options.tmux_sess}:{launch.name}"
        else:
            where = f"over SSH as {worker.where} (auth: {worker.auth})"
        say(launch, f"{what}, tf {worker.host} (row {worker.row})", where)

    actor_launches, evaluator_launches = iter(plan.actors), iter(plan.evaluators)
    for ws, learner in zip(worker_sets, plan.learners, strict=True):
        host = "this host" if ws.learner.is_local else ws.learner.ip
        say(
            learner,
            f"learner of worker set {ws.index}, tf {ws.learner.host} (row {ws.learner.row})",
            f"mpirun rank {ws.index} on {host}; addresses {file_name(learner.cluster_file.path)}",
        )
        for task in range(len(ws.actors)):
            say_client(next(actor_launches), f"actor {task} of worker set {ws.index}")
        if ws.evaluator:
            say_client(next(evaluator_launches), f"evaluator of worker set {ws.index}")
    say(plan.mpirun, "the learners' mpirun", f"tmux window {options.tmux_sess}:learners")


def _start(plan, state, connections, options):
    """Starts the actors and evaluators, then (unless one failed and that is not tolerated) the
    learners.

    Returns the failures as (launch, reason) pairs; `state` records what was started.
    """
    server = launcher.tmux_server(options.tmux_socket_name)
    failures, started = [], []
    uploaded = set()  # (SSH login, cluster file): on that host already, so not uploaded again.
    for launch in plan.clients:
        try:
            if launch.is_remote:
                client = connections.get(launch.worker)
                upload = (launch.worker.where, launch.cluster_file.path)
                pid = launcher.start_remote(
                    client,
                    launch,
                    options.ssh_timeout_secs,
                    with_cluster_file=upload not in uploaded,
                )
                uploaded.add(upload)
                worker = launch.worker
                state["remote"].append(
                    {
                        "name": launch.name,
                        "ip": worker.ip,
                        "ssh_port": worker.ssh_port,
                        "ssh_username": worker.ssh_username,
                        "pid": pid,
                    }
                )
                run_state.write(options.launch_dir, state)
            else:
                launcher.write_script(launch)
                launcher.open_window(server, options.tmux_sess, launch)
            started.append(launch)
        except Exception as e:
            failures.append((launch, e))
    if failures and not options.tolerate_actor_failures:
        return failures

    try:
        for learner in plan.learners:
            if learner.is_remote:
                client = connections.get(learner.worker)
                upload = (learner.worker.where, learner.cluster_file.path)
                launcher.upload_script(
                    client,
                    learner,
                    options.ssh_timeout_secs,
                    with_cluster_file=upload not in uploaded,
                )
            else:
                launcher.write_script(learner)
        launcher.write_script(plan.mpirun)
        launcher.open_window(server, options.tmux_sess, plan.mpirun)
        started.append(plan.mpirun)
    except Exception as e:
        failures.append((plan.mpirun, e))
        return failures

    # A worker that cannot start (bad path, import error, port in use) dies within seconds.
    wait_secs = options.startup_check_secs
    time.sleep(wait_secs)
    pids = {entry["name"]: entry["pid"] for entry in state["remote"]}
    for launch in started:
        try:
            if launch.is_remote:
                client = connections.get(launch.worker)
                if launcher.remote_alive(client, pids[launch.name], options.ssh_timeout_secs):
                    continue
                status = "exited"
                tail = launcher.remote_tail(client, launch.log_path, options.ssh_timeout_secs)
            else:
                status = launcher.window_exit_status(server, options.tmux_sess, launch.name)
                if status is None:
                    continue
                status = f"exited with status {status}"
                tail = launcher.local_tail(launch.log_path)
            reason = f"{status} within {wait_secs} s; {launch.log_path} ends:"
            failures.append((launch, f"{reason}\n{tail}"))
        except Exception as e:
            failures.append((launch, e))
    return failures


def _stop(state, workers, connections, console, options):
    """Stops what `state` records; returns True if all of it is known to be stopped."""
    ok = True
    server = launcher.tmux_server(state["tmux_socket_name"])
    session = state["tmux_session"]
    if server.has_session(session):
        processes, killed = launcher.stop_tmux_session(server, session, options.stop_timeout_secs)
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
                options.stop_timeout_secs,
                options.ssh_timeout_secs,
            )
            console.say(f"{what}: {result}.")
        except Exception as e:
            console.warn(f"Cannot stop {what}: {launcher.describe_error(e)}")
            ok = False
    return ok


def _stop_recorded_run(workers, console, options, known_hosts=None):
    """Stops the run recorded in the run-state file and removes the file (as --stop does).

    Holds the run's lock throughout, so that the supervisor of the run never restarts a worker
    in the middle. Returns True if everything is known to be stopped (or nothing is recorded);
    otherwise the file is kept for another --stop.
    """
    directory = options.launch_dir
    with run_state.locked(directory):
        if not run_state.exists(directory):
            console.say(f"{run_state.path(directory)} is gone: the run was stopped already.")
            return True
        state = run_state.read(directory)
        with options.connections(console, known_hosts) as connections:
            ok = _stop(state, workers, connections, console, options)
        if ok:
            run_state.remove(directory)
        else:
            console.say(
                f"Some processes may still run; {run_state.path(directory)} is kept for "
                "another --stop."
            )
        return ok


def _register_passwords(workers, csv_path, console):
    """Masks the workers' passwords in all output; warns if other users can read them."""
    console.add_secrets(w.password for w in workers)
    warning = workers_csv.exposed_passwords_warning(csv_path, workers)
    if warning:
        console.warn(warning)


def stop_main(console, options):
    path = run_state.path(options.launch_dir)
    if not run_state.exists(options.launch_dir):
        console.warn(f"No run recorded at {path}: give the --logdir of the run.")
        return 1
    state = run_state.read(options.launch_dir)
    # The CSV holds the SSH credentials; the state file never does. Flags given now win.
    csv_path, known_hosts = state["workers_csv_path"], state["known_hosts"]
    if options.workers_csv_path_given:
        csv_path = options.workers_csv_path
    if options.known_hosts_given:
        known_hosts = options.known_hosts
    workers = workers_csv.read_workers(csv_path) if state["remote"] else []
    _register_passwords(workers, csv_path, console)
    return 0 if _stop_recorded_run(workers, console, options, known_hosts) else 1


def _preflight_problems(local, mpirun, options):
    """Why the run cannot start, checked before anything starts."""
    problems = []
    if run_state.exists(options.launch_dir):
        path = run_state.path(options.launch_dir)
        problems.append(f"{path} records a run: stop it first with --stop")
    if mpirun is None:
        problems.append("mpirun is not on PATH (install Open MPI)")
    if not os.path.isfile(os.path.join(local.repo_dir, "experiment.py")):
        problems.append(f"no experiment.py in --repo_dir={local.repo_dir}")
    if launcher.tmux_server(options.tmux_socket_name).has_session(options.tmux_sess):
        problems.append(
            f"tmux session {options.tmux_sess!r} exists already: pick another --tmux_sess"
        )
    return problems


def launch_main(console, options):
    try:  # refused before anything is planned: the launch dir and local learners write there
        config_lib.check_logdir(options.logdir)
    except config_lib.ConfigError as e:
        console.warn(e)
        return 2
    worker_sets = workers_csv.load_worker_sets(options.workers_csv_path)
    workers = [w for ws in worker_sets for w in ws.workers]
    _register_passwords(workers, options.workers_csv_path, console)
    try:  # refused before anything starts, where the learners would each refuse it
        config_lib.learner_minibatch_unrolls(options.minibatch_unrolls, len(worker_sets))
    except config_lib.ConfigError as e:
        console.warn(f"{options.workers_csv_path}: {e}")
        return 2
    run_id = f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:8]}"
    local = launcher.Place(sys.executable, os.path.abspath(options.repo_dir))
    remote = launcher.Place(
        options.remote_python or local.python, options.remote_repo_dir or local.repo_dir
    )
    mpirun = shutil.which("mpirun")
    plan = launcher.plan(
        worker_sets,
        options.training_flag_args,
        options.launch_dir,
        run_id,
        local,
        remote,
        mpirun or "mpirun",
        os.geteuid() == 0,
    )
    _print_plan(worker_sets, plan, run_id, console, options)
    if options.dry_run:
        console.say("Dry run: nothing started.")
        return 0
    problems = _preflight_problems(local, mpirun, options)
    if problems:
        console.warn("Not starting: " + "; ".join(problems) + ".")
        return 2

    # While it follows, the frontend answers SIGTERM/SIGHUP by stopping the run: from here on,
    # so that a run being started is stopped too.
    signals = supervisor.Signals((signal.SIGTERM, signal.SIGHUP)) if options.follow else None
    os.makedirs(options.launch_dir, exist_ok=True)
    launcher.write_cluster_files(plan)  # Before anything is recorded or started.
    state = {
        "run_id": run_id,
        "workers_csv_path": os.path.abspath(options.workers_csv_path),
        "known_hosts": os.path.abspath(os.path.expanduser(options.known_hosts)),
        "tmux_socket_name": options.tmux_socket_name,
        "tmux_session": options.tmux_sess,
        "remote": [],  # Remote actors and evaluators: name, ip, ssh_port, ssh_username, pid.
    }
    run_state.write(options.launch_dir, state)
    with options.connections(console) as connections:
        failures = _start(plan, state, connections, options)
    console.say(f"Failed workers: {len(failures)}")
    for launch, error in failures:
        console.say(f"  {_describe(launch, error, console)}")
    failed = {launch.name for launch, _ in failures}
    if failures and (plan.mpirun.name in failed or not options.tolerate_actor_failures):
        console.say("The run cannot go on: stopping everything it started.")
        _stop_recorded_run(workers, console, options)
        return 1
    for ws in worker_sets:
        if all(f"actor-{ws.index}-{task}" in failed for task in range(len(ws.actors))):
            console.say(
                f"WARNING: learner {ws.index} has no running actor; it will stop the whole job "
                f"after --batch_timeout_secs={options.batch_timeout_secs}."
            )
    tmux = f"tmux -L {options.tmux_socket_name}" if options.tmux_socket_name else "tmux"
    console.say(f"Run {run_id} started; logs in {options.launch_dir} (on each worker's host).")
    console.say(
        f"Watch: {tmux} attach -t {options.tmux_sess}; tensorboard --logdir={options.logdir}"
    )
    console.say(f"Stop:  {sys.executable} {__file__} --logdir={options.logdir} --stop")
    if not options.follow:
        return 0
    supervised = [launch for launch in plan.clients if launch.name not in failed]
    return follow(plan, supervised, state, workers, signals, console, options)


def follow(plan, clients, state, workers, signals, console, options):
    """Prints the learners' log and supervises the run (frontend/supervisor.py) until it ends.

    Returns the frontend's exit code: 0 when training finished (or on Ctrl-C: the run goes on,
    unsupervised); 1 when a worker spent its restart budget or the run was stopped elsewhere;
    128 + N when signal N (SIGTERM, SIGHUP) stopped the run.
    """
    if signals.received is None:
        signals.watch(signal.SIGINT)
        console.say(
            f"Following {plan.mpirun.log_path} and supervising the run (Ctrl-C stops following "
            "and supervising, not the run)."
        )
        with options.connections(console) as connections:
            result = supervisor.Supervisor(
                clients=clients,
                learners=plan.learners,
                mpirun=plan.mpirun,
                remote_pids={entry["name"]: entry["pid"] for entry in state["remote"]},
                run_id=state["run_id"],
                launch_dir=options.launch_dir,
                tmux_server=launcher.tmux_server(options.tmux_socket_name),
                tmux_session=options.tmux_sess,
                connections=connections,
                policy=options.restart_policy,
                final_evaluation_secs=options.final_evaluation_secs,
                console=console,
                ssh_timeout=options.ssh_timeout_secs,
                signals=signals,
                on_poll=LogPrinter(plan.mpirun.log_path, console),
            ).run()
    else:  # A signal came while the run was starting.
        name = signal.Signals(signals.received).name
        result = supervisor.Result(supervisor.Outcome.TERMINATED, name, signals.received)

    outcome = result.outcome
    if outcome is supervisor.Outcome.INTERRUPTED:
        console.say("Stopped following; the run goes on, unsupervised (stop it with --stop).")
        return 0
    if outcome is supervisor.Outcome.STOPPED_ELSEWHERE:
        console.warn(f"The run was stopped from elsewhere: {result.message}. Not supervising it.")
        if run_state.exists(options.launch_dir):
            console.warn("Stop what may be left of it with --stop.")
        return 1
    if outcome is supervisor.Outcome.FINISHED:
        console.say("The learners exited with status 0: stopping what is left of the run.")
        code = 0
    elif outcome is supervisor.Outcome.TERMINATED:
        console.warn(f"{result.message} received: stopping the whole run.")
        code = 128 + result.signal
    else:
        console.warn(f"ERROR: {result.message.rstrip()}")
        console.warn("Stopping the whole run.")
        code = 1
    if not _stop_recorded_run(workers, console, options):
        code = code or 1
    return code


class LogPrinter:
    """Prints what was added to the learners' log since the last call (from its start, at
    first), each absl line's prefixes shortened (console.short_learner_line)."""

    def __init__(self, path, console):
        self._path = path
        self._console = console
        self._position = 0

    def __call__(self):
        if not os.path.exists(self._path):
            return
        with open(self._path, errors="replace") as log:
            log.seek(self._position)
            text = log.read()
            self._position = log.tell()
        if text:
            lines = text.rstrip("\n").split("\n")
            self._console.say("\n".join(map(short_learner_line, lines)))


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    for chatty in ("libtmux", "paramiko"):  # 'window created', 'Connected (version 2.0 ...)'.
        logging.getLogger(chatty).setLevel(logging.WARNING)
    options = Options.from_flags(FLAGS)
    console = Console()
    try:
        code = stop_main(console, options) if options.stop else launch_main(console, options)
    except workers_csv.CsvError as e:
        console.add_secrets(e.secrets)
        console.warn(e)
        code = 2
    except Exception:  # Masked: an exception's text could quote a password.
        console.warn(traceback.format_exc())
        code = 1
    sys.exit(code)


def cli():
    app.run(main)


if __name__ == "__main__":
    cli()
