"""Fakes for the frontend's unit tests: a tmux server whose windows run nothing, and the plan of
a workers CSV, so that launcher.py and supervisor.py are tested without starting any process."""

import dataclasses
import pathlib

from libtmux.exc import ObjectDoesNotExist

from frontend import launcher, workers_csv

HEADER = "job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password"
THIS_HOST = frozenset({"localhost", "10.1.2.3"})  # As workers_csv.local_addresses() would say.
RUN_ID = "20250101-000000-run"
_NO_DEFAULT = object()


def plan(tmp_path, *rows, flag_args=(), local=None, remote=None, as_root=False, environ=None):
    """launcher.plan of the workers CSV `rows` (THIS_HOST's rows are local), its launch dir
    in tmp_path; -> (worker sets, plan)."""
    path = pathlib.Path(tmp_path, "workers.csv")
    path.write_text("\n".join([HEADER, *rows]) + "\n")
    worker_sets = workers_csv.load_worker_sets(str(path), THIS_HOST, environ or {})
    local = local or launcher.Place("/venv/bin/python", "/repo")
    launch_dir = str(pathlib.Path(tmp_path, "launch"))
    return worker_sets, launcher.plan(
        worker_sets, list(flag_args), launch_dir, RUN_ID, local, remote or local, "mpirun", as_root
    )


class Query(list):
    """libtmux's QueryList, as far as launcher.py uses it: `get` by attributes."""

    def get(self, default=_NO_DEFAULT, **attributes):
        for item in self:
            if all(getattr(item, name) == value for name, value in attributes.items()):
                return item
        if default is _NO_DEFAULT:
            raise ObjectDoesNotExist(f"no object with {attributes}")
        return default


@dataclasses.dataclass
class Pane:
    command: str
    pane_dead: str = "0"
    pane_dead_status: str | None = None
    pane_dead_signal: str | None = None
    unreaped: tuple | None = None  # (status, signal) of a dead process tmux has not reaped yet.

    def refresh(self):
        pass  # The fake's fields are always current.


@dataclasses.dataclass
class Window:
    window_name: str
    panes: list
    remain_on_exit: bool


@dataclasses.dataclass
class Session:
    session_name: str
    windows: Query


@dataclasses.dataclass
class Result:
    stderr: list


class FakeTmux:
    """A libtmux.Server whose windows run nothing: a test ends a window's process (`end`),
    closes a window or kills the session when it wants.

    `commands` holds the argv of every tmux command run; `started` every (clock(), window name)
    a process started in (a new window or a respawned one), and `on_start(name)` is called then.
    """

    def __init__(self, clock=lambda: 0.0):
        self.sessions = Query()
        self.commands = []
        self.started = []
        self.on_start = lambda name: None
        self.refuse = None  # A tmux error every later command fails with, if set.
        self._clock = clock

    def has_session(self, name):
        return self.sessions.get(session_name=name, default=None) is not None

    def cmd(self, *args):
        self.commands.append(args)
        if self.refuse:
            return Result([self.refuse])
        if args[0] in ("new-session", "new-window"):
            options = list(args[: args.index(";")])
            name, command = options[options.index("-n") + 1], options[-1]
            if args[0] == "new-session":
                session = Session(options[options.index("-s") + 1], Query())
                self.sessions.append(session)
            else:
                session = self.sessions.get(session_name=options[options.index("-t") + 1][:-1])
            remain = args[args.index(";") + 1 :][-2:] == ("remain-on-exit", "on")
            session.windows.append(Window(name, [Pane(command)], remain))
            self._start(name)
        elif args[0] == "respawn-window":
            session_name, name = args[args.index("-t") + 1].split(":")
            window = self.sessions.get(session_name=session_name).windows.get(window_name=name)
            window.panes[0] = Pane(args[-1])
            self._start(name)
        elif args[0] == "run-shell":  # Another child exits: tmux reaps every zombie.
            for session in self.sessions:
                for window in session.windows:
                    pane = window.panes[0]
                    if pane.unreaped:
                        pane.pane_dead_status, pane.pane_dead_signal = pane.unreaped
                        pane.unreaped = None
        return Result([])

    def _start(self, name):
        self.started.append((self._clock(), name))
        self.on_start(name)

    # What a test does to the windows.

    def pane(self, session, window):
        return self.sessions.get(session_name=session).windows.get(window_name=window).panes[0]

    def end(self, session, window, status=0, signal=None, reaped=True):
        """The window's process ends with `status`, or is killed by `signal`; `reaped=False`:
        tmux missed its SIGCHLD (its status unknown until tmux reaps it)."""
        pane = self.pane(session, window)
        pane.pane_dead = "1"
        fields = (None if signal else str(status), str(signal) if signal else None)
        if reaped:
            pane.pane_dead_status, pane.pane_dead_signal = fields
        else:
            pane.unreaped = fields

    def close(self, session, window):
        windows = self.sessions.get(session_name=session).windows
        windows.remove(windows.get(window_name=window))

    def kill_session(self, session):
        self.sessions.remove(self.sessions.get(session_name=session))

    def window_names(self, session):
        return [window.window_name for window in self.sessions.get(session_name=session).windows]
