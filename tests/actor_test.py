"""actor.Actor on a real transport (TF servers on loopback, tests/loopback_transport.py) with a
real CartPole vector env and MLP agent: what its unrolls say about the parameters it acted
with."""

import dataclasses
import threading

import numpy as np
import pytest

import actor
import config as config_lib
import learner_link
import roles
from tests.loopback_transport import start_worker_set

UNROLL_LENGTH = 6
NUM_ENVS = 2


class NewParametersAtEachPull:
    """The actor's transport, with the learner publishing the next version right before each
    pull: weights 0 and biases (and the input statistics' rank-1 means and variances) equal to
    the version, so that every baseline the agent computes is the version of the parameters it
    acted with, whatever the observation."""

    def __init__(self, learner_side, actor_side, shapes):
        self._learner_side, self._actor_side, self._shapes = learner_side, actor_side, shapes
        self._published = 0

    def pull_parameters(self, timeout_secs=None):
        self._published += 1
        values = [
            np.full(shape, self._published if len(shape) == 1 else 0, np.float32)
            for shape in self._shapes
        ]
        assert self._learner_side.publish(values, frames=0) == self._published
        return self._actor_side.pull_parameters(timeout_secs)

    def __getattr__(self, name):  # enqueue, reconnect, training_finished: the real ones.
        return getattr(self._actor_side, name)


@pytest.mark.parametrize("refresh_steps, versions", [(0, [1]), (2, [1, 2, 3])])
def test_an_actor_loads_new_parameters_every_refresh_steps_inside_an_unroll(
    refresh_steps, versions
):
    config = dataclasses.replace(
        config_lib.Config(),
        level_name="CartPole-v1",
        agent_name="MLPAgent",
        unroll_length=UNROLL_LENGTH,
        num_envs_per_actor=NUM_ENVS,
        parameter_refresh_steps=refresh_steps,
    )
    agent, observation_spec, num_actions, _ = roles.build_agent(config)
    unroll_spec = roles.unroll_spec(config, agent, observation_spec, num_actions)
    # What the learner publishes (roles.py): the input statistics too.
    parameter_specs = [(v.shape, v.dtype) for v in agent.variables]
    learner_host, learner_side, actor_side = start_worker_set(parameter_specs, unroll_spec)
    learner_side.initialize()
    shapes = [shape for shape, _ in parameter_specs]
    transport = NewParametersAtEachPull(learner_side, actor_side, shapes)
    link = learner_link.LearnerLink(transport, learner_host, 120, "actor under test")
    env = actor.create_env(config, "test")
    acting = actor.Actor(config, agent, link, env, "actor under test")
    exit_codes = []
    thread = threading.Thread(target=lambda: exit_codes.append(acting.run()))
    thread.start()
    try:
        unroll = unroll_spec.pack(learner_side.dequeue(NUM_ENVS, timeout_ms=120_000))
    finally:
        learner_side.finish()
        thread.join(timeout=120)
        env.close()
        learner_side.session.close()
        actor_side.session.close()
    assert exit_codes == [0]

    # Step t of the unroll acted at agent_outputs[t + 1] (batch-major [B, T + 1]).
    acted_with = [
        versions[step // refresh_steps] if refresh_steps else 1 for step in range(UNROLL_LENGTH)
    ]
    np.testing.assert_array_equal(unroll.agent_outputs.baseline[:, 1:], [acted_with] * NUM_ENVS)
    # and the unroll records their mean (the learner's policy lag is measured with it).
    np.testing.assert_array_equal(unroll.parameter_version, [round(np.mean(acted_with))] * NUM_ENVS)
