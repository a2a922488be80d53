"""Input normalisation (--normalize_input): the running statistics are the moments of every
frame folded in, they scale each element (constant ones to 0, rare ones clipped at 5), they
belong to the agent's variables but not to its trainable ones, and the learner folds in each
batch's fresh frames only."""

import types

import numpy as np
import pytest
import tensorflow as tf

import agents
import learner
from agents.input_normalization import InputNormalizer, moments
from tests.agents_test import NUM_ACTIONS, B, T, make_actions, make_env_outputs


def fold_batches(normalizer, batches):
    for batch in batches:
        normalizer(tf.constant(batch[:1]))  # creates the variables, as the agent's first call
        normalizer.fold(*moments(tf.constant(batch)), len(batch))


def test_folded_batches_give_the_moments_of_all_their_frames():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=i, scale=1 + i, size=(n, 3, 2)).astype(np.float32)
               for i, n in enumerate((5, 17, 2))]  # fmt: skip
    normalizer = InputNormalizer()
    fold_batches(normalizer, batches)
    everything = np.concatenate(batches)
    frame = everything[:1]
    expected = (frame - everything.mean(0)) / np.sqrt(everything.var(0) + 1e-5)
    np.testing.assert_allclose(normalizer(tf.constant(frame)), expected, rtol=1e-4, atol=1e-5)


def test_uint8_frames_are_counted_as_the_agent_sees_them_in_zero_to_one():
    frames = np.array([[0, 255], [255, 255]], np.uint8)
    mean, mean_square = moments(tf.constant(frames))
    np.testing.assert_allclose(mean, [0.5, 1.0])
    np.testing.assert_allclose(mean_square, [0.5, 1.0])


def test_a_constant_element_goes_to_zero_and_a_rare_one_is_clipped_at_five():
    frames = np.zeros((100, 2), np.float32)
    frames[:, 0] = 0.3  # a background pixel
    frames[0, 1] = 1.0  # a ball seen once in 100 frames
    normalizer = InputNormalizer()
    fold_batches(normalizer, [frames])
    np.testing.assert_allclose(normalizer(tf.constant([[0.3, 1.0]])), [[0.0, 5.0]], atol=1e-3)


def test_a_prior_weighs_the_start_against_the_frames_folded_in():
    """Three prior frames of mean 0 and variance 1, then one constant frame: the moments of
    all four, so that a change of the constant element is scaled by them, not clipped at 5."""
    normalizer = InputNormalizer(prior_count=3)
    fold_batches(normalizer, [np.full((1, 1), 0.8, np.float32)])
    mean = 0.8 / 4
    variance = (3 * 1.0 + 0.8**2) / 4 - mean**2
    np.testing.assert_allclose(normalizer.mean, [mean], rtol=1e-6)
    np.testing.assert_allclose(normalizer.variance, [variance], rtol=1e-6)
    expected = (1.0 - mean) / np.sqrt(variance + 1e-5)
    np.testing.assert_allclose(normalizer(tf.constant([[1.0]])), [[expected]], rtol=1e-5)
    assert expected < 1


def test_before_any_batch_frames_in_zero_to_one_pass_unchanged():
    frames = np.random.default_rng(1).uniform(size=(4, 3)).astype(np.float32)
    np.testing.assert_allclose(InputNormalizer()(tf.constant(frames)), frames, rtol=1e-5)


@pytest.mark.parametrize("agent_name", sorted(agents.AGENTS))
def test_the_statistics_are_variables_of_the_agent_but_not_trainable(agent_name):
    rng = np.random.default_rng(2)
    actions, env_outputs = make_actions(rng, (T, B)), make_env_outputs(agent_name, rng, (T, B))
    plain, normalized = (agents.agent_factory(agent_name)(NUM_ACTIONS, normalize_input=on)
                         for on in (False, True))  # fmt: skip
    for agent in (plain, normalized):
        agent.unroll(actions, env_outputs, agent.initial_state(B))
    names = sorted(v.name for v in normalized.variables if not v.trainable)
    assert [name.rsplit("/", 1)[-1] for name in names] == ["count:0", "mean:0", "variance:0"]
    assert len(normalized.trainable_variables) == len(plain.trainable_variables)
    assert len(normalized.variables) == len(plain.variables) + 3
    assert normalized.describe() == f"{agent_name}, {NUM_ACTIONS} actions, input normalised"
    assert plain.input_normalizer is None


def test_the_learner_folds_the_fresh_frames_of_each_unroll_but_not_its_first():
    """Step 0 of an unroll repeats the previous unroll's last step: counted once."""
    agent = agents.MLPAgent(NUM_ACTIONS, normalize_input=True)
    rng = np.random.default_rng(3)
    agent.unroll(make_actions(rng, (T, B)), make_env_outputs("MLPAgent", rng, (T, B)), ())
    observations = rng.normal(size=(B, T + 1, 4)).astype(np.float32)  # batch-major
    observations[:, 0] = 1e3  # would dominate the statistics if folded in
    unroll = types.SimpleNamespace(env_outputs=types.SimpleNamespace(observation=observations))
    training = learner.Learner.__new__(learner.Learner)
    training._agent, training._hvd = agent, types.SimpleNamespace(size=lambda: 1)
    training._update_input_statistics(unroll)

    fresh = observations[:, 1:].reshape(-1, 4)
    expected = (fresh[:1] - fresh.mean(0)) / np.sqrt(fresh.var(0) + 1e-5)
    np.testing.assert_allclose(
        agent.input_normalizer(tf.constant(fresh[:1])), expected, rtol=1e-4, atol=1e-5
    )
