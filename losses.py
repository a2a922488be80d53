"""The learner's loss terms (IMPALA's, as in scalable_agent's experiment.py, and PPO's clipped
surrogate) and what they are computed from: reward clipping, importance ratios, LASER's trust
region, the policy term's advantages; the statistics of a batch and the replay priority of an
unroll from the same value errors. train_step.actor_critic_loss combines them.

Every loss is a sum (not a mean) over the `[T, B]` steps of a batch, as in the original: the
learning rate and the entropy/baseline costs were tuned for sums. `unroll_weights` (float32 [B],
optional) scales each unroll's terms, e.g. by prioritized replay's importance weights.
"""

import tensorflow as tf

import vtrace

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


def policy_loss(log_ratios, logits, actions, advantages, clip, unroll_weights=None):
    """The policy term: PPO's clipped surrogate with `clip` > 0 (clipped_policy_loss of
    `log_ratios`), IMPALA's policy gradient with 0 (policy_gradient_loss of `logits`).

    Args:
      log_ratios: float32 [T, B], log pi(a_t|x_t) / mu(a_t|x_t) of the taken actions.
      logits: float32 [T, B, A], the learner's policy pi.
      actions: int [T, B], the actions taken.
      advantages: float32 [T, B].
      clip: PPO's epsilon (--policy_clip); 0: IMPALA's policy gradient.
      unroll_weights: optional float32 [B].

    Returns:
      float32 scalar.
    """
    if clip > 0:
        return clipped_policy_loss(log_ratios, advantages, clip, unroll_weights)
    return policy_gradient_loss(logits, actions, advantages, unroll_weights)


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


def log_importance_ratios(target_logits, behaviour_logits, actions):
    """log pi(a_t|x_t) - log mu(a_t|x_t) of the taken actions: logits [T, B, A] of the target
    policy pi and of the behaviour policy mu, actions int [T, B] -> float32 [T, B]."""
    return vtrace.log_probs_from_logits_and_actions(
        target_logits, actions
    ) - vtrace.log_probs_from_logits_and_actions(behaviour_logits, actions)


def behaviour_kl(behaviour_logits, target_logits):
    """KL(mu || pi) of each step's action distributions: [T, B, A] logits -> [T, B]."""
    behaviour_log_policy = tf.nn.log_softmax(behaviour_logits)
    return tf.reduce_sum(
        tf.exp(behaviour_log_policy) * (behaviour_log_policy - tf.nn.log_softmax(target_logits)),
        axis=-1,
    )


def trust_region(behaviour_logits, target_logits, max_kl):
    """LASER's trust region: the steps whose behaviour policy mu is within KL(mu || pi) <= max_kl
    of the target policy pi; every step when max_kl <= 0 (--replay_trust_region off).

    Args:
      behaviour_logits, target_logits: float32 [T, B, A].
      max_kl: float.

    Returns:
      bool [T, B], True where the step is kept.
    """
    if max_kl <= 0:
        return tf.ones_like(behaviour_logits[..., 0], tf.bool)
    return behaviour_kl(behaviour_logits, target_logits) <= max_kl


def lambda_return_advantages(discounts, rewards, values, bootstrap_value, trace_lambda):
    """PPO's advantages from `values`: r_t + gamma_t G_{t+1} - V(x_t), G the lambda-return of
    `values`, i.e. V-trace's policy-gradient advantages with every importance ratio 1;
    without gradient.

    Args:
      discounts, rewards, values: float32 [T, B].
      bootstrap_value: float32 [B], the value after the last step.
      trace_lambda: lambda of the returns.

    Returns:
      float32 [T, B].
    """
    return vtrace.from_importance_weights(
        log_rhos=tf.zeros_like(rewards),
        discounts=discounts,
        rewards=rewards,
        values=values,
        bootstrap_value=bootstrap_value,
        trace_lambda=trace_lambda,
    ).pg_advantages


def normalized(advantages):
    """Advantages with mean 0 and standard deviation 1 over a batch's steps (1e-8 keeps a batch
    of equal advantages finite): float32 [T, B] -> [T, B]."""
    mean, variance = tf.nn.moments(advantages, axes=[0, 1])
    return (advantages - mean) / (tf.sqrt(variance) + 1e-8)


def value_statistics(values, targets, advantages):
    """The value function's scale and fit, and the advantages' scale before normalisation, for
    TensorBoard: what tells a game whose rewards are rare or large from one that learns slowly.

    Args:
      values: float32 [T, B], the learner's values V.
      targets: float32 [T, B], V-trace's value targets vs.
      advantages: float32 [T, B], the policy term's advantages before normalisation.

    Returns:
      dict of float32 scalars: `value_mean`, the mean V; `explained_variance`,
      1 - Var(vs - V) / Var(vs) (1: V predicts its targets, 0: no better than their mean; 0 when
      the targets do not vary); `advantage_std`, the advantages' standard deviation;
      `target_mean` and `target_mean_square`, the moments of vs (--normalize_value_loss).
    """
    target_variance = tf.math.reduce_variance(targets)
    error_variance = tf.math.reduce_variance(targets - values)
    explained = tf.math.divide_no_nan(error_variance, target_variance)
    return {
        "value_mean": tf.reduce_mean(values),
        "explained_variance": tf.where(target_variance > 0, 1 - explained, 0.0),
        "advantage_std": tf.math.reduce_std(advantages),
        "target_mean": tf.reduce_mean(targets),
        "target_mean_square": tf.reduce_mean(tf.square(targets)),
    }


def policy_statistics(logits, log_rhos, kept, clip):
    """How the learner's policy and its data stand, for the progress line and TensorBoard.

    Args:
      logits: float32 [T, B, A], the learner's policy pi.
      log_rhos: float32 [T, B], log pi/mu of the taken actions (log_importance_ratios).
      kept: bool [T, B], the steps inside the trust region (trust_region).
      clip: PPO's epsilon (--policy_clip); 0: IMPALA's policy gradient, which clips nothing.

    Returns:
      dict of float32 scalars: `entropy_fraction`, the mean entropy per step over its maximum
      ln A; `mean_abs_log_rho`, the mean |log pi/mu|; `clipped_rho_fraction`, the fraction of
      importance weights above V-trace's rho_bar = 1; `surrogate_clipped_fraction`, the fraction
      of ratios pi/mu outside [1 - clip, 1 + clip] (PPO's clipfrac: where the surrogate may
      give no gradient); `trust_region_fraction`, the fraction of steps left out by the trust
      region.
    """
    num_steps = tf.cast(tf.size(log_rhos), tf.float32)
    num_actions = tf.cast(tf.shape(logits)[-1], tf.float32)
    entropy = -entropy_loss(logits)  # unweighted
    outside_clip = tf.abs(tf.exp(log_rhos) - 1.0) > clip if clip > 0 else tf.zeros_like(kept)
    return {
        "entropy_fraction": entropy / (num_steps * tf.math.log(num_actions)),
        "mean_abs_log_rho": tf.reduce_mean(tf.abs(log_rhos)),
        "clipped_rho_fraction": tf.reduce_mean(tf.cast(log_rhos > 0, tf.float32)),
        "surrogate_clipped_fraction": tf.reduce_mean(tf.cast(outside_clip, tf.float32)),
        "trust_region_fraction": 1 - tf.reduce_mean(tf.cast(kept, tf.float32)),
    }


def unroll_priorities(value_errors):
    """Priorities of unrolls from their V-trace value errors vs - V, float [T, B] -> [B]."""
    errors = tf.abs(value_errors)
    return PRIORITY_MAX_WEIGHT * tf.reduce_max(errors, axis=0) + (
        1 - PRIORITY_MAX_WEIGHT
    ) * tf.reduce_mean(errors, axis=0)
