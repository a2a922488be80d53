"""A learner stopped by a signal before its frame budget (a scheduler's preemption) says so by
its exit status, EXIT_STOPPED_BY_SIGNAL, not 0: a supervisor must not end the run as trained;
nor does its actor take training for finished: it waits for the learner's restart, then gives
up with EXIT_LEARNER_LOST."""

import signal

import pytest

from exit_codes import EXIT_LEARNER_LOST, EXIT_STOPPED_BY_SIGNAL
from tests.training_settings import CARTPOLE
from tools.local_cluster import cluster_flags


@pytest.mark.slow
def test_a_learner_stopped_by_sigterm_before_its_budget_exits_with_its_own_status(spawn, tmp_path):
    flags = [*cluster_flags(1), *CARTPOLE, f"--logdir={tmp_path}"]
    learner = spawn([*flags, "--job_name=learner"], "learner")
    actor = spawn([*flags, "--job_name=actor", "--task=0", "--learner_wait_secs=10"], "actor")
    learner.wait_for_log("frames/s", timeout=120)  # training
    learner.signal(signal.SIGTERM)
    assert learner.wait(timeout=120) == EXIT_STOPPED_BY_SIGNAL, learner.log()[-3000:]
    log = learner.log()
    assert log.rindex("saved checkpoint") > log.index("SIGTERM received")
    assert actor.wait(timeout=60) == EXIT_LEARNER_LOST, actor.log()[-3000:]
    assert "learner finished training" not in actor.log()
