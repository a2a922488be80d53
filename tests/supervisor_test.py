"""supervisor: which failed workers it restarts and when, when it gives up, and how supervision
ends, on a fake clock with fake workers (tests/frontend_fakes.py): no process is started and no
real time passes."""

import contextlib
import heapq
import itertools
import os
import re
import shlex
import signal
import types

import pytest

import exit_codes
from frontend import launcher, run_state, supervisor
from frontend.supervisor import Outcome, RestartPolicy, Result
from tests import frontend_fakes
from tests.frontend_fakes import RUN_ID, FakeTmux

START = 1000.0  # The fake clock's time when supervision starts.
SESSION = "impala"
LOGDIR = "/data/runs/pong"
GAVE_UP_ON_LEARNER = "exited with status 7, gave up on its learner after --learner_wait_secs"
DEFAULTS = RestartPolicy()  # --restart_backoff_secs=5, --max_restarts=5, --restart_window_secs=600
LEARNER, ACTOR_0, ACTOR_1 = (
    "learner,localhost,8001,,,,",
    "actor,localhost,9001,,,,",
    "actor,localhost,9002,,,,",
)
EVALUATOR = "evaluator,localhost,9101,,,,"
LOGIN = "bob@10.0.0.2 ssh port 22"
# Two remote actors behind one login and a local one; their learner on this host.
REMOTE_ROWS = (
    "learner,10.1.2.3,8001,,,,",
    "actor,10.0.0.2,9001,,22,bob,pa55word-x1",
    "actor,10.0.0.2,9002,,22,bob,pa55word-x1",
    "actor,localhost,9003,,,,",
)


class Clock:
    """A fake monotonic clock: sleeping moves it on and runs what a test scheduled by then."""

    def __init__(self):
        self.now = START
        self._due = []  # (time, order, action)
        self._order = itertools.count()

    def __call__(self):
        return self.now

    @property
    def t(self):
        """Seconds since supervision started."""
        return self.now - START

    def at(self, t, action):
        """Runs `action` once the clock reaches `t` s after the start."""
        heapq.heappush(self._due, (START + t, next(self._order), action))

    def sleep(self, secs):
        assert secs >= 0
        self.now += secs
        while self._due and self._due[0][0] <= self.now:
            heapq.heappop(self._due)[2]()
        assert self.t < 10_000, "supervision never ended"


class Console:
    """What the supervisor said, as (seconds since the start, text without its prefix)."""

    def __init__(self, clock):
        self._clock = clock
        self.lines = []

    def say(self, text):
        prefix = re.match(r"\[supervisor \d\d:\d\d:\d\d\] ", text)
        assert prefix, text
        self.lines.append((self._clock.t, text[prefix.end() :]))


class Ssh:
    """ssh_connections.Connections to fake hosts, and launcher's SSH calls answered by them.

    `exits[pid]`: None while the remote worker `pid` runs, else how it ended (as
    launcher.remote_exit_status says); `down`: the logins whose SSH fails (TimeoutError).
    """

    def __init__(self, clock, monkeypatch):
        self._clock = clock
        self._pids = itertools.count(5000)
        self.exits = {}
        self.down = set()
        self.gets, self.forgotten, self.started = [], [], []
        monkeypatch.setattr(launcher, "remote_exit_status", self._exit_status)
        monkeypatch.setattr(launcher, "start_remote", self._start_remote)
        monkeypatch.setattr(
            launcher, "remote_tail", lambda _client, path, _timeout: f"{path}'s end"
        )

    def start(self):
        pid = next(self._pids)
        self.exits[pid] = None
        return pid

    def get(self, worker):
        self.gets.append((self._clock.t, worker.where))
        if worker.where in self.down:
            raise TimeoutError("no answer")
        return worker.where  # The client: launcher's calls are faked for it.

    def forget(self, worker):
        self.forgotten.append((self._clock.t, worker.where))

    def _exit_status(self, client, pid, run_id, status_path, _timeout):
        assert run_id == RUN_ID and status_path.endswith(".status") and client == LOGIN
        return self.exits[pid]

    def _start_remote(self, _client, launch, _timeout):
        pid = self.start()
        self.started.append((self._clock.t, launch.name, pid))
        return pid


class Run:
    """A run started on fakes (its plan, tmux windows, remote workers, run-state file), which a
    test breaks at the times it chooses and then supervises to its end."""

    def __init__(self, tmp_path, monkeypatch, *rows):
        self.clock = Clock()
        _, self.plan = frontend_fakes.plan(tmp_path, *rows)
        self.launch_dir = str(tmp_path / "launch")
        os.makedirs(self.launch_dir)
        self.tmux = FakeTmux(lambda: self.clock.t)
        self.ssh = Ssh(self.clock, monkeypatch)
        self.console = Console(self.clock)
        self.signals = types.SimpleNamespace(received=None)
        self.pids, remote = {}, []
        for launch in self.plan.clients:
            if launch.is_remote:
                self.pids[launch.name] = self.ssh.start()
                remote.append({"name": launch.name, "pid": self.pids[launch.name]})
            else:
                launcher.open_window(self.tmux, SESSION, launch)
        launcher.open_window(self.tmux, SESSION, self.plan.mpirun)
        self.tmux.started.clear()  # From here on: restarts only.
        run_state.write(self.launch_dir, {"run_id": RUN_ID, "remote": remote})
        self.launches = {launch.name: launch for launch in self.plan.all}

    def end(self, t, name, status=0, signal=None):
        """At `t` s, worker `name`'s process ends with `status` or is killed by `signal`."""

        def end():
            if self.launches[name].is_remote:
                self.ssh.exits[self.pids[name]] = -signal if signal else status
            else:
                self.tmux.end(SESSION, name, status, signal)

        self.clock.at(t, end)

    def keep_failing(self, name, status=1, times=None, after=0.5):
        """Worker `name` exits with `status` `after` s after each restart (`times` times)."""
        count = itertools.count(1)

        def on_start(started):
            if started == name and (times is None or next(count) <= times):
                self.end(self.clock.t + after, name, status)

        self.tmux.on_start = on_start

    def supervise(self, policy=DEFAULTS, **arguments):
        """Supervises the run to its end; returns its Result. `arguments`: the Supervisor's,
        over this run's fakes and the frontend's defaults."""
        defaults = {
            "clients": self.plan.clients,
            "learners": self.plan.learners,
            "logdir": LOGDIR,
            "mpirun": self.plan.mpirun,
            "remote_pids": self.pids,
            "run_id": RUN_ID,
            "launch_dir": self.launch_dir,
            "tmux_server": self.tmux,
            "tmux_session": SESSION,
            "connections": self.ssh,
            "final_evaluation_secs": 900,
            "console": self.console,
            "ssh_timeout": 5,
            "signals": self.signals,
            "clock": self.clock,
            "sleep": self.clock.sleep,
        }
        return supervisor.Supervisor(policy=policy, **{**defaults, **arguments}).run()

    def restarts(self):
        """(seconds since the start, name) of each worker started again, local or remote."""
        remote = [(t, name) for t, name, _ in self.ssh.started]
        return sorted([*self.tmux.started, *remote])

    def said(self, text):
        """The times the supervisor said `text`."""
        return [t for t, line in self.console.lines if line == text]


def restart_line(name, cause, delay, restart, recent, at_most=5, window=600):
    return (
        f"{name} {cause}: restarting it in {delay:g} s (restart {restart}; {recent} of at most "
        f"{at_most} within {window:g} s)"
    )


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A learner and two actors on this host."""
    return Run(tmp_path, monkeypatch, LEARNER, ACTOR_0, ACTOR_1)


@pytest.mark.parametrize(
    "status, description",
    [
        (0, "exited with status 0"),
        (1, "exited with status 1"),
        (3, "exited with status 3, no batch from the actors for --batch_timeout_secs"),
        (7, "exited with status 7, gave up on its learner after --learner_wait_secs"),
        (-9, "was killed by signal 9 (SIGKILL)"),
        (-15, "was killed by signal 15 (SIGTERM)"),
        (-200, "was killed by signal 200"),
        ("is gone (its tmux window was closed)", "is gone (its tmux window was closed)"),
    ],
)
def test_describe_exit(status, description):
    assert supervisor.describe_exit(status) == description


def test_the_backoff_doubles_with_each_recent_restart_up_to_its_cap():
    assert [RestartPolicy(5).backoff(n) for n in range(6)] == [5, 10, 20, 40, 60, 60]
    assert [RestartPolicy(0.5).backoff(n) for n in range(3)] == [0.5, 1, 2]
    assert [RestartPolicy(100).backoff(n) for n in range(3)] == [100, 100, 100]  # Cap >= base.
    assert RestartPolicy(0).backoff(4) == 0


# Restarts and their bounds.


def test_a_failed_actor_is_restarted_after_a_backoff_that_doubles(run):
    run.end(0.5, "actor-0-0", status=1)
    run.keep_failing("actor-0-0", times=2)
    run.end(60, "learners")

    assert run.supervise() == Result(Outcome.FINISHED)
    assert run.clock.t == 60
    # Each failure is seen at the next poll (every second), its restart due 5, 10, 20 s later.
    assert run.restarts() == [(6, "actor-0-0"), (17, "actor-0-0"), (38, "actor-0-0")]
    cause = "exited with status 1"
    assert run.console.lines == [
        (1, restart_line("actor-0-0 (this host)", cause, 5, 1, 1)),
        (7, restart_line("actor-0-0 (this host)", cause, 10, 2, 2)),
        (18, restart_line("actor-0-0 (this host)", cause, 20, 3, 3)),
    ]
    script = shlex.quote(run.launches["actor-0-0"].script_path)
    respawn = ("respawn-window", "-k", "-t", f"{SESSION}:actor-0-0", f"exec bash {script}")
    assert run.tmux.commands[-1] == respawn  # The same script, in its window.


def test_a_worker_that_keeps_failing_ends_the_run_naming_it_and_the_end_of_its_log(run):
    log = run.launches["actor-0-1"].log_path
    with open(log, "w") as f:
        f.writelines(f"line {n}\n" for n in range(1, 21))
    run.end(0.5, "actor-0-1", status=1)
    run.keep_failing("actor-0-1")

    result = run.supervise(RestartPolicy(backoff_secs=0.5, max_restarts=2))

    assert result == Result(
        Outcome.GAVE_UP,
        "actor-0-1 (this host) exited with status 1, after 2 restarts within 600 s "
        f"(--max_restarts=2, --restart_window_secs=600): giving up. The end of its log {log}:\n"
        + "".join(f"line {n}\n" for n in range(6, 21)),
    )
    assert run.clock.t == 5
    assert run.restarts() == [(2, "actor-0-1"), (4, "actor-0-1")]
    assert [line for _, line in run.console.lines] == [
        restart_line("actor-0-1 (this host)", "exited with status 1", 0.5, 1, 1, at_most=2),
        restart_line("actor-0-1 (this host)", "exited with status 1", 1, 2, 2, at_most=2),
    ]


def test_restarts_older_than_the_window_no_longer_count(run):
    run.end(0.5, "actor-0-0", status=1)
    run.end(2.5, "actor-0-0", status=1)
    run.end(40.5, "actor-0-0", status=1)
    run.end(50, "learners")

    policy = RestartPolicy(backoff_secs=1, max_restarts=2, window_secs=30)
    assert run.supervise(policy) == Result(Outcome.FINISHED)
    name, cause = "actor-0-0 (this host)", "exited with status 1"
    assert run.console.lines == [
        (1, restart_line(name, cause, 1, 1, 1, at_most=2, window=30)),
        (3, restart_line(name, cause, 2, 2, 2, at_most=2, window=30)),
        (41, restart_line(name, cause, 1, 3, 1, at_most=2, window=30)),
    ]
    assert run.restarts() == [(2, "actor-0-0"), (5, "actor-0-0"), (42, "actor-0-0")]


def test_max_restarts_0_gives_up_at_the_first_failure(run):
    run.end(0.5, "actor-0-0", signal=9)
    result = run.supervise(RestartPolicy(max_restarts=0))
    log = run.launches["actor-0-0"].log_path
    assert result.outcome is Outcome.GAVE_UP
    assert result.message == (
        "actor-0-0 (this host) was killed by signal 9 (SIGKILL), after 0 restarts within 600 s "
        f"(--max_restarts=0, --restart_window_secs=600): giving up. The end of its log {log}:\n"
        f"(cannot read it: FileNotFoundError: [Errno 2] No such file or directory: '{log}')"
    )
    assert run.clock.t == 1 and run.restarts() == []


def test_an_actor_that_exits_0_is_not_restarted_and_the_run_goes_on(run):
    run.end(0.5, "actor-0-0", status=0)
    run.end(3.5, "actor-0-1", status=1)
    run.end(20, "learners")

    assert run.supervise() == Result(Outcome.FINISHED)
    assert run.console.lines == [
        (1, "actor-0-0 (this host) exited with status 0: not restarted."),
        (4, restart_line("actor-0-1 (this host)", "exited with status 1", 5, 1, 1)),
    ]
    assert run.restarts() == [(9, "actor-0-1")]


def test_a_closed_window_is_a_failure_and_its_worker_gets_a_new_window(run):
    run.clock.at(0.5, lambda: run.tmux.close(SESSION, "actor-0-0"))
    run.end(10, "learners")

    assert run.supervise() == Result(Outcome.FINISHED)
    cause = "is gone (its tmux window was closed)"
    assert run.console.lines == [(1, restart_line("actor-0-0 (this host)", cause, 5, 1, 1))]
    assert run.restarts() == [(6, "actor-0-0")]
    assert run.tmux.commands[-1][:6] == ("new-window", "-d", "-t", f"{SESSION}:", "-n", "actor-0-0")
    assert launcher.window_exit_status(run.tmux, SESSION, "actor-0-0") is None  # Running again.


def test_a_restart_tmux_refuses_counts_as_a_failure(run):
    run.end(0.5, "actor-0-0", status=1)
    run.clock.at(5.5, lambda: setattr(run.tmux, "refuse", "server exited unexpectedly"))
    run.clock.at(6.5, lambda: setattr(run.tmux, "refuse", None))
    run.end(20, "learners")

    assert run.supervise() == Result(Outcome.FINISHED)
    refused = "could not be restarted: tmux respawn-window actor-0-0: server exited unexpectedly"
    assert run.console.lines == [
        (1, restart_line("actor-0-0 (this host)", "exited with status 1", 5, 1, 1)),
        (6, restart_line("actor-0-0 (this host)", refused, 10, 2, 2)),
    ]
    assert run.restarts() == [(16, "actor-0-0")]


# The learners.


def test_the_learners_mpirun_is_restarted_by_the_same_script_naming_the_rank_that_failed(
    tmp_path, monkeypatch
):
    """The learners restore the newest checkpoint by themselves: the supervisor only starts
    the same mpirun again; its cause is the rank mpirun names in this run's part of its log."""
    run = Run(
        tmp_path,
        monkeypatch,
        LEARNER,
        "learner,10.0.0.3,8002,,22,bob,pa55word-x1",
        ACTOR_0,
        "actor,10.0.0.2,9002,,22,bob,pa55word-x1",
    )
    log = run.plan.mpirun.log_path
    with open(log, "w") as f:  # An earlier run's last lines.
        f.write("mpirun noticed that process rank 0 with PID 11 on node a exited on signal 15.\n")

    def rank_1_killed():
        with open(log, "a") as f:
            f.write(
                "[1,1]<stderr>:training\nmpirun noticed that process rank 1 with PID 4242 on "
                "node b exited on signal 9 (Killed).\n"
            )

    run.clock.at(2.5, rank_1_killed)
    run.end(2.5, "learners", status=137)
    run.end(10.5, "learners", status=1)  # Its log names no rank this time.
    run.end(30, "learners")

    assert run.supervise() == Result(Outcome.FINISHED)
    assert run.clock.t == 30
    name = "learners (mpirun on this host; ranks on this host, 10.0.0.3)"
    killed = (
        "exited with status 137 (process rank 1 with PID 4242 on node b exited on signal 9 "
        "(Killed))"
    )
    assert run.console.lines == [
        (3, restart_line(name, killed, 5, 1, 1)),
        (11, restart_line(name, "exited with status 1", 10, 2, 2)),
    ]
    assert run.restarts() == [(8, "learners"), (21, "learners")]  # The actors keep running.
    script = shlex.quote(run.plan.mpirun.script_path)
    respawn = ("respawn-window", "-k", "-t", f"{SESSION}:learners", f"exec bash {script}")
    assert [c for c in run.tmux.commands if c[0] == "respawn-window"] == [respawn, respawn]


# What the exit statuses of the roles (exit_codes.py) ask of the supervisor.

LEARNERS = "learners (mpirun on this host; ranks on this host)"


def test_an_actor_that_gave_up_on_its_learner_is_restarted_saying_so(run):
    run.end(0.5, "actor-0-0", status=exit_codes.EXIT_LEARNER_LOST)
    run.end(20, "learners")

    assert run.supervise() == Result(Outcome.FINISHED)
    cause = GAVE_UP_ON_LEARNER
    assert run.console.lines == [(1, restart_line("actor-0-0 (this host)", cause, 5, 1, 1))]
    assert run.restarts() == [(6, "actor-0-0")]


def test_learners_stopped_by_a_signal_before_their_budget_are_restarted_as_preempted(run):
    run.end(2.5, "learners", status=exit_codes.EXIT_STOPPED_BY_SIGNAL)
    run.end(20, "learners")

    assert run.supervise() == Result(Outcome.FINISHED)
    cause = "exited with status 6, stopped by a signal before its frame budget (preempted?)"
    assert run.console.lines == [(3, restart_line(LEARNERS, cause, 5, 1, 1))]
    assert run.restarts() == [(8, "learners")]


@pytest.mark.parametrize(
    "stop, outcome",
    [("--stop", Outcome.STOPPED), ("SIGTERM", Outcome.TERMINATED), ("SIGINT", Outcome.INTERRUPTED)],
)
def test_learners_stopped_by_a_signal_the_user_asked_for_are_not_restarted(run, stop, outcome):
    """The user's stop (--stop, or a signal to the frontend) reaches the learners before the
    supervisor sees it: their EXIT_STOPPED_BY_SIGNAL, even with no backoff, restarts nothing."""
    run.end(2.5, "learners", status=exit_codes.EXIT_STOPPED_BY_SIGNAL)

    def the_user_stops():  # After the statuses are read, before the restart.
        if run.clock.t != 3:
            return
        if stop == "--stop":
            run_state.remove(run.launch_dir)
        else:
            run.signals.received = signal.Signals[stop]

    result = run.supervise(RestartPolicy(backoff_secs=0), on_poll=the_user_stops)
    assert result.outcome is outcome
    assert run.clock.t == 3 and run.restarts() == []


def test_learners_that_cannot_write_checkpoints_end_the_run_naming_the_logdir(run):
    with open(run.plan.mpirun.log_path, "w") as f:
        f.write("checkpoint not written: No space left on device\n")
    run.end(2.5, "learners", status=exit_codes.EXIT_CHECKPOINTS_FAILING)

    result = run.supervise()
    assert result == Result(
        Outcome.NOT_RESTARTABLE,
        "The learners could not write checkpoints (--max_failed_checkpoints in a row): is the "
        f"disk of {LOGDIR} full or unwritable? Not restarting them. The end of their log "
        f"{run.plan.mpirun.log_path}:\ncheckpoint not written: No space left on device\n",
        status=exit_codes.EXIT_CHECKPOINTS_FAILING,
    )
    assert run.clock.t == 3 and run.restarts() == [] and run.console.lines == []


@pytest.mark.parametrize("name", ["actor-0-1", "learners"])
def test_a_worker_that_refused_its_input_ends_the_run_naming_it(run, name):
    """A locked --logdir, an actor of another agent, training that diverged: exit 2 again and
    again, whatever the restarts."""
    log = run.launches[name].log_path
    with open(log, "w") as f:
        f.write("experiment.py (actor 1): error: actor 1: learner trains another agent\n")
    run.end(2.5, name, status=exit_codes.EXIT_BAD_INPUT)

    result = run.supervise()
    where = LEARNERS if name == "learners" else "actor-0-1 (this host)"
    whose = "their" if name == "learners" else "its"
    assert result == Result(
        Outcome.NOT_RESTARTABLE,
        f"{where} exited with status 2, bad input, which a restart cannot mend: not restarting "
        f"it. The end of {whose} log {log}:\n"
        "experiment.py (actor 1): error: actor 1: learner trains another agent\n",
        status=exit_codes.EXIT_BAD_INPUT,
    )
    assert run.restarts() == []


# The final evaluation.


@pytest.mark.parametrize("evaluator_ends", [True, False])
def test_the_final_evaluation_is_waited_for_at_most_its_bound(
    tmp_path, monkeypatch, evaluator_ends
):
    run = Run(tmp_path, monkeypatch, LEARNER, ACTOR_0, EVALUATOR)
    run.end(2.5, "learners")
    if evaluator_ends:
        run.end(15.5, "evaluator-0")

    assert run.supervise(final_evaluation_secs=20) == Result(Outcome.FINISHED)
    waiting = (
        "The learners have finished: waiting at most 20 s for evaluator-0 to evaluate the final "
        "parameters."
    )
    end = (16, "evaluator-0 (this host) exited with status 0.")
    if not evaluator_ends:
        end = (23, "Stopped waiting for evaluator-0 after 20 s.")
    assert run.console.lines == [(3, waiting), end]
    assert run.clock.t == end[0]
    assert run.restarts() == []


def test_an_evaluator_killed_during_the_final_evaluation_is_not_restarted(tmp_path, monkeypatch):
    run = Run(tmp_path, monkeypatch, LEARNER, ACTOR_0, EVALUATOR)
    run.end(2.5, "learners")
    run.end(5.5, "evaluator-0", signal=9)

    assert run.supervise() == Result(Outcome.FINISHED)
    assert run.console.lines[1:] == [
        (6, "evaluator-0 (this host) was killed by signal 9 (SIGKILL).")
    ]
    assert run.clock.t == 6 and run.restarts() == []


def test_an_evaluator_waiting_for_its_restart_is_not_waited_for(tmp_path, monkeypatch):
    run = Run(tmp_path, monkeypatch, LEARNER, ACTOR_0, EVALUATOR)
    run.end(0.5, "evaluator-0", status=1)
    run.end(2.5, "learners")

    assert run.supervise() == Result(Outcome.FINISHED)
    assert run.console.lines == [
        (1, restart_line("evaluator-0 (this host)", "exited with status 1", 5, 1, 1))
    ]
    assert run.clock.t == 3 and run.restarts() == []


# Signals and a run stopped from elsewhere.


@pytest.mark.parametrize(
    "signum, outcome",
    [
        (signal.SIGTERM, Outcome.TERMINATED),
        (signal.SIGHUP, Outcome.TERMINATED),
        (signal.SIGINT, Outcome.INTERRUPTED),
    ],
)
def test_a_signal_ends_supervision_within_a_tenth_of_a_second(run, signum, outcome):
    run.end(0.5, "actor-0-0", status=1)  # Its restart, due at 6 s, never comes.
    run.clock.at(2.35, lambda: setattr(run.signals, "received", signum))

    assert run.supervise() == Result(outcome, signal.Signals(signum).name, signum)
    assert run.clock.t == pytest.approx(2.4)
    assert run.restarts() == []


def test_signals_records_the_first_signal_instead_of_dying_and_restores_the_handlers():
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    signals = supervisor.Signals((signal.SIGTERM, signal.SIGHUP))
    try:
        assert signals.received is None
        signal.raise_signal(signal.SIGHUP)
        signal.raise_signal(signal.SIGTERM)
        assert signals.received == signal.SIGHUP
        signals.watch(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):  # Ctrl-C again: not to be ignored.
            signal.raise_signal(signal.SIGINT)
    finally:
        signals.restore()
    assert {s: signal.getsignal(s) for s in previous} == previous


@pytest.mark.parametrize("how", ["stop", "another run", "tmux session killed"])
def test_a_run_stopped_elsewhere_ends_supervision_saying_how(run, how):
    state = run_state.path(run.launch_dir)
    stop, outcome, message = {
        "stop": (
            lambda: run_state.remove(run.launch_dir),
            Outcome.STOPPED,
            f"{state} is gone (the run was stopped, e.g. by --stop)",
        ),
        "another run": (
            lambda: run_state.write(run.launch_dir, {"run_id": "other", "remote": []}),
            Outcome.STOPPED,
            f"{state} records another run now",
        ),
        "tmux session killed": (
            lambda: run.tmux.kill_session(SESSION),
            Outcome.STOPPED_ELSEWHERE,
            f"tmux session {SESSION!r} is gone",
        ),
    }[how]
    run.clock.at(3.5, stop)
    polls = []

    assert run.supervise(on_poll=lambda: polls.append(run.clock.t)) == Result(outcome, message)
    assert polls == [0, 1, 2, 3, 4]  # The last poll too: the learners' last lines printed.


def test_a_stop_between_a_failure_and_its_restart_prevents_the_restart(run):
    run.end(0.5, "actor-0-0", status=1)

    def stop_at_the_restart():  # After the statuses are read, before the restart.
        if run.clock.t == 6:
            run_state.remove(run.launch_dir)

    result = run.supervise(on_poll=stop_at_the_restart)
    state = run_state.path(run.launch_dir)
    message = f"{state} is gone (the run was stopped, e.g. by --stop)"
    assert result == Result(Outcome.STOPPED, message)
    assert run.clock.t == 6 and run.restarts() == []


def test_a_stop_seen_half_way_is_waited_for_and_ends_supervision_as_a_stop(run, monkeypatch):
    """--stop kills the tmux session, then removes the state file, holding the run's lock: a
    supervisor that sees the session gone in between waits for the lock, then sees the stop."""
    unlocked = run_state.locked

    @contextlib.contextmanager
    def locked(directory):  # The stop, half-way, ends while the supervisor waits for the lock.
        if not run.tmux.has_session(SESSION) and run_state.exists(directory):
            run_state.remove(directory)
        with unlocked(directory):
            yield

    monkeypatch.setattr(run_state, "locked", locked)
    run.clock.at(3.5, lambda: run.tmux.kill_session(SESSION))

    state = run_state.path(run.launch_dir)
    message = f"{state} is gone (the run was stopped, e.g. by --stop)"
    assert run.supervise() == Result(Outcome.STOPPED, message)
    assert run.restarts() == []


# Remote workers.


@pytest.fixture
def remote_run(tmp_path, monkeypatch):
    return Run(tmp_path, monkeypatch, *REMOTE_ROWS)


def test_a_killed_remote_actor_is_started_again_over_ssh_and_its_new_pid_recorded(remote_run):
    run = remote_run
    first = run.pids["actor-0-0"]
    run.end(0.5, "actor-0-0", signal=9)
    run.clock.at(7.5, lambda: run.ssh.exits.update({run.ssh.started[0][2]: 7}))
    run.end(30, "learners")

    assert run.supervise() == Result(Outcome.FINISHED)
    (_, _, second), (_, _, third) = run.ssh.started
    assert run.restarts() == [(6, "actor-0-0"), (18, "actor-0-0")]
    name = f"actor-0-0 ({LOGIN})"
    assert run.console.lines == [
        (1, restart_line(name, "was killed by signal 9 (SIGKILL)", 5, 1, 1)),
        (8, restart_line(name, GAVE_UP_ON_LEARNER, 10, 2, 2)),  # The new PID's status.
    ]
    recorded = {e["name"]: e["pid"] for e in run_state.read(run.launch_dir)["remote"]}
    assert recorded == {"actor-0-0": third, "actor-0-1": run.pids["actor-0-1"]}
    assert len({first, second, third}) == 3


def test_a_failing_ssh_check_is_said_once_retried_once_a_poll_per_login_and_restarts_nothing(
    remote_run,
):
    run = remote_run
    run.clock.at(1.5, lambda: run.ssh.down.add(LOGIN))
    run.clock.at(4.5, lambda: run.ssh.down.clear())
    run.end(10, "learners")

    assert run.supervise() == Result(Outcome.FINISHED)
    assert run.console.lines == [
        (
            2,
            f"cannot check actor-0-0 ({LOGIN}) over SSH (timed out: no answer); trying again "
            "every 1 s",
        ),
        (5, f"checking actor-0-0 ({LOGIN}) over SSH works again"),
    ]
    # Both actors are behind the login: while it fails, one attempt a poll, then forgotten.
    down = [t for t, _ in run.ssh.gets if 2 <= t <= 4]
    assert down == [2, 3, 4]
    assert run.ssh.forgotten == [(2, LOGIN), (3, LOGIN), (4, LOGIN)]
    assert run.restarts() == []


def test_a_remote_restart_that_cannot_connect_counts_as_a_failure(remote_run):
    run = remote_run
    run.end(0.5, "actor-0-0", status=1)
    run.clock.at(5.5, lambda: run.ssh.down.add(LOGIN))
    run.clock.at(6.5, lambda: run.ssh.down.clear())
    run.end(20, "learners")

    assert run.supervise() == Result(Outcome.FINISHED)
    name = f"actor-0-0 ({LOGIN})"
    assert run.said(
        restart_line(name, "could not be restarted: timed out: no answer", 10, 2, 2)
    ) == [6]
    assert (6, LOGIN) in run.ssh.forgotten
    assert run.restarts() == [(16, "actor-0-0")]


def test_giving_up_on_a_remote_worker_shows_the_end_of_its_remote_log(remote_run):
    run = remote_run
    run.end(0.5, "actor-0-1", status=1)
    result = run.supervise(RestartPolicy(max_restarts=0))
    log = run.launches["actor-0-1"].log_path
    assert result == Result(
        Outcome.GAVE_UP,
        f"actor-0-1 ({LOGIN}) exited with status 1, after 0 restarts within 600 s "
        f"(--max_restarts=0, --restart_window_secs=600): giving up. The end of its log {log}:\n"
        f"{log}'s end",
    )
