"""Shared fixtures: processes started by a test are always killed at its end."""

import pytest

from tests import processes


@pytest.fixture
def spawn(tmp_path):
    """spawn(args, name, env=None) starts experiment.py, logging to tmp_path/<name>.log."""
    started = []

    def start(args, name, env=None):
        process = processes.experiment(args, tmp_path / f"{name}.log", env=env)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
