"""An actor (or evaluator) whose agent is not its learner's (another --agent_name, or another
level's actions) is refused at once, in one line naming both agents, with the exit status of bad
input; not after --learner_wait_secs as a learner that never answered."""

import pytest
import tensorflow as tf

import learner_link
from exit_codes import EXIT_BAD_INPUT
from tests.loopback_transport import PARAMETER_SPECS, UNROLL_SPEC, start_worker_set
from tools.local_cluster import cluster_flags

PIXELS = ["--level_name=PixelBandit-v0", "--learner_wait_secs=120"]


def test_a_learner_of_other_parameters_is_refused_at_once_naming_both():
    other = [*PARAMETER_SPECS, ((5,), tf.float32)]
    learner_host, learner, actor = start_worker_set(PARAMETER_SPECS, UNROLL_SPEC, other)
    learner.initialize()
    learner.publish([tf.zeros(shape, dtype).numpy() for shape, dtype in PARAMETER_SPECS], 0)
    link = learner_link.LearnerLink(actor, learner_host, 600, "actor 0")
    with pytest.raises(learner_link.AgentMismatchError) as refused:
        link.wait_for_parameters()
    assert str(refused.value) == (
        f"actor 0: learner {learner_host} trains an agent (2 parameters, 10 values), this "
        "process has an agent (3 parameters, 15 values): give every worker of the set the same "
        "--agent_name, --level_name, --width, --height and --normalize_input"
    )


@pytest.mark.slow
def test_an_actor_of_another_agent_name_exits_naming_both(spawn):
    flags = [*cluster_flags(1), *PIXELS]
    learner = spawn([*flags, "--agent_name=SimpleConvNetAgent"], "learner")
    actor = spawn([*flags, "--agent_name=ResNetAgent", "--job_name=actor", "--task=0"], "actor")
    assert actor.wait(timeout=120) == EXIT_BAD_INPUT, actor.log()[-3000:]
    learner.kill()
    line = next(line for line in actor.log().splitlines() if "error:" in line)
    assert line.startswith("experiment.py (actor 0): error: actor 0 (127.0.0.1:"), line
    assert "trains SimpleConvNetAgent, 3 actions, input normalised (" in line, line
    assert "this process has ResNetAgent, 3 actions, input normalised (" in line, line
    assert "no TF server answering" not in actor.log()
