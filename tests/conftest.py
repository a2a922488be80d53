"""Shared fixtures: processes started by a test are always killed at its end."""

import sys

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
