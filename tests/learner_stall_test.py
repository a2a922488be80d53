"""A learner stopped (SIGSTOP) longer than its actor waits: the actor gives up on it, naming the
stall (EXIT_LEARNER_LOST, for the supervisor to restart it), not exit 0 as for a finished
training; the learner, let go on, says that its own freeze explains the missing batch and waits
again, instead of stopping every learner as if its actors had gone quiet."""

import signal
import time

import pytest

from exit_codes import EXIT_LEARNER_LOST
from tests.training_settings import CARTPOLE
from tools.local_cluster import cluster_flags

# The actor's --learner_wait_secs and the learner's --batch_timeout_secs: well beyond a step
# (its retraces included) on a loaded machine, so neither lapses before the stop, and shorter
# than the stop, so both lapse during it.
PATIENCE_SECS = 30
STOPPED_SECS = 45


@pytest.mark.slow
def test_a_stopped_learner_is_given_up_on_and_blames_no_actor_for_its_own_freeze(spawn, tmp_path):
    flags = [
        *cluster_flags(1),
        *CARTPOLE,
        f"--logdir={tmp_path}",
        f"--batch_timeout_secs={PATIENCE_SECS}",
    ]
    learner = spawn([*flags, "--job_name=learner"], "learner")
    actor = spawn(
        [*flags, "--job_name=actor", "--task=0", f"--learner_wait_secs={PATIENCE_SECS}"], "actor"
    )
    deadline = time.monotonic() + 150
    while learner.log().count("frames/s") < 2:  # Steps after the first: versions move.
        assert time.monotonic() < deadline, learner.log()[-3000:]
        time.sleep(0.5)
    learner.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        assert actor.wait(timeout=STOPPED_SECS + 30) == EXIT_LEARNER_LOST, actor.log()[-3000:]
        time.sleep(max(0.0, stopped_at + STOPPED_SECS - time.monotonic()))
    finally:
        learner.signal(signal.SIGCONT)
    assert "'s parameters stayed at version " in actor.log(), actor.log()[-3000:]
    assert "learner finished training" not in actor.log()

    learner.wait_for_log("but this learner itself was stopped or frozen for ", timeout=30)
    assert "are they alive?" not in learner.log(), learner.log()[-3000:]
