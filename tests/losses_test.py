"""The loss terms and reward clipping against NumPy written from their definitions."""

import numpy as np
import pytest
import tensorflow as tf

import losses

NUM_STEPS, BATCH_SIZE, NUM_ACTIONS = 6, 4, 5


def softmax(logits):
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def random_batch(seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(NUM_STEPS, BATCH_SIZE, NUM_ACTIONS)).astype(np.float32)
    actions = rng.integers(NUM_ACTIONS, size=(NUM_STEPS, BATCH_SIZE)).astype(np.int32)
    advantages = rng.normal(size=(NUM_STEPS, BATCH_SIZE)).astype(np.float32)
    return logits, actions, advantages


def test_policy_gradient_loss_and_its_gradients():
    logits, actions, advantages = random_batch(seed=0)
    policy = softmax(logits.astype(np.float64))
    taken = np.take_along_axis(policy, actions[..., None], axis=-1)[..., 0]
    expected_loss = np.sum(-np.log(taken) * advantages)
    # d(-log pi(a)) / d logits = pi - onehot(a), scaled per step by the advantage.
    expected_logits_gradient = (policy - np.eye(NUM_ACTIONS)[actions]) * advantages[..., None]

    logits_var, advantages_var = tf.Variable(logits), tf.Variable(advantages)
    with tf.GradientTape() as tape:
        loss = losses.policy_gradient_loss(logits_var, actions, advantages_var)
    logits_gradient, advantages_gradient = tape.gradient(loss, [logits_var, advantages_var])

    assert loss.shape == ()
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(logits_gradient, expected_logits_gradient, rtol=1e-4, atol=1e-6)
    assert advantages_gradient is None  # The advantages are a fixed target.


def test_policy_gradient_loss_rejects_misshaped_advantages():
    logits, actions, advantages = random_batch(seed=1)
    with pytest.raises(ValueError, match=r"advantages has shape \(4,\)"):
        losses.policy_gradient_loss(logits, actions, advantages[0])


def test_clipped_policy_loss_and_its_gradient():
    rng = np.random.default_rng(3)
    # Ratios on both sides of [1 - clip, 1 + clip], advantages of both signs.
    log_ratios = rng.normal(scale=0.3, size=(NUM_STEPS, BATCH_SIZE)).astype(np.float32)
    advantages = rng.normal(size=(NUM_STEPS, BATCH_SIZE)).astype(np.float32)
    clip = 0.1
    ratios = np.exp(log_ratios.astype(np.float64))
    unclipped, clipped = ratios * advantages, np.clip(ratios, 1 - clip, 1 + clip) * advantages
    expected_loss = -np.sum(np.minimum(unclipped, clipped))
    # Where the clipped term is the smaller one (the ratio left the region in the direction the
    # advantage favours) the step has no gradient; elsewhere d(-r A)/d log r = -r A.
    expected_gradient = np.where(clipped < unclipped, 0.0, -unclipped)
    assert 0 < np.mean(clipped < unclipped) < 1  # both cases occur

    log_ratios_var = tf.Variable(log_ratios)
    with tf.GradientTape() as tape:
        loss = losses.clipped_policy_loss(log_ratios_var, advantages, clip)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(tape.gradient(loss, log_ratios_var), expected_gradient, atol=1e-6)


def test_baseline_loss_and_its_gradient():
    advantages = tf.Variable(random_batch(seed=2)[2])
    with tf.GradientTape() as tape:
        loss = losses.baseline_loss(advantages)
    np.testing.assert_allclose(loss, 0.5 * np.sum(advantages.numpy() ** 2), rtol=1e-6)
    np.testing.assert_allclose(tape.gradient(loss, advantages), advantages.numpy(), rtol=1e-6)


def test_entropy_loss_is_negative_entropy():
    logits = random_batch(seed=3)[0]
    policy = softmax(logits.astype(np.float64))
    np.testing.assert_allclose(
        losses.entropy_loss(logits), np.sum(policy * np.log(policy)), rtol=1e-5
    )
    # The uniform policy has the highest entropy, log A per step.
    uniform = np.zeros((NUM_STEPS, BATCH_SIZE, NUM_ACTIONS), np.float32)
    np.testing.assert_allclose(
        losses.entropy_loss(uniform), -NUM_STEPS * BATCH_SIZE * np.log(NUM_ACTIONS), rtol=1e-6
    )


def test_minimising_entropy_loss_raises_entropy():
    logits = tf.Variable(random_batch(seed=4)[0])
    with tf.GradientTape() as tape:
        before = losses.entropy_loss(logits)
    logits.assign_sub(0.1 * tape.gradient(before, logits))
    assert losses.entropy_loss(logits) < before


REWARDS = np.array([[-100.0, -5.0, -1.5, -1.0, -0.3], [0.0, 0.3, 1.0, 1.5, 100.0]], np.float32)


def test_clip_rewards_abs_one():
    np.testing.assert_array_equal(losses.clip_rewards(REWARDS, "abs_one"), np.clip(REWARDS, -1, 1))


def test_clip_rewards_soft_asymmetric():
    squeezed = 5.0 * np.tanh(REWARDS.astype(np.float64) / 5.0)
    expected = np.where(REWARDS < 0, 0.3 * squeezed, squeezed)
    clipped = losses.clip_rewards(REWARDS, "soft_asymmetric").numpy()
    np.testing.assert_allclose(clipped, expected, rtol=1e-6, atol=1e-7)
    # Bounded by 5 for gains and by 1.5 for losses.
    np.testing.assert_allclose(clipped[0, 0], -1.5, rtol=1e-6)
    np.testing.assert_allclose(clipped[1, -1], 5.0, rtol=1e-6)


def test_clip_rewards_unknown_mode_lists_valid_modes():
    with pytest.raises(ValueError, match=r"'abs'.*'abs_one', 'soft_asymmetric'"):
        losses.clip_rewards(REWARDS, "abs")


def test_unroll_weights_scale_each_unrolls_terms():
    """Importance weights [B] multiply every term of their unroll (all of its T steps)."""
    logits, actions, advantages = random_batch(seed=7)
    weights = np.array([1.0, 0.5, 0.0, 2.0], np.float32)
    for loss, args in (
        (losses.policy_gradient_loss, (logits, actions, advantages)),
        (losses.baseline_loss, (advantages,)),
        (losses.entropy_loss, (logits,)),
    ):
        weighted = float(loss(*args, unroll_weights=weights))
        per_unroll = [float(loss(*(a[:, b : b + 1] for a in args))) for b in range(BATCH_SIZE)]
        np.testing.assert_allclose(weighted, np.dot(weights, per_unroll), rtol=1e-5)
        np.testing.assert_allclose(float(loss(*args, unroll_weights=np.ones(4))), loss(*args))
