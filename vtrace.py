"""V-trace off-policy actor-critic targets (Espeholt et al. 2018, "IMPALA", section 4.1).

For an unroll of T steps collected by a behaviour policy mu, with target policy pi,
rho_t = pi(a_t|x_t) / mu(a_t|x_t) and per-step discounts gamma_t (0 where an episode ends):

    delta_t = min(rho_bar, rho_t) * (r_t + gamma_t * V(x_{t+1}) - V(x_t))
    v_s     = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} gamma_i * min(c_bar, rho_i)) * delta_t

computed backwards in time as v_s - V(x_s) = delta_s + gamma_s * c_s * (v_{s+1} - V(x_{s+1})),
with V(x_T) = v_T = the bootstrap value. The policy gradient uses the advantage
min(rho_bar_pg, rho_s) * (r_s + gamma_s * v_{s+1} - V(x_s)).

All tensors are time-major: `[T, B]` (any trailing dims are carried through unchanged).
Both returned targets are wrapped in `tf.stop_gradient`: they are regression and advantage
targets, not functions to differentiate.
"""

import collections

import tensorflow as tf

VTraceFromLogitsReturns = collections.namedtuple(
    "VTraceFromLogitsReturns",
    "vs pg_advantages log_rhos behaviour_action_log_probs target_action_log_probs",
)

VTraceReturns = collections.namedtuple("VTraceReturns", "vs pg_advantages")


def log_probs_from_logits_and_actions(policy_logits, actions):
    """log pi(a_t|x_t) of the taken actions.

    Args:
      policy_logits: float32 [T, B, A], unnormalised log-probabilities.
      actions: int [T, B], indices in [0, A).

    Returns:
      float32 [T, B].
    """
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=actions, logits=policy_logits)


def from_logits(
    behaviour_policy_logits,
    target_policy_logits,
    actions,
    discounts,
    rewards,
    values,
    bootstrap_value,
    clip_rho_threshold=1.0,
    clip_pg_rho_threshold=1.0,
    clip_c_threshold=1.0,
):
    """V-trace for softmax policies given as logits.

    Args:
      behaviour_policy_logits: float32 [T, B, A], logits of the policy mu that acted.
      target_policy_logits: float32 [T, B, A], logits of the policy pi being learned.
      actions: int [T, B], actions taken by mu.
      discounts: float32 [T, B], gamma_t; 0 where the episode ended at step t.
      rewards: float32 [T, B].
      values: float32 [T, B], V(x_t) under pi.
      bootstrap_value: float32 [B], V(x_T).
      clip_rho_threshold, clip_pg_rho_threshold, clip_c_threshold: rho_bar, rho_bar_pg and
        c_bar; None disables that truncation.

    Returns:
      VTraceFromLogitsReturns: `vs` and `pg_advantages` [T, B] (no gradient), `log_rhos`,
      `behaviour_action_log_probs` and `target_action_log_probs` [T, B] (`log_rhos` and
      `target_action_log_probs` keep their gradient with respect to the target logits).
    """
    behaviour_policy_logits = tf.convert_to_tensor(behaviour_policy_logits, dtype=tf.float32)
    target_policy_logits = tf.convert_to_tensor(target_policy_logits, dtype=tf.float32)
    actions = tf.convert_to_tensor(actions)
    if behaviour_policy_logits.shape.rank != 3:
        raise ValueError(
            f"behaviour_policy_logits must be [T, B, A], got shape {behaviour_policy_logits.shape}"
        )
    if not target_policy_logits.shape.is_compatible_with(behaviour_policy_logits.shape):
        raise ValueError(
            f"target_policy_logits has shape {target_policy_logits.shape}, expected the shape "
            f"of behaviour_policy_logits {behaviour_policy_logits.shape} ([T, B, A])"
        )
    if not actions.shape.is_compatible_with(behaviour_policy_logits.shape[:-1]):
        raise ValueError(
            f"actions has shape {actions.shape}, expected [T, B] = "
            f"{behaviour_policy_logits.shape[:-1]} (the logits' shape without the action dim)"
        )

    behaviour_action_log_probs = log_probs_from_logits_and_actions(behaviour_policy_logits, actions)
    target_action_log_probs = log_probs_from_logits_and_actions(target_policy_logits, actions)
    log_rhos = target_action_log_probs - behaviour_action_log_probs
    vtrace_returns = from_importance_weights(
        log_rhos=log_rhos,
        discounts=discounts,
        rewards=rewards,
        values=values,
        bootstrap_value=bootstrap_value,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
        clip_c_threshold=clip_c_threshold,
    )
    return VTraceFromLogitsReturns(
        log_rhos=log_rhos,
        behaviour_action_log_probs=behaviour_action_log_probs,
        target_action_log_probs=target_action_log_probs,
        **vtrace_returns._asdict(),
    )


def from_importance_weights(
    log_rhos,
    discounts,
    rewards,
    values,
    bootstrap_value,
    clip_rho_threshold=1.0,
    clip_pg_rho_threshold=1.0,
    clip_c_threshold=1.0,
    trace_lambda=1.0,
):
    """V-trace from log importance weights log(pi(a_t|x_t) / mu(a_t|x_t)).

    Args:
      log_rhos: float32 [T, B], log importance weights of the taken actions.
      discounts: float32 [T, B], gamma_t; 0 where the episode ended at step t.
      rewards: float32 [T, B].
      values: float32 [T, B], V(x_t) under pi.
      bootstrap_value: float32 [B], V(x_T).
      clip_rho_threshold: rho_bar, truncates rho in the temporal differences (which value
        function v_s converges to); None = no truncation.
      clip_pg_rho_threshold: rho_bar_pg, truncates rho in the policy-gradient advantage;
        None = no truncation.
      clip_c_threshold: c_bar, truncates the trace coefficients c_i (variance, speed of
        contraction); None = no truncation.
      trace_lambda: lambda in [0, 1], c_i = lambda * min(c_bar, rho_i) (the paper's remark in
        section 4.1): on-policy, the targets become lambda-returns (as GAE's), with less
        variance than the n-step return of lambda = 1.

    Returns:
      VTraceReturns: `vs` [T, B] (value targets) and `pg_advantages` [T, B], both without
      gradient.
    """
    log_rhos = tf.convert_to_tensor(log_rhos, dtype=tf.float32)
    discounts = tf.convert_to_tensor(discounts, dtype=tf.float32)
    rewards = tf.convert_to_tensor(rewards, dtype=tf.float32)
    values = tf.convert_to_tensor(values, dtype=tf.float32)
    bootstrap_value = tf.convert_to_tensor(bootstrap_value, dtype=tf.float32)
    _check_shapes(log_rhos, discounts, rewards, values, bootstrap_value)

    rhos = tf.exp(log_rhos)
    clipped_rhos = _clip(rhos, clip_rho_threshold)
    cs = trace_lambda * _clip(rhos, clip_c_threshold)
    values_t_plus_1 = tf.concat([values[1:], bootstrap_value[tf.newaxis]], axis=0)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)

    def scan_step(vs_minus_v_x_t_plus_1, step):
        discount_t, c_t, delta_t = step
        return delta_t + discount_t * c_t * vs_minus_v_x_t_plus_1

    # reverse=True walks t = T-1 .. 0 but stacks the results in time order.
    vs_minus_v_xs = tf.scan(
        scan_step,
        elems=(discounts, cs, deltas),
        initializer=tf.zeros_like(bootstrap_value),
        reverse=True,
    )
    vs = vs_minus_v_xs + values

    vs_t_plus_1 = tf.concat([vs[1:], bootstrap_value[tf.newaxis]], axis=0)
    clipped_pg_rhos = _clip(rhos, clip_pg_rho_threshold)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    return VTraceReturns(vs=tf.stop_gradient(vs), pg_advantages=tf.stop_gradient(pg_advantages))


def _clip(rhos, threshold):
    """min(threshold, rhos), or rhos unchanged when threshold is None."""
    if threshold is None:
        return rhos
    if threshold <= 0:
        raise ValueError(f"clip thresholds must be positive or None, got {threshold}")
    return tf.minimum(tf.cast(threshold, rhos.dtype), rhos)


def _check_shapes(log_rhos, discounts, rewards, values, bootstrap_value):
    """Static shape checks; dims unknown while tracing (e.g. a None T) pass."""
    rank = log_rhos.shape.rank
    if rank is None or rank < 2:
        raise ValueError(f"log_rhos must be [T, B] (known rank >= 2), got shape {log_rhos.shape}")
    for name, tensor in (("discounts", discounts), ("rewards", rewards), ("values", values)):
        if not tensor.shape.is_compatible_with(log_rhos.shape):
            raise ValueError(
                f"{name} has shape {tensor.shape}, expected the shape of log_rhos "
                f"{log_rhos.shape} ([T, B])"
            )
    if not bootstrap_value.shape.is_compatible_with(log_rhos.shape[1:]):
        raise ValueError(
            f"bootstrap_value has shape {bootstrap_value.shape}, expected [B] = "
            f"{log_rhos.shape[1:]} (log_rhos' shape without the time dim)"
        )
