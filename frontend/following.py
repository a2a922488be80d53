"""--follow: the learners' log printed for a person while the run is supervised
(frontend/supervisor.py), and how the end of supervision becomes the frontend's exit code."""

import os
import signal

from frontend import launcher, run_state, stopping, supervisor
from frontend.console import is_tf_startup_line, short_learner_line


def follow(plan, clients, state, workers, signals, console, options):
    """Prints the learners' log and supervises the run until it ends.

    Returns the frontend's exit code: 0 when training finished or --stop stopped the run (or on
    Ctrl-C: the run goes on, unsupervised); 1 when a worker spent its restart budget or something
    other than --stop ended the run; a worker's own status when a restart cannot mend it
    (exit_codes.EXIT_BAD_INPUT, EXIT_CHECKPOINTS_FAILING); 128 + N when signal N (SIGTERM,
    SIGHUP) stopped the run.
    """
    if signals.received is None:
        result = _supervise(plan, clients, state, signals, console, options)
    else:  # A signal came while the run was starting.
        name = signal.Signals(signals.received).name
        result = supervisor.Result(supervisor.Outcome.TERMINATED, name, signals.received)
    return finish(result, workers, console, options)


def _supervise(plan, clients, state, signals, console, options):
    """Supervises the started run, printing the learners' log as it grows; returns the Result."""
    signals.watch(signal.SIGINT)
    console.say(
        f"Following {plan.mpirun.log_path} and supervising the run (Ctrl-C stops following "
        "and supervising, not the run)."
    )
    with options.connections(console) as connections:
        return supervisor.Supervisor(
            clients=clients,
            learners=plan.learners,
            logdir=options.logdir,
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


def finish(result, workers, console, options):
    """Says how supervision ended (the supervisor's Result), stops what is left of the run if
    need be; returns the exit code. A --stop is what the user asked for: a normal end."""
    outcome = result.outcome
    if outcome is supervisor.Outcome.INTERRUPTED:
        console.say("Stopped following; the run goes on, unsupervised (stop it with --stop).")
        return 0
    if outcome is supervisor.Outcome.STOPPED:
        console.say("The run was stopped with --stop: nothing left to follow.")
        return 0
    if outcome is supervisor.Outcome.STOPPED_ELSEWHERE:
        console.warn(f"The run was ended from elsewhere: {result.message}. Not supervising it.")
        if run_state.exists(options.launch_dir):
            console.warn("Stop what may be left of it with --stop.")
        return 1
    if outcome is supervisor.Outcome.FINISHED:
        console.say("The learners exited with status 0: stopping what is left of the run.")
        code = 0
    elif outcome is supervisor.Outcome.TERMINATED:
        console.warn(f"{result.message} received: stopping the whole run.")
        code = 128 + result.signal
    else:  # GAVE_UP, NOT_RESTARTABLE
        console.warn(f"ERROR: {result.message.rstrip()}")
        console.warn("Stopping the whole run.")
        code = result.status or 1
    if not stopping.stop_recorded_run(workers, console, options):
        code = code or 1
    return code


class LogPrinter:
    """Prints what was added to the learners' log since the last call (from its start, at
    first), each absl line's prefixes shortened (console.short_learner_line), TensorFlow's
    start-up lines left out (console.is_tf_startup_line): they stay in the log."""

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
        lines = [line for line in text.rstrip("\n").split("\n") if not is_tf_startup_line(line)]
        if text and lines:
            self._console.say("\n".join(map(short_learner_line, lines)))
