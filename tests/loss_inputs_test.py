"""What the loss terms are computed from (losses.py): importance ratios, LASER's trust region,
PPO's advantages and their normalisation, the policy term's choice, a batch's statistics;
against NumPy written from their definitions."""

import numpy as np
import tensorflow as tf

import losses
from tests.losses_test import BATCH_SIZE, NUM_ACTIONS, NUM_STEPS, random_batch, softmax


def log_softmax(logits):
    return np.log(softmax(logits.astype(np.float64)))


def test_log_importance_ratios_are_log_pi_over_mu_of_the_taken_actions():
    target, actions, _ = random_batch(seed=10)
    behaviour = random_batch(seed=11)[0]
    taken = actions[..., None]
    expected = np.take_along_axis(log_softmax(target) - log_softmax(behaviour), taken, -1)[..., 0]
    np.testing.assert_allclose(
        losses.log_importance_ratios(target, behaviour, actions), expected, atol=1e-5
    )


def test_the_trust_region_keeps_the_steps_within_its_kl_and_every_step_when_off():
    behaviour = random_batch(seed=12)[0]
    target = random_batch(seed=13)[0]
    mu = softmax(behaviour.astype(np.float64))
    kl = np.sum(mu * (log_softmax(behaviour) - log_softmax(target)), axis=-1)
    np.testing.assert_allclose(losses.behaviour_kl(behaviour, target), kl, rtol=1e-4)
    max_kl = float(np.median(kl))
    np.testing.assert_array_equal(losses.trust_region(behaviour, target, max_kl), kl <= max_kl)
    assert np.all(losses.trust_region(behaviour, target, 0.0))


def test_lambda_return_advantages_are_one_step_to_the_next_lambda_return():
    rng = np.random.default_rng(14)
    rewards, values = rng.normal(size=(2, NUM_STEPS, BATCH_SIZE)).astype(np.float32)
    discounts = np.where(rng.random((NUM_STEPS, BATCH_SIZE)) < 0.2, 0.0, 0.99).astype(np.float32)
    bootstrap = rng.normal(size=BATCH_SIZE).astype(np.float32)
    trace_lambda = 0.95
    # G_t = r_t + gamma_t ((1 - lambda) V(x_{t+1}) + lambda G_{t+1}), G_T = V(x_T).
    next_values = np.concatenate([values[1:], bootstrap[None]])
    returns = np.concatenate([np.zeros_like(values), bootstrap[None]])
    for t in reversed(range(NUM_STEPS)):
        following = (1 - trace_lambda) * next_values[t] + trace_lambda * returns[t + 1]
        returns[t] = rewards[t] + discounts[t] * following
    expected = rewards + discounts * returns[1:] - values
    advantages = losses.lambda_return_advantages(
        discounts, rewards, values, bootstrap, trace_lambda
    )
    np.testing.assert_allclose(advantages, expected, rtol=1e-4, atol=1e-5)


def test_normalized_advantages_have_mean_0_and_standard_deviation_1():
    advantages = 3.0 + 2.0 * random_batch(seed=15)[2]
    normalized = losses.normalized(advantages).numpy()
    np.testing.assert_allclose(normalized.mean(), 0, atol=1e-6)
    np.testing.assert_allclose(normalized.std(), 1, rtol=1e-5)
    assert np.all(np.isfinite(losses.normalized(np.ones((NUM_STEPS, BATCH_SIZE), np.float32))))


def test_the_policy_term_is_the_clipped_surrogate_or_the_policy_gradient():
    logits, actions, advantages = random_batch(seed=16)
    log_ratios = 0.3 * random_batch(seed=17)[2]
    np.testing.assert_array_equal(
        losses.policy_loss(log_ratios, logits, actions, advantages, 0.1),
        losses.clipped_policy_loss(log_ratios, advantages, 0.1),
    )
    np.testing.assert_array_equal(
        losses.policy_loss(log_ratios, logits, actions, advantages, 0.0),
        losses.policy_gradient_loss(logits, actions, advantages),
    )


def test_value_statistics():
    values = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)  # [T=2, B=2]
    targets = values + np.array([[0.5, -0.5], [0.5, -0.5]], np.float32)
    advantages = np.array([[1.0, -1.0], [3.0, -3.0]], np.float32)
    stats = losses.value_statistics(values, targets, advantages)
    # Var(targets) = 1 (of 1.5, 1.5, 3.5, 3.5), Var(errors) = 0.25: 1 - 0.25 / 1.
    np.testing.assert_allclose(
        [float(stats[name]) for name in ("value_mean", "explained_variance", "advantage_std")],
        [2.5, 0.75, np.sqrt(5.0)],
        rtol=1e-6,
    )


def test_explained_variance_of_constant_targets_is_zero():
    constant = np.ones((3, 2), np.float32)
    stats = losses.value_statistics(constant * 2, constant, constant)
    assert float(stats["explained_variance"]) == 0.0


def test_policy_statistics():
    log_rhos = np.array([[-0.5, 0.0], [0.25, 1.0]], np.float32)  # [T=2, B=2]
    kept = np.array([[True, True], [False, True]])
    uniform = np.zeros((2, 2, NUM_ACTIONS), np.float32)
    stats = {
        name: float(value)
        for name, value in losses.policy_statistics(
            tf.constant(uniform), log_rhos, kept, clip=0.3
        ).items()
    }
    # The uniform policy's entropy is its maximum; 2 of 4 ratios above 1; 2 of 4 ratios
    # (0.61 and 2.72) outside [0.7, 1.3]; 1 step left out.
    np.testing.assert_allclose(list(stats.values()), [1.0, 0.4375, 0.5, 0.5, 0.25], rtol=1e-6)
    assert list(stats) == [
        "entropy_fraction",
        "mean_abs_log_rho",
        "clipped_rho_fraction",
        "surrogate_clipped_fraction",
        "trust_region_fraction",
    ]
    impala = losses.policy_statistics(tf.constant(uniform), log_rhos, kept, clip=0.0)
    assert float(impala["surrogate_clipped_fraction"]) == 0.0  # its policy gradient clips none
