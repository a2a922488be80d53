"""The frontend's commands, from checked input to exit code: start a run (plan, start, follow)
or stop the recorded one (--stop); a Slurm run's are in frontend/slurm_run.py. Exit codes: 0
done, 1 the run failed, 2 (exit_codes.EXIT_BAD_INPUT) bad input: nothing started, or while
following a worker refused its input; 5 (EXIT_CHECKPOINTS_FAILING) while following the
learners could not write checkpoints; 128 + N stopped by signal N while following."""

import datetime
import os
import shutil
import signal
import sys
import traceback
import uuid

import config as config_lib
import environments
import exit_codes
from frontend import (
    following,
    launcher,
    plan_report,
    preflight,
    run_state,
    slurm,
    slurm_run,
    startup,
    stopping,
    supervisor,
    workers_csv,
)
from frontend.console import Console, quiet_libraries

ENTRY_POINT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "run_experiment_mm_raw.py"
)


def main(options):
    """Runs the command `options` give; returns the exit code. Errors are printed masked: an
    exception's text could quote a password."""
    quiet_libraries()
    console = Console()
    try:
        if options.stop:
            return stop_main(console, options)
        if options.watch:
            return slurm_run.watch_main(console, options)
        if options.launcher == "slurm":
            run_id = _new_run_id()
            return slurm_run.launch_main(console, options, _check_level, run_id, ENTRY_POINT)
        return launch_main(console, options)
    except workers_csv.CsvError as e:
        console.add_secrets(e.secrets)
        console.warn(e)
        return exit_codes.EXIT_BAD_INPUT
    except slurm.SlurmError as e:
        console.warn(e)
        return 1
    except Exception:
        console.warn(traceback.format_exc())
        return 1


def stop_main(console, options):
    """--stop: stops the run recorded under --logdir with the CSV's credentials."""
    path = run_state.path(options.launch_dir)
    if not run_state.exists(options.launch_dir):
        console.warn(f"No run recorded at {path}: give the --logdir of the run.")
        return 1
    state = run_state.read(options.launch_dir)
    if state.get("launcher") == "slurm":
        return slurm_run.stop(console, options, state)
    # The CSV holds the SSH credentials; the state file never does. Flags given now win.
    csv_path, known_hosts = state["workers_csv_path"], state["known_hosts"]
    if options.workers_csv_path_given:
        csv_path = options.workers_csv_path
    if options.known_hosts_given:
        known_hosts = options.known_hosts
    workers = workers_csv.read_workers(csv_path) if state["remote"] else []
    _register_passwords(workers, csv_path, console)
    return 0 if stopping.stop_recorded_run(workers, console, options, known_hosts) else 1


def launch_main(console, options):
    """Checks the input, prints the plan and (unless --dry_run) starts the run; with --follow,
    supervises it to its end. Returns the exit code."""
    try:  # refused before anything is planned (the launch dir and local learners write there)
        config_lib.check_logdir(options.logdir)
        _check_level(options.level_name)
    except config_lib.ConfigError as e:
        console.warn(e)
        return exit_codes.EXIT_BAD_INPUT
    worker_sets = workers_csv.load_worker_sets(options.workers_csv_path)
    workers = [w for ws in worker_sets for w in ws.workers]
    _register_passwords(workers, options.workers_csv_path, console)
    try:  # refused before anything starts, where the learners would each refuse it
        config_lib.learner_minibatch_unrolls(options.minibatch_unrolls, len(worker_sets))
    except config_lib.ConfigError as e:
        console.warn(f"{options.workers_csv_path}: {e}")
        return exit_codes.EXIT_BAD_INPUT
    run_id = _new_run_id()
    local = launcher.Place(sys.executable, os.path.abspath(options.repo_dir))
    plan = _plan(worker_sets, run_id, local, options)
    plan_report.print_plan(worker_sets, plan, run_id, console, options)
    if options.dry_run:
        console.say("Dry run: nothing started.")
        return 0
    problems = _preflight_problems(local, options)
    if problems:
        console.warn("Not starting: " + "; ".join(problems) + ".")
        return exit_codes.EXIT_BAD_INPUT
    # While it follows, the frontend answers SIGTERM/SIGHUP by stopping the run: from here on,
    # so that a run being started is stopped too.
    signals = supervisor.Signals((signal.SIGTERM, signal.SIGHUP)) if options.follow else None
    state = _record(plan, run_id, options)
    with options.connections(console) as connections:
        failures = startup.start(plan, state, connections, options)
    if not _goes_on(plan, worker_sets, failures, workers, console, options):
        return 1
    _say_started(run_id, console, options)
    if not options.follow:
        return 0
    failed = {launch.name for launch, _ in failures}
    supervised = [launch for launch in plan.clients if launch.name not in failed]
    return following.follow(plan, supervised, state, workers, signals, console, options)


def _new_run_id():
    return f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:8]}"


def _check_level(level_name):
    """Raises ConfigError naming --level_name unless an environment of that name can be made
    here, as every worker would refuse it (environments.observation_shape: no emulator started,
    a non-Atari one made and closed at once)."""
    try:
        environments.observation_shape(level_name)
    except environments.UnknownEnvironmentError as e:
        raise config_lib.ConfigError(f"--level_name: {e}") from None


def _register_passwords(workers, csv_path, console):
    """Masks the workers' passwords in all output; warns if other users can read them."""
    console.add_secrets(w.password for w in workers)
    warning = workers_csv.exposed_passwords_warning(csv_path, workers)
    if warning:
        console.warn(warning)


def _plan(worker_sets, run_id, local, options):
    """The launch of every worker; remote hosts use --remote_python and --remote_repo_dir."""
    remote = launcher.Place(
        options.remote_python or local.python, options.remote_repo_dir or local.repo_dir
    )
    return launcher.plan(
        worker_sets,
        options.training_flag_args,
        options.launch_dir,
        run_id,
        local,
        remote,
        shutil.which("mpirun") or "mpirun",
        os.geteuid() == 0,
    )


def _preflight_problems(local, options):
    """Why the run cannot start, checked before anything starts."""
    problems = preflight.problems(
        options.launch_dir, local.repo_dir, ("mpirun",), "install Open MPI"
    )
    if launcher.tmux_server(options.tmux_socket_name).has_session(options.tmux_sess):
        problems.append(
            f"tmux session {options.tmux_sess!r} exists already: pick another --tmux_sess"
        )
    return problems


def _record(plan, run_id, options):
    """Writes the cluster files and the run-state file, before anything starts; the state."""
    os.makedirs(options.launch_dir, exist_ok=True)
    launcher.write_cluster_files(plan)
    state = {
        "run_id": run_id,
        "workers_csv_path": os.path.abspath(options.workers_csv_path),
        "known_hosts": os.path.abspath(os.path.expanduser(options.known_hosts)),
        "tmux_socket_name": options.tmux_socket_name,
        "tmux_session": options.tmux_sess,
        "remote": [],  # Remote actors and evaluators: name, ip, ssh_port, ssh_username, pid.
    }
    run_state.write(options.launch_dir, state)
    return state


def _goes_on(plan, worker_sets, failures, workers, console, options):
    """Lists the workers that failed to start; stops the run (returning False) if it cannot go
    on without them, else warns of each learner left without an actor."""
    console.say(f"Failed workers: {len(failures)}")
    for launch, error in failures:
        console.say(f"  {plan_report.describe_failure(launch, error, console)}")
    failed = {launch.name for launch, _ in failures}
    if failures and (plan.mpirun.name in failed or not options.tolerate_actor_failures):
        console.say("The run cannot go on: stopping everything it started.")
        stopping.stop_recorded_run(workers, console, options)
        return False
    for ws in worker_sets:
        if all(f"actor-{ws.index}-{task}" in failed for task in range(len(ws.actors))):
            console.say(
                f"WARNING: learner {ws.index} has no running actor; it will stop the whole job "
                f"after --batch_timeout_secs={options.batch_timeout_secs}."
            )
    return True


def _say_started(run_id, console, options):
    """Where the started run's logs are, how to watch it and how to stop it."""
    tmux = f"tmux -L {options.tmux_socket_name}" if options.tmux_socket_name else "tmux"
    console.say(f"Run {run_id} started; logs in {options.launch_dir} (on each worker's host).")
    console.say(
        f"Watch: {tmux} attach -t {options.tmux_sess}; tensorboard --logdir={options.logdir}"
    )
    console.say(f"Stop:  {sys.executable} {ENTRY_POINT} --logdir={options.logdir} --stop")
