"""The suite's order (slow files first) and shared fixtures: processes started by a test are
always killed at its end; a directory every user may read; a private tmux server; frontend runs,
undone at teardown; remote hosts."""

import os
import pathlib
import shutil
import sys
import tempfile
import uuid

import libtmux
import pytest

from tests import netns_sshd
from tests.frontend_runs import Following, frontend, run_id_of, undo_run
from tools import local_cluster


def pytest_collection_modifyitems(items):
    """Files with a slow test first: pytest-xdist (--dist loadfile) hands out whole files in this
    order, so the long ones start early and the short ones fill the end, rather than one worker
    running a long file alone while the other has nothing left."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: order within kept


@pytest.fixture
def start(tmp_path):
    """start(argv, name, env=None): a Process logging to tmp_path/<name>.log."""
    started = []

    def run(argv, name, env=None):
        process = local_cluster.Process(argv, tmp_path / f"{name}.log", env=env)
        started.append(process)
        return process

    yield run
    for process in started:
        process.kill()


@pytest.fixture
def spawn(start):
    """spawn(args, name, env=None): experiment.py with `args` (list of --flag=value)."""

    def run(args, name, env=None):
        return start([sys.executable, local_cluster.EXPERIMENT, *args], name, env=env)

    return run


@pytest.fixture
def open_dir():
    """A directory every user may pass through (pytest's tmp_path is its owner's alone)."""
    directory = pathlib.Path(tempfile.mkdtemp(prefix="open_dir_"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory)


@pytest.fixture
def tmux_socket():
    """A tmux socket name of its own (tmux -L), its server killed at teardown."""
    name = f"impt-{uuid.uuid4().hex[:8]}"
    yield name
    server = libtmux.Server(socket_name=name)
    if server.is_alive():
        server.kill()
    socket_dir = pathlib.Path(os.environ.get("TMUX_TMPDIR", "/tmp"), f"tmux-{os.getuid()}")
    (socket_dir / name).unlink(missing_ok=True)  # tmux leaves its socket file behind.


@pytest.fixture
def runs(tmux_socket):
    """run(logdir, *args): the frontend on a private tmux server; each run undone at teardown."""
    started = []  # (logdir, run id)

    def run(logdir, *args, env=None, timeout=120):
        code, out, err = frontend(
            f"--logdir={logdir}",
            f"--tmux_socket_name={tmux_socket}",
            *args,
            env=env,
            timeout=timeout,
        )
        if out.startswith("Run "):
            started.append((logdir, run_id_of(out)))
        return code, out, err

    yield run
    for logdir, run_id in started:
        undo_run(logdir, run_id)


@pytest.fixture
def follows(tmux_socket, tmp_path):
    """follow(logdir, *args): the frontend with --follow, started in the background.

    At teardown: killed if still running, then its run stopped and anything left killed.
    """
    started = []  # (Following, logdir)

    def follow(logdir, *args):
        directory = tmp_path / f"frontend-{len(started)}"
        directory.mkdir()
        following = Following(
            directory, [f"--logdir={logdir}", f"--tmux_socket_name={tmux_socket}", *args]
        )
        started.append((following, logdir))
        return following

    yield follow
    for following, logdir in started:
        if following.popen.poll() is None:
            following.popen.kill()
            following.popen.wait(timeout=10)
        if following.run_id():
            undo_run(logdir, following.run_id())


@pytest.fixture(scope="module")
def hosts():
    """Two remote hosts: network namespaces with sshd (tests/netns_sshd.py), one set a module."""
    yield from netns_sshd.hosts_for_a_fixture(2)
