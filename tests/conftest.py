"""Shared fixtures: processes started by a test are always killed at its end; a directory
every user may read; a private tmux server."""

import os
import pathlib
import shutil
import sys
import tempfile
import uuid

import libtmux
import pytest

import local_cluster


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
