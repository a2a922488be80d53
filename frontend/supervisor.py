"""Supervision: while the frontend follows a run, every worker it started is kept running.

What is watched, every `poll_secs`:
  - each actor and evaluator that started: a local one by its tmux window (its exit status, or
    the signal that killed it), a remote one by its PID over the cached SSH connection (and the
    exit status its waiting parent recorded, see launcher.start_remote);
  - the learners' job: the one mpirun in the tmux window 'learners'.

A worker that exits non-zero or is killed is started again with the same launch (same script:
its tmux window respawned, or started again over SSH with the new PID recorded in the run-state
file) after a backoff of --restart_backoff_secs, doubling with each restart still in the window
(at most MAX_BACKOFF_SECS). The learners restore the latest checkpoint by themselves when they
start (rank 0 restores and broadcasts) and the actors and evaluators reconnect to restarted
learners by themselves (for up to --learner_wait_secs). Each restart is one line with its cause.

A worker whose exit status says a restart cannot mend it (exit_codes.py) is not restarted:
supervision ends with NOT_RESTARTABLE, naming it and the end of its log, and its status becomes
the frontend's: EXIT_BAD_INPUT (a locked --logdir, an actor of another agent, training that
diverged) and the learners' EXIT_CHECKPOINTS_FAILING (a full or unwritable disk fails again).
Learners stopped by a signal before their frame budget (EXIT_STOPPED_BY_SIGNAL, a scheduler's
preemption) are restarted like any failed worker, unless the stop was the user's (--stop, or a
signal to the frontend): then supervision ends as STOPPED, INTERRUPTED or TERMINATED first.

Restarts are bounded: a worker that fails again after --max_restarts restarts within the last
--restart_window_secs has spent its budget, and supervision ends with GAVE_UP and a message
naming the worker, its host, how it ended and the end of its log; the frontend then tears the
whole run down and exits non-zero.

The other ways supervision ends:
  - FINISHED: mpirun exited 0 (the frame budget was reached). Actors and evaluators that exit 0
    (they do when their learner finishes) are never restarted;
  - STOPPED: the run-state file is gone or records another run: --stop (from another terminal)
    stopped the run, which only it does; nothing is restarted;
  - STOPPED_ELSEWHERE: the tmux session is gone but the run is still recorded: something other
    than --stop ended the run, or part of it; nothing is restarted;
  - INTERRUPTED (SIGINT, Ctrl-C) or TERMINATED (SIGTERM, SIGHUP): a signal `Signals` recorded.

Restarts happen under the run-state lock (run_state.locked) after checking the run is still
recorded, so a concurrent --stop either sees the restarted worker or prevents its restart. A run
seen gone is looked at again under the lock, so a --stop half-way (its tmux session killed, its
state file not yet removed) is seen whole, as STOPPED.
"""

import collections
import dataclasses
import enum
import os
import re
import signal
import time

import exit_codes
from frontend import launcher, run_state

MAX_BACKOFF_SECS = 60.0
LOG_TAIL_LINES = 15


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """How often and how soon a failed worker is restarted (see the module docstring)."""

    backoff_secs: float = 5.0
    max_restarts: int = 5
    window_secs: float = 600.0

    def backoff(self, recent_restarts):
        """Seconds to wait before the next restart, after `recent_restarts` in the window."""
        cap = max(self.backoff_secs, MAX_BACKOFF_SECS)
        return min(self.backoff_secs * 2**recent_restarts, cap)


class Outcome(enum.Enum):
    FINISHED = "finished"
    GAVE_UP = "gave up"
    NOT_RESTARTABLE = "not restartable"
    STOPPED = "stopped"
    STOPPED_ELSEWHERE = "stopped elsewhere"
    INTERRUPTED = "interrupted"
    TERMINATED = "terminated"


@dataclasses.dataclass(frozen=True)
class Result:
    outcome: Outcome
    message: str = ""
    signal: int | None = None  # INTERRUPTED, TERMINATED: the signal received.
    status: int | None = None  # NOT_RESTARTABLE: the worker's exit status, the frontend's too.


class Signals:
    """Records the first of the given signals instead of dying of it (see `received`).

    A second SIGINT raises KeyboardInterrupt as usual, for when the first one is not acted on
    quickly enough.
    """

    def __init__(self, signums):
        self.received = None
        self._previous = {}
        for signum in signums:
            self.watch(signum)

    def watch(self, signum):
        if signum not in self._previous:
            self._previous[signum] = signal.signal(signum, self._handle)

    def _handle(self, signum, _frame):
        if self.received is None:
            self.received = signum
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt

    def restore(self):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()


def describe_exit(status):
    """'exited with status 3, no batch from the actors for --batch_timeout_secs' (the meaning
    of the roles' statuses, exit_codes.MEANINGS), 'was killed by signal 9 (SIGKILL)', or `status`
    if a string."""
    if isinstance(status, str):
        return status
    if status < 0:
        try:
            name = f" ({signal.Signals(-status).name})"
        except ValueError:
            name = ""
        return f"was killed by signal {-status}{name}"
    meaning = exit_codes.MEANINGS.get(status)
    return f"exited with status {status}" + (f", {meaning}" if meaning else "")


@dataclasses.dataclass(eq=False)
class _Watched:
    """A supervised worker (or the learners' mpirun) and its restart history."""

    launch: launcher.Launch
    where: str
    pid: int | None = None  # A remote actor's or evaluator's PID.
    status: object = None  # None while running, else an exit status or a description.
    done: bool = False  # Exited 0: not watched any more.
    restart_at: float | None = None  # A restart is due then (on the supervisor's clock).
    restarts: collections.deque = dataclasses.field(default_factory=collections.deque)
    total_restarts: int = 0
    ssh_failing: bool = False


class Supervisor:
    """Supervises a started run until it finishes, fails for good, is stopped or interrupted.

    Args:
      clients: the launcher.Launch objects of the actors and evaluators that started (the
        supervised ones).
      learners: the learners' launcher.Launch objects (the ranks of the mpirun, in order).
      logdir: the run's --logdir (named when the learners cannot write their checkpoints).
      mpirun: the learners' job, a launcher.Launch (the mpirun in tmux window 'learners').
      remote_pids: {launch name: PID} of the remote actors and evaluators.
      run_id: the run's id (checked in the run-state file and in remote PIDs' environment).
      launch_dir: the run's launch directory (run-state file and local logs).
      tmux_server, tmux_session: where the local workers and the mpirun run.
      connections: ssh_connections.Connections for the remote actors and evaluators.
      policy: RestartPolicy.
      final_evaluation_secs: once the learners have finished, how long the evaluators still
        playing the final parameters are waited for (not restarted any more).
      console: console.Console (masks secrets in what is printed).
      ssh_timeout: seconds for each SSH command.
      signals: Signals; supervision ends when one is received.
      on_poll: called once per poll, after the statuses were read (e.g. to print the
        learners' new log lines, so that their last lines come before the outcome).
      poll_secs: seconds between polls.
      clock, sleep: time.monotonic and time.sleep, or a test's fakes.
    """

    def __init__(
        self,
        *,
        clients,
        learners,
        logdir,
        mpirun,
        remote_pids,
        run_id,
        launch_dir,
        tmux_server,
        tmux_session,
        connections,
        policy,
        final_evaluation_secs,
        console,
        ssh_timeout,
        signals,
        on_poll=lambda: None,
        poll_secs=1.0,
        clock=time.monotonic,
        sleep=time.sleep,
    ):
        self._clients = [
            _Watched(c, c.worker.where, pid=remote_pids.get(c.name) if c.is_remote else None)
            for c in clients
        ]
        hosts = ", ".join(
            dict.fromkeys("this host" if r.worker.is_local else r.worker.ip for r in learners)
        )
        self._learners = _Watched(mpirun, f"mpirun on this host; ranks on {hosts}")
        self._logdir = logdir
        self._run_id = run_id
        self._launch_dir = launch_dir
        self._server = tmux_server
        self._session = tmux_session
        self._connections = connections
        self._policy = policy
        self._final_evaluation_secs = final_evaluation_secs
        self._learners_finished_at = None  # On the supervisor's clock.
        self._final_evaluators = []  # _Watched evaluators still playing when the learners ended
        self._console = console
        self._ssh_timeout = ssh_timeout
        self._signals = signals
        self._on_poll = on_poll
        self._poll_secs = poll_secs
        self._clock, self._sleep = clock, sleep
        self._unreachable = set()
        # Where the current mpirun's part of its log (appended to by every restart) starts.
        self._learners_log_position = _size(mpirun.log_path)

    def run(self):
        """Supervises until the end; returns a Result."""
        watched = [self._learners, *self._clients]
        while True:
            if self._signals.received is not None:
                return self._signalled()
            gone = self._run_gone()
            if gone:
                self._on_poll()
                return gone
            self._unreachable = set()  # Logins whose SSH failed in this poll: not tried again.
            for worker in watched:
                if not worker.done and worker.restart_at is None:
                    worker.status = self._status(worker)
            self._on_poll()
            if self._learners.restart_at is None and self._learners.status == 0:
                if self._final_evaluations_over():
                    return Result(Outcome.FINISHED)
                self._wait(self._poll_secs)
                continue
            for worker in watched:
                if worker.done or worker.restart_at is not None or worker.status is None:
                    continue
                if worker.status == 0:
                    worker.done = True
                    self._say(f"{self._name(worker)} exited with status 0: not restarted.")
                    continue
                result = self._failed(worker, worker.status)
                if result is not None:
                    return result
            for worker in watched:
                if worker.restart_at is not None and self._clock() >= worker.restart_at:
                    result = self._restart(worker)
                    if result is not None:
                        return result
            self._wait(self._poll_secs)

    def _final_evaluations_over(self):
        """Whether, the learners having finished, every evaluator that was still playing the
        final parameters has ended (each says how), or the wait for them is over."""
        if self._learners_finished_at is None:
            self._learners_finished_at = self._clock()
            self._final_evaluators = [
                c
                for c in self._clients
                if c.launch.worker.job == "evaluator" and c.status is None and c.restart_at is None
            ]
            if self._final_evaluators:
                names = ", ".join(c.launch.name for c in self._final_evaluators)
                self._say(
                    f"The learners have finished: waiting at most {self._final_evaluation_secs:g}"
                    f" s for {names} to evaluate the final parameters."
                )
        for evaluator in [c for c in self._final_evaluators if c.status is not None]:
            self._final_evaluators.remove(evaluator)
            self._say(f"{self._name(evaluator)} {describe_exit(evaluator.status)}.")
        if not self._final_evaluators:
            return True
        if self._clock() - self._learners_finished_at < self._final_evaluation_secs:
            return False
        names = ", ".join(c.launch.name for c in self._final_evaluators)
        self._say(f"Stopped waiting for {names} after {self._final_evaluation_secs:g} s.")
        return True

    # Reading statuses.

    def _status(self, worker):
        launch = worker.launch
        if not launch.is_remote:
            try:
                return launcher.window_exit_status(self._server, self._session, launch.name)
            except Exception:
                session = self._server.sessions.get(session_name=self._session, default=None)
                if session is None:
                    return None  # The run was stopped: the next poll sees it.
                if session.windows.get(window_name=launch.name, default=None) is None:
                    return "is gone (its tmux window was closed)"
                raise
        login = launch.worker.where
        if login in self._unreachable:
            return None
        try:
            client = self._connections.get(launch.worker)
            status = launcher.remote_exit_status(
                client, worker.pid, self._run_id, launch.status_path, self._ssh_timeout
            )
        except Exception as e:  # Unknown for now: try again at the next poll.
            self._unreachable.add(login)
            self._connections.forget(launch.worker)
            if not worker.ssh_failing:
                worker.ssh_failing = True
                self._say(
                    f"cannot check {self._name(worker)} over SSH "
                    f"({launcher.describe_error(e)}); trying again every {self._poll_secs:g} s"
                )
            return None
        if worker.ssh_failing:
            worker.ssh_failing = False
            self._say(f"checking {self._name(worker)} over SSH works again")
        return status

    def _run_gone(self):
        """The Result (STOPPED or STOPPED_ELSEWHERE) if the run is not ours to supervise any more,
        else None; looked at again under the run's lock, which a --stop holds throughout."""
        if self._run_gone_locked() is None:
            return None
        with run_state.locked(self._launch_dir):
            return self._run_gone_locked()

    def _run_gone_locked(self):
        """_run_gone's answer, for a caller that holds the run's lock."""
        path = run_state.path(self._launch_dir)
        try:
            state = run_state.read(self._launch_dir)
        except FileNotFoundError:
            return Result(Outcome.STOPPED, f"{path} is gone (the run was stopped, e.g. by --stop)")
        if state.get("run_id") != self._run_id:
            return Result(Outcome.STOPPED, f"{path} records another run now")
        if not self._server.has_session(self._session):
            return Result(Outcome.STOPPED_ELSEWHERE, f"tmux session {self._session!r} is gone")
        return None

    # Failures and restarts.

    def _failed(self, worker, status):
        """Schedules the restart of a failed worker, or returns NOT_RESTARTABLE if its status
        says a restart cannot mend it, or GAVE_UP if its budget is spent."""
        if status in (exit_codes.EXIT_BAD_INPUT, exit_codes.EXIT_CHECKPOINTS_FAILING):
            return self._not_restartable(worker, status)
        now = self._clock()
        while worker.restarts and now - worker.restarts[0] > self._policy.window_secs:
            worker.restarts.popleft()
        cause = describe_exit(status) + self._learners_cause(worker)
        if len(worker.restarts) >= self._policy.max_restarts:
            return Result(Outcome.GAVE_UP, self._give_up_message(worker, cause))
        delay = self._policy.backoff(len(worker.restarts))
        worker.restarts.append(now)
        worker.total_restarts += 1
        worker.restart_at = now + delay
        self._say(
            f"{self._name(worker)} {cause}: restarting it in {delay:g} s (restart "
            f"{worker.total_restarts}; {len(worker.restarts)} of at most "
            f"{self._policy.max_restarts} within {self._policy.window_secs:g} s)"
        )
        return None

    def _not_restartable(self, worker, status):
        """NOT_RESTARTABLE, naming the worker, why a restart cannot help and its log's end."""
        if status == exit_codes.EXIT_CHECKPOINTS_FAILING:
            why = (
                "The learners could not write checkpoints (--max_failed_checkpoints in a row): "
                f"is the disk of {self._logdir} full or unwritable? Not restarting them"
            )
        else:
            why = f"{self._name(worker)} {describe_exit(status)}: not restarting it"
        whose = "their" if worker is self._learners else "its"
        tail = f"The end of {whose} log {worker.launch.log_path}:\n{self._log_tail(worker)}"
        return Result(Outcome.NOT_RESTARTABLE, f"{why}. {tail}", status=status)

    def _restart(self, worker):
        if self._signals.received is not None:  # The user's stop comes before any restart.
            return self._signalled()
        launch = worker.launch
        with run_state.locked(self._launch_dir):
            gone = self._run_gone_locked()
            if gone:
                return gone
            try:
                if launch.is_remote:
                    client = self._connections.get(launch.worker)
                    worker.pid = launcher.start_remote(client, launch, self._ssh_timeout)
                    state = run_state.read(self._launch_dir)
                    for entry in state["remote"]:
                        if entry["name"] == launch.name:
                            entry["pid"] = worker.pid
                    run_state.write(self._launch_dir, state)
                else:
                    launcher.wait_for_log(launch, timeout=5)  # Its last lines first.
                    launcher.respawn_window(self._server, self._session, launch)
            except Exception as e:
                if launch.is_remote:
                    self._connections.forget(launch.worker)
                worker.restart_at = None
                reason = e if isinstance(e, RuntimeError) else launcher.describe_error(e)
                return self._failed(worker, f"could not be restarted: {reason}")
        worker.restart_at, worker.status = None, None
        if worker is self._learners:
            self._learners_log_position = _size(launch.log_path)
        return None

    def _learners_cause(self, worker):
        """For the learners: mpirun's line naming the rank that failed first, if it wrote one."""
        if worker is not self._learners:
            return ""
        launcher.wait_for_log(worker.launch, timeout=5)
        try:
            with open(worker.launch.log_path, errors="replace") as log:
                log.seek(self._learners_log_position)
                text = log.read()
        except OSError:
            return ""
        found = re.search(r"mpirun noticed that (process rank \d+ .*?)\.?\s*$", text, re.M)
        return f" ({found.group(1)})" if found else ""

    def _give_up_message(self, worker, cause):
        policy = self._policy
        return (
            f"{self._name(worker)} {cause}, after {len(worker.restarts)} restarts within "
            f"{policy.window_secs:g} s (--max_restarts={policy.max_restarts}, "
            f"--restart_window_secs={policy.window_secs:g}): giving up. "
            f"The end of its log {worker.launch.log_path}:\n{self._log_tail(worker)}"
        )

    def _log_tail(self, worker):
        launch = worker.launch
        try:
            if launch.is_remote:
                client = self._connections.get(launch.worker)
                return launcher.remote_tail(client, launch.log_path, self._ssh_timeout)
            return launcher.local_tail(launch, LOG_TAIL_LINES)
        except Exception as e:
            return f"(cannot read it: {launcher.describe_error(e)})"

    # Helpers.

    def _signalled(self):
        signum = self._signals.received
        outcome = Outcome.INTERRUPTED if signum == signal.SIGINT else Outcome.TERMINATED
        return Result(outcome, signal.Signals(signum).name, signum)

    def _name(self, worker):
        return f"{worker.launch.name} ({worker.where})"

    def _say(self, text):
        self._console.say(f"[supervisor {time.strftime('%H:%M:%S')}] {text}")

    def _wait(self, secs):
        """Sleeps `secs` seconds, or less if a signal comes."""
        deadline = self._clock() + secs
        while self._signals.received is None and self._clock() < deadline:
            self._sleep(min(0.1, max(0.0, deadline - self._clock())))


def _size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
