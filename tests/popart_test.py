"""PopArt's value head (--popart): the baseline is std x the normalised output + mean; moving the
statistics to the value targets' running moments keeps every value as it was, and only the
normalised layer is trained."""

import numpy as np
import pytest
import tensorflow as tf

import agents
import config as config_lib
import train_step
import unrolls
from agents.popart import PopArtValueHead
from agents.running_moments import RunningMoments
from tools import random_unrolls

OBSERVATION_SPEC = ((4,), np.float32)
NUM_ACTIONS, B, T = 2, 3, 5


def test_moving_the_statistics_preserves_the_outputs():
    head = PopArtValueHead()
    features = tf.constant(np.random.default_rng(0).normal(size=(8, 16)), tf.float32)
    before = head(features).numpy()
    head.preserve_outputs(tf.constant(3.0), tf.constant(4.0))
    np.testing.assert_allclose(head(features), before, rtol=1e-5, atol=1e-5)
    assert (float(head.mean), float(head.std)) == (3.0, 4.0)
    # ... and again from there, down in scale.
    head.preserve_outputs(tf.constant(-1.0), tf.constant(0.5))
    np.testing.assert_allclose(head(features), before, rtol=1e-4, atol=1e-4)


def test_the_baseline_is_the_normalised_output_in_the_statistics_units():
    head = PopArtValueHead()
    features = tf.constant(np.random.default_rng(1).normal(size=(8, 16)), tf.float32)
    normalized = head(features).numpy()  # at mean 0, std 1
    head.mean.assign(2.0)
    head.std.assign(10.0)
    np.testing.assert_allclose(head(features), 10.0 * normalized + 2.0, rtol=1e-5)


def popart_agent(seed=0):
    tf.random.set_seed(seed)
    agent = agents.MLPAgent(NUM_ACTIONS, popart=True)
    batch = random_unrolls.random_unroll(
        agent, OBSERVATION_SPEC, NUM_ACTIONS, B, T, np.random.default_rng(seed)
    )
    inputs = unrolls.to_time_major(batch)
    baselines(agent, inputs)  # makes the variables
    return agent, inputs


def baselines(agent, inputs):
    outputs, _ = agent.unroll(inputs.agent_outputs.action, inputs.env_outputs, inputs.agent_state)
    return outputs.baseline.numpy()  # [T+1, B]


def test_the_agent_trains_only_the_normalised_layer_and_ships_the_statistics():
    agent, inputs = popart_agent()
    plain = agents.MLPAgent(NUM_ACTIONS)
    plain.unroll(inputs.agent_outputs.action, inputs.env_outputs, inputs.agent_state)
    trainable = [v.shape for v in agent.trainable_variables]
    assert trainable == [v.shape for v in plain.trainable_variables]
    # The statistics are variables of the agent (the actors receive them with the parameters),
    # not trained.
    statistics = {v.name.split("/")[-1] for v in agent.variables if not v.trainable}
    assert statistics == {"target_mean:0", "target_std:0"}
    assert agent.popart_head is not None and plain.popart_head is None
    assert "PopArt value head" in agent.describe()


def test_following_the_value_targets_keeps_the_values_and_takes_their_moments():
    """train_step.follow_value_targets, as the learner calls it after folding each batch's
    targets: the head's statistics become the moments' mean and floored std, and the values
    on a batch do not change."""
    agent, inputs = popart_agent(2)
    moments = train_step.value_target_moments(config_lib.Config(popart=True))
    before = baselines(agent, inputs)
    for mean, variance in ((5.0, 25.0), (-2.0, 1e-6)):  # the second below the floor
        moments.fold(tf.constant(mean), tf.constant(variance + mean**2), 10**6)
        train_step.follow_value_targets(agent, moments)
        np.testing.assert_allclose(baselines(agent, inputs), before, rtol=1e-4, atol=1e-4)
        head = agent.popart_head
        np.testing.assert_allclose(float(head.mean), float(moments.mean), rtol=1e-6)
        floored = max(float(moments.variance), train_step.MIN_TARGET_VARIANCE)
        np.testing.assert_allclose(float(head.std), np.sqrt(floored), rtol=1e-5)


def test_without_popart_following_the_targets_changes_nothing():
    tf.random.set_seed(3)
    agent = agents.MLPAgent(NUM_ACTIONS)
    batch = random_unrolls.random_unroll(
        agent, OBSERVATION_SPEC, NUM_ACTIONS, B, T, np.random.default_rng(3)
    )
    before = baselines(agent, unrolls.to_time_major(batch))  # the variables made
    variables = [v.numpy() for v in agent.variables]
    moments = RunningMoments(name="value_target_moments")
    moments.create_variables([])
    moments.fold(tf.constant(5.0), tf.constant(50.0), 100)
    train_step.follow_value_targets(agent, moments)
    for variable, value in zip(agent.variables, variables, strict=True):
        np.testing.assert_array_equal(variable.numpy(), value)
    np.testing.assert_array_equal(baselines(agent, unrolls.to_time_major(batch)), before)


@pytest.mark.parametrize("std", [0.25, 4.0])
def test_the_value_terms_gradient_on_the_layer_is_in_the_targets_units(std):
    """The value term over the targets' variance (PopArt's loss): for the same values and
    targets, its gradient on the normalised layer is the error in the head's units, (v - G) /
    std, times the features: it scales with 1 / std (a plain head's with 1 / std**2)."""
    agent, inputs = popart_agent(4)
    config = config_lib.Config(popart=True, entropy_cost=0.0)

    def value_gradient_norm(target_std):
        head = agent.popart_head
        head.preserve_outputs(tf.constant(0.0), tf.constant(target_std))
        with tf.GradientTape() as tape:
            _, parts, _ = train_step.actor_critic_loss(
                agent, inputs, config, target_variance=tf.constant(target_std**2)
            )
        layer = [v for v in agent.trainable_variables if "/baseline/normalized/" in v.name]
        return float(tf.linalg.global_norm(tape.gradient(parts["baseline"], layer)))

    at_one = value_gradient_norm(1.0)
    np.testing.assert_allclose(value_gradient_norm(std), at_one / std, rtol=1e-3)
