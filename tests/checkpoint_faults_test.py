"""Checkpoints and summaries that cannot be written, for real: a full disk (a 1 MiB tmpfs) and a
checkpoint directory made immutable (chattr +i: as root, the one kind of unwritable directory
TF's save cannot get past). Each failed write is one line naming the path and the cause, what it
left is removed, training goes on and the next write works once the disk does; learners whose
checkpoints keep failing stop together with EXIT_CHECKPOINTS_FAILING."""

import contextlib
import logging
import os
import subprocess
import types

import numpy as np
import pytest
import tensorflow as tf

import checkpointing
import config
import progress
from exit_codes import EXIT_CHECKPOINTS_FAILING
from tests.checkpointing_test import learner_checkpointer
from tests.progress_test import OUTPUTS, unroll
from tests.training_settings import CARTPOLE
from tools.local_cluster import cluster_flags


@pytest.fixture
def small_disk(tmp_path):
    """A directory on a tmpfs of 1 MiB, unmounted at the end."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mount_point], check=True)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", mount_point], check=True)


@contextlib.contextmanager
def disk_full(directory):
    """Fills the file system of `directory` with a file, removed when the block ends."""
    filler = directory / "filler"
    with open(filler, "wb") as f, contextlib.suppress(OSError):
        f.write(bytes(2**21))
    try:
        yield
    finally:
        filler.unlink()


@contextlib.contextmanager
def immutable(directory):
    """`directory` immutable (chattr +i) inside the block: nothing can be created in it."""
    subprocess.run(["chattr", "+i", directory], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", directory], check=True)


def saved_once(logdir):
    """(a learner's Checkpointer in `logdir` that saved ckpt-1, its checkpoints directory)."""
    checkpointer, _, _ = learner_checkpointer(logdir)
    checkpointer.restore_latest()
    checkpointer.save()
    return checkpointer, logdir / "checkpoints"


@pytest.fixture
def errors(caplog):
    """The messages of the ERROR records logged so far."""
    caplog.set_level(logging.INFO)
    return lambda: [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_full_disk_fails_a_checkpoint_in_one_line_and_the_next_is_written(small_disk, errors):
    checkpointer, directory = saved_once(small_disk)
    with disk_full(small_disk):
        assert checkpointer.save() is None
    assert errors() == [
        f"checkpoint {directory / 'ckpt-2'} not written: No space left on device; removed "
        "ckpt-2_temp; failure 1 in a row, at most 3 (--max_failed_checkpoints)"
    ]
    assert sorted(os.listdir(directory)) == [
        "checkpoint",
        "ckpt-1.data-00000-of-00001",
        "ckpt-1.index",
    ]
    assert checkpointer.save() == str(directory / "ckpt-3")
    assert not checkpointer.failing
    assert checkpointing.find_checkpoints(str(directory))[0][0] == str(directory / "ckpt-3")


def test_an_unwritable_checkpoint_directory_fails_until_too_many_in_a_row(tmp_path, errors):
    checkpointer, directory = saved_once(tmp_path)
    with immutable(directory):
        for _ in range(3):
            assert checkpointer.save() is None
        assert checkpointer.failing
    assert [line.split(": ", 1)[1].split(";")[0] for line in errors()] == [
        "Operation not permitted"
    ] * 3
    assert "failure 3 in a row, at most 3" in errors()[-1]
    assert checkpointer.save() == str(directory / "ckpt-5")
    assert not checkpointer.failing


def test_summaries_on_a_full_disk_are_one_line_until_they_are_written_again(
    small_disk, caplog, errors
):
    frames = tf.Variable(0, dtype=tf.int64)
    settings = config.Config(logdir=str(small_disk), log_secs=0)
    transport = types.SimpleNamespace(queue_size=lambda: 0)
    log = progress.ProgressLog(settings, True, frames, tf.Variable(1e-3), transport)
    games = [1.0] * 50
    with disk_full(small_disk):
        for _ in range(3):  # three intervals, every write failing
            frames.assign_add(1000)
            log.step(unroll(games, acted_with=0), OUTPUTS, len(games), sum(games), version=1)
    frames.assign_add(1000)
    log.step(unroll(games, acted_with=0), OUTPUTS, len(games), sum(games), version=1)
    log.close()
    assert errors() == [
        f"summaries in {small_disk} not written: No space left on device; trying again at "
        "every interval"
    ]
    assert f"summaries in {small_disk} written again" in caplog.text
    assert np.isfinite(log.mean_return()[0])


@pytest.mark.slow
def test_learners_whose_checkpoints_keep_failing_stop_together(spawn, tmp_path):
    logdir = tmp_path / "logdir"
    (logdir / "checkpoints").mkdir(parents=True)
    flags = [*cluster_flags(1), *CARTPOLE, f"--logdir={logdir}", "--checkpoint_secs=1"]
    flags.append("--max_failed_checkpoints=2")
    with immutable(logdir / "checkpoints"):
        learner = spawn([*flags, "--job_name=learner"], "learner")
        actor = spawn([*flags, "--job_name=actor", "--task=0"], "actor")
        assert learner.wait(timeout=120) == EXIT_CHECKPOINTS_FAILING, learner.log()[-3000:]
    log = learner.log()
    assert log.count("not written: Operation not permitted") == 2, log[-3000:]
    assert "2 checkpoint(s) in a row not written (--max_failed_checkpoints): stopping" in log
    assert "Traceback" not in log
    # Stopped short of its budget: its actor is not told training finished (it waits for the
    # learner's return, then gives up: tests/learner_stop_test.py).
    assert "learner finished training" not in actor.log()
    assert os.listdir(logdir / "checkpoints") == []
