"""One learner per --logdir (logdir_lock.py): the lock held by another real process refuses a
second holder and a second learner, naming the logdir and the holder's PID; the kernel frees
it when its holder dies; --mode=test reads a locked logdir."""

import os
import subprocess
import sys

import pytest

import logdir_lock
from exit_codes import EXIT_BAD_INPUT
from tests.training_settings import CARTPOLE
from tools.local_cluster import REPO, cluster_flags

HOLDER = (
    "import sys, time, logdir_lock\n"
    "with logdir_lock.hold(sys.argv[1]):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(300)\n"
)


@pytest.fixture
def held(tmp_path):
    """(logdir, the PID of another process holding its lock); that process killed at the end."""
    logdir = tmp_path / "logdir"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(logdir)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        yield logdir, holder
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_a_held_logdir_is_refused_naming_it_and_the_holder_then_freed_by_its_death(held):
    logdir, holder = held
    with pytest.raises(logdir_lock.LogdirLockedError) as refused, logdir_lock.hold(str(logdir)):
        pass
    assert f"--logdir={logdir} is in use by another learner (PID {holder.pid} holds " in str(
        refused.value
    )
    holder.kill()  # no unlock, no cleanup: the kernel releases the lock
    holder.wait()
    with logdir_lock.hold(str(logdir)):
        assert (logdir / logdir_lock.LOCK_NAME).read_text() == f"{os.getpid()}\n"


@pytest.mark.slow
def test_a_second_learner_is_refused_before_it_serves(held, spawn):
    logdir, holder = held
    learner = spawn([*cluster_flags(1), *CARTPOLE, f"--logdir={logdir}"], "second_learner")
    assert learner.wait(timeout=120) == EXIT_BAD_INPUT, learner.log()[-3000:]
    log = learner.log()
    assert (
        f"experiment.py (learner 0): error: --logdir={logdir} is in use by another learner "
        f"(PID {holder.pid} holds {logdir / logdir_lock.LOCK_NAME})"
    ) in log
    assert "serving actors" not in log


def test_test_mode_reads_a_locked_logdir_and_names_its_mode_in_errors(held, spawn):
    logdir, _ = held
    evaluation = spawn([*CARTPOLE, f"--logdir={logdir}", "--mode=test"], "test_mode")
    assert evaluation.wait(timeout=120) == EXIT_BAD_INPUT, evaluation.log()[-3000:]
    assert (
        f"experiment.py (--mode=test): error: no checkpoint in {logdir / 'checkpoints'}"
        in evaluation.log()
    )
