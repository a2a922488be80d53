"""The IMPALA learner's loss terms and reward clipping (as in scalable_agent's experiment.py),
and the replay priority of an unroll from the same value errors.

Every loss is a sum (not a mean) over the `[T, B]` steps of a batch, as in the original: the
learning rate and the entropy/baseline costs were tuned for sums. `unroll_weights` (float32 [B],
optional) scales each unroll's terms, e.g. by prioritized replay's importance weights.
"""

import tensorflow as tf

REWARD_CLIPPING_MODES = ("abs_one", "soft_asymmetric")
# R2D2's mix of the max and the mean of an unroll's value errors, for its replay priority.
PRIORITY_MAX_WEIGHT = 0.9


def _sum(terms, unroll_weights):
    """sum_{t,b} terms[t, b] (* unroll_weights[b])."""
    if unroll_weights is None:
        return tf.reduce_sum(terms)
    return tf.reduce_sum(terms * tf.convert_to_tensor(unroll_weights, tf.float32)[tf.newaxis])


def policy_gradient_loss(logits, actions, advantages, unroll_weights=None):
    """sum_{t,b} -log pi(a_t|x_t) * advantage_t; no gradient flows into the advantages.

    Args:
      logits: float32 [T, B, A], logits of the target policy pi.
      actions: int [T, B], the actions taken.
      advantages: float32 [T, B], e.g. V-trace's pg_advantages.
      unroll_weights: optional float32 [B].

    Returns:
      float32 scalar.
    """
    advantages = tf.convert_to_tensor(advantages, dtype=tf.float32)
    actions = tf.convert_to_tensor(actions)
    # Checked because [T, B] * [B] or [T, B] * [T, B, 1] would broadcast silently.
    if not advantages.shape.is_compatible_with(actions.shape):
        raise ValueError(
            f"advantages has shape {advantages.shape}, expected the shape of actions "
            f"{actions.shape} ([T, B])"
        )
    cross_entropy = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=actions, logits=logits)
    return _sum(cross_entropy * tf.stop_gradient(advantages), unroll_weights)


def clipped_policy_loss(log_ratios, advantages, clip, unroll_weights=None):
    """PPO's clipped surrogate, -sum_{t,b} min(r_t * A_t, clip(r_t, 1 - clip, 1 + clip) * A_t).

    Args:
      log_ratios: float32 [T, B], log pi(a_t|x_t) / mu(a_t|x_t) of the taken actions; the
        gradient flows through it (pi is the learner's policy, mu the behaviour policy).
      advantages: float32 [T, B], without gradient.
      clip: epsilon of the clipping, > 0.
      unroll_weights: optional float32 [B].

    Returns:
      float32 scalar.
    """
    ratios = tf.exp(log_ratios)
    advantages = tf.stop_gradient(tf.convert_to_tensor(advantages, tf.float32))
    surrogate = tf.minimum(
        ratios * advantages, tf.clip_by_value(ratios, 1 - clip, 1 + clip) * advantages
    )
    return _sum(-surrogate, unroll_weights)


def baseline_loss(advantages, unroll_weights=None):
    """0.5 * sum_{t,b} advantage_t^2, the value function's squared error.

    Args:
      advantages: float32 [T, B], vs - values (V-trace targets minus the baseline).
      unroll_weights: optional float32 [B].

    Returns:
      float32 scalar.
    """
    return 0.5 * _sum(tf.square(advantages), unroll_weights)


def entropy_loss(logits, unroll_weights=None):
    """Negative policy entropy, sum_{t,b} sum_a pi(a|x_t) log pi(a|x_t).

    Minimising it raises the entropy, which keeps the policy exploring.

    Args:
      logits: float32 [T, B, A].
      unroll_weights: optional float32 [B].

    Returns:
      float32 scalar.
    """
    policy = tf.nn.softmax(logits)
    log_policy = tf.nn.log_softmax(logits)
    return _sum(tf.reduce_sum(policy * log_policy, axis=-1), unroll_weights)


def clip_rewards(rewards, mode):
    """Clips raw environment rewards for learning.

    Args:
      rewards: float32 [T, B].
      mode: "abs_one" clips to [-1, 1]; "soft_asymmetric" squashes smoothly with 5 * tanh(r / 5)
        and scales negative rewards by 0.3 more, so losses weigh less than gains.

    Returns:
      float32 [T, B].
    """
    rewards = tf.convert_to_tensor(rewards, dtype=tf.float32)
    if mode == "abs_one":
        return tf.clip_by_value(rewards, -1.0, 1.0)
    if mode == "soft_asymmetric":
        squeezed = tf.tanh(rewards / 5.0)
        return tf.where(rewards < 0, 0.3 * squeezed, squeezed) * 5.0
    raise ValueError(f"unknown reward clipping mode {mode!r}; valid modes: {REWARD_CLIPPING_MODES}")


def unroll_priorities(value_errors):
    """Priorities of unrolls from their V-trace value errors vs - V, float [T, B] -> [B]."""
    errors = tf.abs(value_errors)
    return PRIORITY_MAX_WEIGHT * tf.reduce_max(errors, axis=0) + (
        1 - PRIORITY_MAX_WEIGHT
    ) * tf.reduce_mean(errors, axis=0)
