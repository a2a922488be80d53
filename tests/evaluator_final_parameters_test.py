"""An evaluator that gets no CPU when training ends (SCHED_IDLE on a busy host; here SIGSTOP)
still evaluates the parameters that end training: its learner, finished, keeps serving them
until the evaluator says it holds them, instead of exiting a few seconds after its budget."""

import signal

import pytest

from tests.training_settings import CARTPOLE
from tools.local_cluster import cluster_flags

BUDGET = 20_000  # frames: a few dozen batches, then the end of training
# How long the finished learner serves its evaluator (and the clients wait for their learner):
# the default, as the stopped evaluator, once let go on, may be starved again on a loaded host.
WAIT_SECS = 600


@pytest.mark.slow
def test_a_learner_serves_the_final_parameters_until_its_stopped_evaluator_takes_them(
    spawn, tmp_path
):
    flags = [
        *cluster_flags(1, evaluator=True),
        *CARTPOLE,
        f"--logdir={tmp_path}",
        f"--total_environment_frames={BUDGET}",
        f"--eval_interval_frames={BUDGET}",
        "--eval_games=2",
        f"--learner_wait_secs={WAIT_SECS}",
    ]
    learner = spawn([*flags, "--job_name=learner"], "learner")
    actor = spawn([*flags, "--job_name=actor", "--task=0"], "actor")
    evaluator = spawn([*flags, "--job_name=evaluator"], "evaluator")
    evaluator.wait_for_log("connected to learner", timeout=300)
    evaluator.signal(signal.SIGSTOP)
    try:
        learner.wait_for_log("to take the final parameters", timeout=600)
        assert learner.popen.poll() is None, learner.log()[-3000:]
    finally:
        evaluator.signal(signal.SIGCONT)
    assert evaluator.wait(timeout=300) == 0, evaluator.log()[-3000:]
    assert "evaluated the final parameters; exiting" in evaluator.log()
    assert learner.wait(timeout=120) == 0, learner.log()[-3000:]
    assert "took the final parameters" in learner.log()
    assert actor.wait(timeout=60) == 0, actor.log()[-3000:]
