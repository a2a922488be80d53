"""V-trace against NumPy references written here from the IMPALA paper's definitions."""

import numpy as np
import pytest
import tensorflow as tf

import vtrace

# (rho_bar, rho_bar_pg, c_bar); None = no truncation.
CLIP_THRESHOLDS = [
    (1.0, 1.0, 1.0),
    (None, None, None),
    (2.0, 0.5, 0.8),
    (0.7, None, 1.5),
]
# [T, B] and one [T, B, 2] with a trailing dim.
SHAPES = [(1, 1), (5, 3), (20, 4), (6, 3, 2)]


def clip(rhos, threshold):
    return rhos if threshold is None else np.minimum(threshold, rhos)


def vtrace_reference(log_rhos, discounts, rewards, values, bootstrap_value, rho_bar, pg_bar, c_bar):
    """The paper's eq. 1 as an explicit double sum, with per-step discounts.

    v_s = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} gamma_i c_i) delta_t,
    delta_t = rho_t (r_t + gamma_t V(x_{t+1}) - V(x_t)),
    A_s = rho_pg_s (r_s + gamma_s v_{s+1} - V(x_s)), with V(x_T) = v_T = bootstrap_value.
    """
    rhos = np.exp(log_rhos)
    clipped_rhos, cs, pg_rhos = clip(rhos, rho_bar), clip(rhos, c_bar), clip(rhos, pg_bar)
    values_ext = np.concatenate([values, bootstrap_value[None]], axis=0)
    num_steps = len(rewards)
    vs = np.zeros_like(values)
    for s in range(num_steps):
        total = values[s].copy()
        trace = np.ones_like(bootstrap_value)  # prod_{i=s}^{t-1} gamma_i c_i
        for t in range(s, num_steps):
            delta = clipped_rhos[t] * (rewards[t] + discounts[t] * values_ext[t + 1] - values[t])
            total += trace * delta
            trace = trace * discounts[t] * cs[t]
        vs[s] = total
    vs_ext = np.concatenate([vs, bootstrap_value[None]], axis=0)
    pg_advantages = pg_rhos * (rewards + discounts * vs_ext[1:] - values)
    return vs, pg_advantages


def random_unroll(shape, seed):
    """Random V-trace inputs whose discounts include an episode end (0) inside the unroll."""
    rng = np.random.default_rng(seed)
    discounts = 0.9 * (rng.uniform(size=shape) > 0.2)
    discounts[len(discounts) // 2] = 0.0  # At least one episode end per batch entry.
    return dict(
        log_rhos=rng.uniform(-1.5, 1.5, size=shape).astype(np.float32),
        discounts=discounts.astype(np.float32),
        rewards=rng.normal(size=shape).astype(np.float32),
        values=rng.normal(size=shape).astype(np.float32),
        bootstrap_value=rng.normal(size=shape[1:]).astype(np.float32),
    )


def log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("thresholds", CLIP_THRESHOLDS)
def test_from_importance_weights_matches_paper_definition(shape, thresholds):
    rho_bar, pg_bar, c_bar = thresholds
    inputs = random_unroll(shape, seed=sum(shape))
    returns = vtrace.from_importance_weights(
        **inputs, clip_rho_threshold=rho_bar, clip_pg_rho_threshold=pg_bar, clip_c_threshold=c_bar
    )
    expected_vs, expected_pg_advantages = vtrace_reference(
        **inputs, rho_bar=rho_bar, pg_bar=pg_bar, c_bar=c_bar
    )
    np.testing.assert_allclose(returns.vs.numpy(), expected_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        returns.pg_advantages.numpy(), expected_pg_advantages, rtol=1e-5, atol=1e-5
    )


def test_clipping_changes_the_result():
    """Guards the reference test: the random log_rhos do cross every threshold used."""
    inputs = random_unroll((20, 4), seed=0)
    clipped = vtrace.from_importance_weights(**inputs)
    unclipped = vtrace.from_importance_weights(
        **inputs, clip_rho_threshold=None, clip_pg_rho_threshold=None, clip_c_threshold=None
    )
    assert np.abs(clipped.vs.numpy() - unclipped.vs.numpy()).max() > 0.1
    assert np.abs(clipped.pg_advantages.numpy() - unclipped.pg_advantages.numpy()).max() > 0.1


@pytest.mark.parametrize("thresholds", CLIP_THRESHOLDS[:2])
def test_from_logits_matches_importance_weights_from_numpy_log_softmax(thresholds):
    rho_bar, pg_bar, c_bar = thresholds
    num_steps, batch_size, num_actions = 7, 3, 4
    rng = np.random.default_rng(1)
    behaviour_logits = rng.normal(size=(num_steps, batch_size, num_actions)).astype(np.float32)
    target_logits = rng.normal(size=(num_steps, batch_size, num_actions)).astype(np.float32)
    actions = rng.integers(num_actions, size=(num_steps, batch_size)).astype(np.int32)
    inputs = random_unroll((num_steps, batch_size), seed=2)
    del inputs["log_rhos"]

    returns = vtrace.from_logits(
        behaviour_policy_logits=behaviour_logits,
        target_policy_logits=target_logits,
        actions=actions,
        **inputs,
        clip_rho_threshold=rho_bar,
        clip_pg_rho_threshold=pg_bar,
        clip_c_threshold=c_bar,
    )

    def taken(log_probs):
        return np.take_along_axis(log_probs, actions[..., None], axis=-1)[..., 0]

    behaviour_log_probs = taken(log_softmax(behaviour_logits))
    target_log_probs = taken(log_softmax(target_logits))
    log_rhos = target_log_probs - behaviour_log_probs
    expected = vtrace.from_importance_weights(
        log_rhos=log_rhos,
        **inputs,
        clip_rho_threshold=rho_bar,
        clip_pg_rho_threshold=pg_bar,
        clip_c_threshold=c_bar,
    )
    np.testing.assert_allclose(returns.behaviour_action_log_probs, behaviour_log_probs, atol=1e-5)
    np.testing.assert_allclose(returns.target_action_log_probs, target_log_probs, atol=1e-5)
    np.testing.assert_allclose(returns.log_rhos, log_rhos, atol=1e-5)
    np.testing.assert_allclose(returns.vs, expected.vs, atol=1e-5)
    np.testing.assert_allclose(returns.pg_advantages, expected.pg_advantages, atol=1e-5)


def test_on_policy_vs_is_the_n_step_bootstrapped_return():
    """rho = 1 everywhere: v_s = sum_{t>=s} (prod_{i<t} gamma_i) r_t + (prod_i gamma_i) V(x_T)."""
    num_steps, batch_size = 8, 3
    inputs = random_unroll((num_steps, batch_size), seed=3)
    inputs["log_rhos"] = np.zeros((num_steps, batch_size), np.float32)
    rewards, discounts = inputs["rewards"], inputs["discounts"]
    expected = np.zeros((num_steps, batch_size))
    for s in range(num_steps):
        discount_product = np.ones(batch_size)
        for t in range(s, num_steps):
            expected[s] += discount_product * rewards[t]
            discount_product *= discounts[t]
        expected[s] += discount_product * inputs["bootstrap_value"]

    returns = vtrace.from_importance_weights(
        **inputs, clip_rho_threshold=None, clip_pg_rho_threshold=None, clip_c_threshold=None
    )
    np.testing.assert_allclose(returns.vs, expected, rtol=1e-5, atol=1e-5)


def test_on_policy_trace_lambda_gives_the_lambda_return():
    """rho = 1, c_i = lambda: v_s - V(x_s) = sum_{t>=s} (prod_{i<t} gamma_i lambda) delta_t,
    the generalized advantage estimate of Schulman et al. (2016) with this lambda."""
    num_steps, batch_size, trace_lambda = 8, 3, 0.9
    inputs = random_unroll((num_steps, batch_size), seed=4)
    inputs["log_rhos"] = np.zeros((num_steps, batch_size), np.float32)
    rewards, discounts, values = inputs["rewards"], inputs["discounts"], inputs["values"]
    next_values = np.concatenate([values[1:], inputs["bootstrap_value"][None]])
    deltas = rewards + discounts * next_values - values
    advantages = np.zeros((num_steps, batch_size))
    following = np.zeros(batch_size)
    for t in reversed(range(num_steps)):
        following = deltas[t] + discounts[t] * trace_lambda * following
        advantages[t] = following

    returns = vtrace.from_importance_weights(**inputs, trace_lambda=trace_lambda)
    np.testing.assert_allclose(returns.vs, values + advantages, rtol=1e-5, atol=1e-5)


def test_episode_end_cuts_the_return_by_hand():
    """T=3, B=1, the episode ends at t=1: v = [1 + .5 * 2, 2, 3 + .5 * 10] whatever V is."""
    returns = vtrace.from_importance_weights(
        log_rhos=np.zeros((3, 1)),
        discounts=[[0.5], [0.0], [0.5]],
        rewards=[[1.0], [2.0], [3.0]],
        values=[[7.0], [-4.0], [9.0]],
        bootstrap_value=[10.0],
    )
    np.testing.assert_allclose(returns.vs.numpy()[:, 0], [2.0, 2.0, 8.0])
    # A_s = r_s + gamma_s v_{s+1} - V(x_s).
    np.testing.assert_allclose(returns.pg_advantages.numpy()[:, 0], [2.0 - 7.0, 6.0, -1.0])


def test_tf_function_matches_eager_with_unknown_time_dim():
    num_steps, batch_size, num_actions = 9, 2, 3
    rng = np.random.default_rng(4)
    logits_shape = (num_steps, batch_size, num_actions)
    args = dict(
        behaviour_policy_logits=rng.normal(size=logits_shape).astype(np.float32),
        target_policy_logits=rng.normal(size=logits_shape).astype(np.float32),
        actions=rng.integers(num_actions, size=(num_steps, batch_size)).astype(np.int32),
        **random_unroll((num_steps, batch_size), seed=5),
    )
    del args["log_rhos"]
    args = {name: tf.constant(value) for name, value in args.items()}
    eager = vtrace.from_logits(**args)
    specs = {name: tf.TensorSpec([None, *v.shape[1:]], v.dtype) for name, v in args.items()}
    specs["bootstrap_value"] = tf.TensorSpec([batch_size], tf.float32)
    graph_fn = tf.function(lambda **kw: vtrace.from_logits(**kw)).get_concrete_function(**specs)
    graph = graph_fn(**args)
    for name, eager_value, graph_value in zip(eager._fields, eager, graph, strict=True):
        np.testing.assert_allclose(graph_value, eager_value, rtol=1e-6, err_msg=name)


def test_no_gradient_through_targets_but_through_log_probs():
    inputs = random_unroll((5, 2), seed=6)
    values = tf.Variable(inputs.pop("values"))
    bootstrap_value = tf.Variable(inputs.pop("bootstrap_value"))
    target_logits = tf.Variable(np.random.default_rng(7).normal(size=(5, 2, 3)), dtype=tf.float32)
    del inputs["log_rhos"]
    with tf.GradientTape(persistent=True) as tape:
        returns = vtrace.from_logits(
            behaviour_policy_logits=tf.zeros([5, 2, 3]),
            target_policy_logits=target_logits,
            actions=tf.zeros([5, 2], tf.int32),
            values=values,
            bootstrap_value=bootstrap_value,
            **inputs,
        )
        targets_sum = tf.reduce_sum(returns.vs) + tf.reduce_sum(returns.pg_advantages)
        log_prob_sum = tf.reduce_sum(returns.target_action_log_probs)
    for source in (values, bootstrap_value, target_logits):
        assert tape.gradient(targets_sum, source) is None
    logits_gradient = tape.gradient(log_prob_sum, target_logits)
    assert logits_gradient is not None and np.abs(logits_gradient.numpy()).sum() > 0


@pytest.mark.parametrize(
    "bad_input, message",
    [
        (dict(bootstrap_value=np.zeros([4], np.float32)), "bootstrap_value has shape"),
        (dict(values=np.zeros([5], np.float32)), "values has shape"),
        (dict(log_rhos=np.zeros([5], np.float32)), "log_rhos must be"),
    ],
)
def test_bad_shapes_raise_clear_errors(bad_input, message):
    inputs = random_unroll((5, 3), seed=8)
    inputs.update(bad_input)
    with pytest.raises(ValueError, match=message):
        vtrace.from_importance_weights(**inputs)


def test_bad_logits_shapes_and_thresholds_raise_clear_errors():
    logits = np.zeros([5, 3, 4], np.float32)
    inputs = random_unroll((5, 3), seed=9)
    del inputs["log_rhos"]
    with pytest.raises(ValueError, match="actions has shape"):
        vtrace.from_logits(logits, logits, np.zeros([5, 4], np.int32), **inputs)
    with pytest.raises(ValueError, match="target_policy_logits has shape"):
        vtrace.from_logits(logits, logits[..., :2], np.zeros([5, 3], np.int32), **inputs)
    with pytest.raises(ValueError, match="positive or None, got -1"):
        vtrace.from_logits(
            logits, logits, np.zeros([5, 3], np.int32), **inputs, clip_c_threshold=-1.0
        )
