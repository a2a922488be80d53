"""Tests of the agent zoo: shapes, unroll == stepping, LSTM resets, variable reuse, references."""

import re

import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf
import tree

import agents
from environments import StepOutput, StepOutputInfo

NUM_ACTIONS = 6
T, B = 4, 2
ATARI_OBSERVATION = ((84, 84, 4), np.uint8)
VECTOR_OBSERVATION = ((4,), np.float32)


def observation_spec(agent_name):
    return VECTOR_OBSERVATION if agent_name == "MLPAgent" else ATARI_OBSERVATION


@pytest.fixture(autouse=True)
def _seed():
    tf.random.set_seed(0)


def make_env_outputs(agent_name, rng, leading_shape, done=None):
    """A StepOutput of tensors with leading dims `leading_shape`, e.g. (T, B) or (B,)."""
    shape, dtype = observation_spec(agent_name)
    if dtype == np.uint8:
        observation = rng.integers(0, 256, size=leading_shape + shape, dtype=np.uint8)
    else:
        observation = rng.normal(size=leading_shape + shape).astype(dtype)
    if done is None:
        done = np.zeros(leading_shape, dtype=bool)
    # Rewards well outside [-1, 1] so that clipping matters.
    reward = rng.normal(scale=3.0, size=leading_shape).astype(np.float32)
    info = StepOutputInfo(
        episode_return=np.cumsum(reward, axis=0).astype(np.float32),
        episode_step=np.ones(leading_shape, dtype=np.int32),
        game_over=done,
    )
    return tree.map_structure(tf.constant, StepOutput(reward, info, done, observation))


def make_actions(rng, leading_shape):
    return tf.constant(rng.integers(0, NUM_ACTIONS, size=leading_shape, dtype=np.int32))


def random_state(agent, rng):
    """A non-zero core state, so that threading (or resetting) it shows in the outputs."""
    return tree.map_structure(
        lambda s: tf.constant(rng.normal(size=s.shape).astype(np.float32)), agent.initial_state(B)
    )


def time_slice(nest, start, stop=None):
    """[T, ...] leaves -> [start:stop] (or the single step `start` when stop is None)."""
    if stop is None:
        return tree.map_structure(lambda t: t[start], nest)
    return tree.map_structure(lambda t: t[start:stop], nest)


def assert_outputs_close(actual, expected):
    np.testing.assert_allclose(actual.policy_logits, expected.policy_logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(actual.baseline, expected.baseline, rtol=1e-5, atol=1e-5)


def assert_states_close(actual, expected):
    tree.assert_same_structure(actual, expected)
    for a, e in zip(tree.flatten(actual), tree.flatten(expected), strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)


def unroll_signature(agent_name, agent):
    """Input signature of `unroll` with a dynamic batch size (as an actor's varying batch)."""
    shape, dtype = observation_spec(agent_name)
    info = StepOutputInfo(
        tf.TensorSpec([T, None], tf.float32),
        tf.TensorSpec([T, None], tf.int32),
        tf.TensorSpec([T, None], tf.bool),
    )
    env_outputs = StepOutput(
        tf.TensorSpec([T, None], tf.float32),
        info,
        tf.TensorSpec([T, None], tf.bool),
        tf.TensorSpec((T, None) + shape, tf.as_dtype(dtype)),
    )
    state = tree.map_structure(
        lambda s: tf.TensorSpec([None] + s.shape[1:], s.dtype), agent.initial_state(1)
    )
    return [tf.TensorSpec([T, None], tf.int32), env_outputs, state]


@pytest.mark.parametrize("agent_name", sorted(agents.AGENTS))
@pytest.mark.parametrize("mode", ["eager", "tf_function"])
def test_output_shapes_and_dtypes(agent_name, mode):
    rng = np.random.default_rng(0)
    agent = agents.agent_factory(agent_name)(NUM_ACTIONS)
    step, unroll = agent, agent.unroll
    if mode == "tf_function":
        step = tf.function(agent.__call__)
        unroll = tf.function(agent.unroll, input_signature=unroll_signature(agent_name, agent))

    step_output, step_state = step(
        make_actions(rng, (B,)), make_env_outputs(agent_name, rng, (B,)), agent.initial_state(B)
    )
    actions, env_outputs = make_actions(rng, (T, B)), make_env_outputs(agent_name, rng, (T, B))
    unroll_output, unroll_state = unroll(actions, env_outputs, agent.initial_state(B))

    for output, leading_shape in ((step_output, [B]), (unroll_output, [T, B])):
        assert output.action.dtype == tf.int32
        assert output.action.shape == leading_shape
        assert np.all((output.action.numpy() >= 0) & (output.action.numpy() < NUM_ACTIONS))
        assert output.policy_logits.dtype == tf.float32
        assert output.policy_logits.shape == leading_shape + [NUM_ACTIONS]
        assert output.baseline.dtype == tf.float32
        assert output.baseline.shape == leading_shape
    for state in (step_state, unroll_state):
        if agent_name == "ResNetLSTMAgent":
            assert isinstance(state, snt.LSTMState)
            assert state.hidden.shape == [B, 256] and state.cell.shape == [B, 256]
        else:
            assert state == ()
    # Traced or not, the same numbers.
    eager_output, eager_state = agent.unroll(actions, env_outputs, agent.initial_state(B))
    assert_outputs_close(unroll_output, eager_output)
    assert_states_close(unroll_state, eager_state)


@pytest.mark.parametrize("agent_name", sorted(agents.AGENTS))
def test_unroll_equals_single_steps(agent_name):
    rng = np.random.default_rng(1)
    agent = agents.agent_factory(agent_name)(NUM_ACTIONS)
    done = np.zeros((T, B), dtype=bool)
    done[2, 0] = True  # Env 0 starts a new episode at step 2; env 1 runs on.
    actions = make_actions(rng, (T, B))
    env_outputs = make_env_outputs(agent_name, rng, (T, B), done)
    initial_state = random_state(agent, rng)

    unroll_output, unroll_state = agent.unroll(actions, env_outputs, initial_state)

    state = initial_state
    for t in range(T):
        step_output, state = agent(actions[t], time_slice(env_outputs, t), state)
        assert_outputs_close(step_output, time_slice(unroll_output, t))
    assert_states_close(unroll_state, state)


def test_lstm_done_makes_output_independent_of_the_past():
    rng = np.random.default_rng(2)
    agent = agents.ResNetLSTMAgent(NUM_ACTIONS)
    reset_step = 2
    done = np.zeros((T, B), dtype=bool)
    done[reset_step, 0] = True  # Only env 0 starts a new episode.
    actions = make_actions(rng, (T, B))
    env_outputs = make_env_outputs(agent.__class__.__name__, rng, (T, B), done)

    output, _ = agent.unroll(actions, env_outputs, random_state(agent, rng))
    # The same new-episode steps, seen with no past at all.
    fresh_output, _ = agent.unroll(
        actions[reset_step:], time_slice(env_outputs, reset_step, T), agent.initial_state(B)
    )

    after_reset = time_slice(output, reset_step, T)
    np.testing.assert_allclose(
        after_reset.policy_logits[:, 0], fresh_output.policy_logits[:, 0], rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        after_reset.baseline[:, 0], fresh_output.baseline[:, 0], rtol=1e-5, atol=1e-5
    )
    # Env 1 was not reset: its past state still shows, so the comparison above is not vacuous.
    assert not np.allclose(
        after_reset.policy_logits[:, 1], fresh_output.policy_logits[:, 1], atol=1e-4
    )


@pytest.mark.parametrize("agent_name", sorted(agents.AGENTS))
def test_variables_are_created_once_and_reused(agent_name):
    rng = np.random.default_rng(3)
    agent = agents.agent_factory(agent_name)(NUM_ACTIONS)
    with pytest.raises(ValueError, match="does not currently contain any trainable_variables"):
        agent.trainable_variables  # noqa: B018 - Sonnet refuses: nothing is created yet.

    agent(make_actions(rng, (B,)), make_env_outputs(agent_name, rng, (B,)), agent.initial_state(B))
    first = [v.ref() for v in agent.trainable_variables]
    assert first

    agent(make_actions(rng, (B,)), make_env_outputs(agent_name, rng, (B,)), agent.initial_state(B))
    agent.unroll(
        make_actions(rng, (T, B)), make_env_outputs(agent_name, rng, (T, B)), agent.initial_state(B)
    )
    tf.function(agent.unroll)(
        make_actions(rng, (T, B)), make_env_outputs(agent_name, rng, (T, B)), agent.initial_state(B)
    )
    assert [v.ref() for v in agent.trainable_variables] == first


def conv_params(kernel, in_channels, out_channels):
    return kernel * kernel * in_channels * out_channels + out_channels


def linear_params(inputs, outputs):
    return inputs * outputs + outputs


def heads_params(features):
    return linear_params(features, NUM_ACTIONS) + linear_params(features, 1)


# IMPALA deep torso on 84x84x4: three max-pools of stride 2 (SAME) give 42, 21, then 11.
RESNET_TORSO_PARAMS = sum(
    conv_params(3, in_channels, channels) + 4 * conv_params(3, channels, channels)
    for in_channels, channels in ((4, 16), (16, 32), (32, 32))
) + linear_params(11 * 11 * 32, 256)
EXTRAS = 1 + NUM_ACTIONS  # Clipped last reward and one-hot last action.
EXPECTED_PARAMS = {
    # Nature CNN on 84x84x4: VALID convs give 20x20x32, 9x9x64, 7x7x64.
    "SimpleConvNetAgent": conv_params(8, 4, 32)
    + conv_params(4, 32, 64)
    + conv_params(3, 64, 64)
    + linear_params(7 * 7 * 64, 512)
    + heads_params(512 + EXTRAS),
    "ResNetAgent": RESNET_TORSO_PARAMS + heads_params(256 + EXTRAS),
    # LSTM: four gates, each from [input, hidden] with a bias.
    "ResNetLSTMAgent": RESNET_TORSO_PARAMS
    + 4 * linear_params(256 + EXTRAS + 256, 256)
    + heads_params(256),
    "MLPAgent": linear_params(4, 64) + linear_params(64, 64) + heads_params(64 + EXTRAS),
}


def parameter_count(variables):
    return sum(int(np.prod(v.shape)) for v in variables)


@pytest.mark.parametrize("agent_name", sorted(agents.AGENTS))
def test_parameter_count_matches_the_architecture(agent_name):
    rng = np.random.default_rng(4)
    agent = agents.agent_factory(agent_name)(NUM_ACTIONS)
    agent(make_actions(rng, (B,)), make_env_outputs(agent_name, rng, (B,)), agent.initial_state(B))
    assert parameter_count(agent.trainable_variables) == EXPECTED_PARAMS[agent_name]


def variables_by_name(agent):
    """{'torso/linear_0/w': array, ...}, without the agent's own name scope."""
    return {v.name.split("/", 1)[1].split(":")[0]: v.numpy() for v in agent.trainable_variables}


def test_mlp_agent_matches_numpy_reference():
    rng = np.random.default_rng(5)
    agent = agents.MLPAgent(NUM_ACTIONS)
    actions = make_actions(rng, (T, B))
    env_outputs = make_env_outputs("MLPAgent", rng, (T, B))
    output, _ = agent.unroll(actions, env_outputs, agent.initial_state(B))

    # The paper's definition: torso, then [features, clip(reward, -1, 1), one_hot(last action)].
    w = variables_by_name(agent)
    observation = env_outputs.observation.numpy()
    hidden = np.maximum(observation @ w["torso/linear_0/w"] + w["torso/linear_0/b"], 0.0)
    hidden = np.maximum(hidden @ w["torso/linear_1/w"] + w["torso/linear_1/b"], 0.0)
    features = np.concatenate(
        [
            hidden,
            np.clip(env_outputs.reward.numpy(), -1, 1)[..., None],
            np.eye(NUM_ACTIONS)[actions.numpy()],
        ],
        axis=-1,
    )
    expected_logits = features @ w["policy_logits/w"] + w["policy_logits/b"]
    expected_baseline = (features @ w["baseline/w"] + w["baseline/b"])[..., 0]
    np.testing.assert_allclose(output.policy_logits, expected_logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(output.baseline, expected_baseline, rtol=1e-5, atol=1e-5)


def test_uint8_frames_are_scaled_to_unit_interval():
    rng = np.random.default_rng(6)
    agent = agents.SimpleConvNetAgent(NUM_ACTIONS)
    actions = make_actions(rng, (T, B))
    env_outputs = make_env_outputs("SimpleConvNetAgent", rng, (T, B))
    as_floats = env_outputs._replace(
        observation=tf.cast(env_outputs.observation, tf.float32) / 255.0
    )
    uint8_output, _ = agent.unroll(actions, env_outputs, ())
    float_output, _ = agent.unroll(actions, as_floats, ())
    assert_outputs_close(uint8_output, float_output)


def test_actions_are_sampled_from_the_policy():
    rng = np.random.default_rng(7)
    num_samples = 20_000
    agent = agents.MLPAgent(NUM_ACTIONS)
    # The same input everywhere, so every batch element has the same policy.
    env_output = tree.map_structure(
        lambda t: tf.repeat(t, num_samples, axis=0), make_env_outputs("MLPAgent", rng, (1,))
    )
    last_action = tf.zeros([num_samples], tf.int32)
    agent(last_action, env_output, ())
    # Make the policy clearly non-uniform.
    policy_bias = next(v for v in agent.trainable_variables if "policy_logits/b" in v.name)
    policy_bias.assign([2.0, 0.0, -1.0, 1.0, 0.5, -2.0])

    output, _ = agent(last_action, env_output, ())
    logits = output.policy_logits.numpy()[0]
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    frequencies = np.bincount(output.action.numpy(), minlength=NUM_ACTIONS) / num_samples
    np.testing.assert_allclose(frequencies, expected, atol=0.015)


def test_agent_factory_returns_the_named_class():
    for name, cls in agents.AGENTS.items():
        assert agents.agent_factory(name) is cls
        assert cls.__name__ == name


def test_agent_factory_error_lists_valid_names():
    with pytest.raises(agents.UnknownAgentError, match="'NoSuchAgent'") as error:
        agents.agent_factory("NoSuchAgent")
    assert isinstance(error.value, ValueError)
    for name in agents.AGENTS:
        assert name in str(error.value)


def test_bad_observation_shape_is_named():
    rng = np.random.default_rng(8)
    agent = agents.MLPAgent(NUM_ACTIONS)
    images = make_env_outputs("SimpleConvNetAgent", rng, (T, B))
    with pytest.raises(ValueError, match=r"MLPAgent expects observations of shape \[T, B, D\]"):
        agent.unroll(make_actions(rng, (T, B)), images, ())


@pytest.mark.parametrize("num_actions", [0, -1, 2.0, "6"])
def test_bad_num_actions_is_named(num_actions):
    with pytest.raises(
        ValueError, match=re.escape(f"num_actions must be a positive integer, got {num_actions!r}")
    ):
        agents.SimpleConvNetAgent(num_actions)


def test_numpy_integer_num_actions_is_accepted():
    # gymnasium's Discrete(n).n is a NumPy integer.
    agent = agents.MLPAgent(np.int64(NUM_ACTIONS))
    assert agent.num_actions == NUM_ACTIONS and type(agent.num_actions) is int


@pytest.mark.parametrize("agent_name", sorted(agents.AGENTS))
def test_a_bfloat16_torso_keeps_float32_variables_and_outputs_near_float32s(agent_name):
    """The same weights in both agents: a bfloat16 torso's logits and baseline are within
    bfloat16's rounding of float32's, and its gradients reach the float32 variables."""
    rng = np.random.default_rng(5)
    actions, env_outputs = make_actions(rng, (T, B)), make_env_outputs(agent_name, rng, (T, B))
    state = random_state(agents.agent_factory(agent_name)(NUM_ACTIONS), rng)
    unrolled = {}
    for dtype in agents.base.TORSO_DTYPES:
        agent = agents.agent_factory(agent_name)(
            NUM_ACTIONS, initialization="orthogonal", torso_dtype=dtype
        )
        agent.unroll(actions, env_outputs, state)  # creates the variables
        if dtype != "float32":
            for mine, float32s in zip(
                agent.variables, unrolled["float32"][0].variables, strict=True
            ):
                mine.assign(float32s)
        with tf.GradientTape() as tape:
            outputs, _ = tf.function(agent.unroll)(actions, env_outputs, state)
            loss = tf.reduce_sum(outputs.policy_logits**2) + tf.reduce_sum(outputs.baseline**2)
        unrolled[dtype] = agent, outputs, tape.gradient(loss, agent.trainable_variables)

    agent, outputs, gradients = unrolled["bfloat16"]
    assert {v.dtype for v in agent.variables} == {tf.float32}
    assert outputs.policy_logits.dtype == outputs.baseline.dtype == tf.float32
    _, expected, expected_gradients = unrolled["float32"]
    scale = np.abs(expected.policy_logits).max() + np.abs(expected.baseline).max()
    # bfloat16 keeps 8 significant bits: ~0.4 % a rounding, a few of them through the torso.
    np.testing.assert_allclose(outputs.policy_logits, expected.policy_logits, atol=0.05 * scale)
    np.testing.assert_allclose(outputs.baseline, expected.baseline, atol=0.05 * scale)
    assert not np.allclose(outputs.baseline, expected.baseline, rtol=0, atol=1e-7)  # it differs
    assert all(g.dtype == tf.float32 and tf.reduce_any(g != 0) for g in gradients)
    flat, expected_flat = (tf.concat([tf.reshape(g, [-1]) for g in gs], 0) for gs in
                           (gradients, expected_gradients))  # fmt: skip
    # bfloat16 keeps 8 significant bits: the deepest torso (ResNet's, then an LSTM) strays most.
    assert tf.norm(flat - expected_flat) / tf.norm(expected_flat) < 0.2


def test_an_unknown_torso_dtype_is_named():
    with pytest.raises(ValueError, match="unknown torso dtype 'float16'; valid: float32, bfloat16"):
        agents.SimpleConvNetAgent(NUM_ACTIONS, initialization="orthogonal", torso_dtype="float16")


FEED_FORWARD_AGENTS = sorted(name for name in agents.AGENTS if name != "ResNetLSTMAgent")


@pytest.mark.parametrize("agent_name", FEED_FORWARD_AGENTS)
def test_a_separate_value_torso_doubles_only_the_torso(agent_name):
    rng = np.random.default_rng(6)
    agent = agents.agent_factory(agent_name)(NUM_ACTIONS, separate_value_torso=True)
    agent(make_actions(rng, (B,)), make_env_outputs(agent_name, rng, (B,)), agent.initial_state(B))
    torso, value_torso = (
        [v for v in agent.trainable_variables if f"/{scope}/" in v.name]
        for scope in ("torso", "value_torso")
    )
    assert [v.shape for v in value_torso] == [v.shape for v in torso] != []
    assert parameter_count(agent.trainable_variables) == (
        EXPECTED_PARAMS[agent_name] + parameter_count(torso)
    )
    assert "separate value torso" in agent.describe()


@pytest.mark.parametrize("torso_dtype", agents.base.TORSO_DTYPES)
@pytest.mark.parametrize("agent_name", FEED_FORWARD_AGENTS)
def test_the_value_gradient_reaches_only_its_own_torso(agent_name, torso_dtype):
    """With a separate value torso the baseline's gradient reaches the value torso and head and
    nothing of the policy's, and the logits' gradient nothing of the value's; shared, the
    baseline's gradient reaches the one torso."""
    rng = np.random.default_rng(7)
    actions, env_outputs = make_actions(rng, (T, B)), make_env_outputs(agent_name, rng, (T, B))

    def reached(agent, output):
        """The names of the variables that `output`'s sum of squares has a gradient in."""
        with tf.GradientTape() as tape:
            outputs, _ = agent.unroll(actions, env_outputs, agent.initial_state(B))
            loss = tf.reduce_sum(getattr(outputs, output) ** 2)
        gradients = tape.gradient(loss, agent.trainable_variables)
        return {
            v.name.split("/", 1)[1]
            for v, g in zip(agent.trainable_variables, gradients, strict=True)
            if g is not None and tf.reduce_any(g != 0)
        }

    separate = agents.agent_factory(agent_name)(
        NUM_ACTIONS, torso_dtype=torso_dtype, separate_value_torso=True
    )
    separate.unroll(actions, env_outputs, separate.initial_state(B))  # creates the variables
    value_reached = reached(separate, "baseline")
    policy_reached = reached(separate, "policy_logits")
    assert value_reached and policy_reached
    assert all(name.startswith(("value_torso/", "baseline/")) for name in value_reached)
    assert all(name.startswith(("torso/", "policy_logits/")) for name in policy_reached)

    shared = agents.agent_factory(agent_name)(NUM_ACTIONS, torso_dtype=torso_dtype)
    shared.unroll(actions, env_outputs, shared.initial_state(B))
    assert any(name.startswith("torso/") for name in reached(shared, "baseline"))


def test_a_recurrent_agent_refuses_a_separate_value_torso():
    with pytest.raises(ValueError, match="--separate_value_torso needs a feed-forward agent"):
        agents.ResNetLSTMAgent(NUM_ACTIONS, separate_value_torso=True)
