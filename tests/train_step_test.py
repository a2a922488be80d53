"""The learner's optimizer set-up (creating its state up front changes no later update) and its
steps on minibatches of a batch."""

import dataclasses

import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf

import agents
import config as config_lib
import train_step
import unrolls
from tools import random_unrolls


def linear_and_gradients():
    """A built snt.Linear(3) on [2, 4] inputs and one fixed gradient per variable."""
    module = snt.Linear(3, w_init=tf.constant_initializer(0.5))
    module(tf.ones([2, 4]))
    rng = np.random.default_rng(0)
    gradients = [tf.constant(rng.normal(size=v.shape), tf.float32) for v in module.variables]
    return module, gradients


@pytest.mark.parametrize("optimizer_name", ["adam", "rmsprop"])
def test_the_first_steps_after_create_optimizer_state_are_a_fresh_optimizers(optimizer_name):
    """Three updates with slots made by create_optimizer_state equal three of an optimizer that
    made its slots lazily (Adam: its bias correction counts real steps only)."""
    config = dataclasses.replace(config_lib.Config(), optimizer=optimizer_name)
    results = []
    for prepare in (True, False):
        module, gradients = linear_and_gradients()
        optimizer = train_step.make_optimizer(config, tf.Variable(config.learning_rate))
        if prepare:
            train_step.create_optimizer_state(optimizer, module)
            assert [v.numpy().tolist() for v in module.variables] == [
                v.numpy().tolist() for v in linear_and_gradients()[0].variables
            ], "the zero update moved a variable"
        for _ in range(3):
            optimizer.apply(gradients, module.variables)
        results.append([v.numpy() for v in module.variables])
    for prepared, fresh in zip(*results, strict=True):
        np.testing.assert_allclose(prepared, fresh, rtol=1e-6, atol=1e-9)


def test_fused_adam_updates_as_sonnets_adam_and_restores_its_checkpoints(tmp_path):
    """Ten updates of the learner's Adam (TF's fused kernel) equal Sonnet's, at an epsilon
    large enough to matter (the defaults'); a checkpoint of Sonnet's Adam restores into it."""
    config = config_lib.Config()
    sonnet_module, gradients = linear_and_gradients()
    sonnet = snt.optimizers.Adam(learning_rate=tf.Variable(1e-2), epsilon=config.epsilon)
    fused_module, _ = linear_and_gradients()
    fused = train_step.make_optimizer(config, tf.Variable(1e-2))
    assert isinstance(fused, train_step.FusedAdam)
    for scale in np.geomspace(1e-3, 10, 10):  # gradients near, above and below epsilon
        sonnet.apply([g * scale for g in gradients], sonnet_module.variables)
        fused.apply([g * scale for g in gradients], fused_module.variables)
    for expected, actual in zip(sonnet_module.variables, fused_module.variables, strict=True):
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-5, atol=1e-7)

    path = tf.train.Checkpoint(optimizer=sonnet).save(str(tmp_path / "ckpt"))
    restored = train_step.make_optimizer(config, tf.Variable(1e-2))
    train_step.create_optimizer_state(restored, linear_and_gradients()[0])
    tf.train.Checkpoint(optimizer=restored).restore(path).assert_consumed()
    assert int(restored.step.numpy()) == 10
    for expected, actual in zip(sonnet.m + sonnet.v, restored.m + restored.v, strict=True):
        np.testing.assert_array_equal(actual.numpy(), expected.numpy())


@pytest.mark.parametrize(
    "minibatch_unrolls, learners, share", [(2, 1, 2), (2, 2, 1), (2, 4, 1), (6, 2, 3), (0, 2, 0)]
)
def test_each_learner_takes_its_share_of_an_update(minibatch_unrolls, learners, share):
    """--minibatch_unrolls is over all learners: each takes its share, at least one unroll (0:
    its whole batch)."""
    assert config_lib.learner_minibatch_unrolls(minibatch_unrolls, learners) == share


def test_an_update_that_does_not_split_over_the_learners_is_refused():
    with pytest.raises(config_lib.ConfigError, match="--minibatch_unrolls=3 does not split"):
        config_lib.learner_minibatch_unrolls(3, 2)


@pytest.mark.parametrize("unrolls_per_minibatch, steps", [(0, 1), (5, 1), (3, 2), (2, 3), (1, 5)])
def test_minibatches_take_one_step_each_and_give_priorities_in_batch_order(
    unrolls_per_minibatch, steps
):
    """5 unrolls in minibatches of U: ceil(5 / U) optimizer steps (Adam counts them; U=0: one),
    every unroll in exactly one of them, its priority returned at its place in the batch (at
    learning rate 0 the priorities do not depend on the split, so they equal those of one step
    on the batch)."""
    agent = agents.MLPAgent(2)
    batch = random_unrolls.random_unroll(
        agent, ((4,), np.float32), 2, 5, 6, np.random.default_rng(0)
    )
    inputs = unrolls.to_time_major(batch)
    agent.unroll(inputs.agent_outputs.action, inputs.env_outputs, inputs.agent_state)  # builds it
    config = config_lib.Config()
    results = {}
    for split, expected_steps in ((0, 1), (unrolls_per_minibatch, steps)):
        optimizer = train_step.make_optimizer(config, tf.Variable(0.0))
        train_step.create_optimizer_state(optimizer, agent)
        step = train_step.make_batch_step(agent, optimizer, config, train_step.SingleProcess)
        outputs, priorities = train_step.train_in_minibatches(
            step, batch, np.ones(5, np.float32), split, np.random.default_rng(1)
        )
        assert int(optimizer.step.numpy()) == expected_steps
        assert priorities.dtype == np.float32 and priorities.shape == (5,)
        assert all(np.isfinite(value) for value in outputs.values())
        results[split] = priorities
    np.testing.assert_allclose(results[unrolls_per_minibatch], results[0], rtol=1e-5)


def compiled_calls(batch_step, batch, minibatches):
    """How many calls of XLA-compiled functions the graph of `batch_step` (train_step's batch
    step, already run on `batch` with `minibatches`) holds, its function library included."""
    num_unrolls = len(batch.parameter_version)
    weights, order = np.ones(num_unrolls, np.float32), np.arange(num_unrolls, dtype=np.int32)
    graph = batch_step.get_concrete_function(batch, weights, order, minibatches).graph
    graph_def = graph.as_graph_def()
    nodes = [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]
    return sum(node.attr["_XlaMustCompile"].b for node in nodes)


@pytest.mark.parametrize(
    "agent_name",
    [
        "MLPAgent",
        "SimpleConvNetAgent",
        pytest.param("ResNetAgent", marks=pytest.mark.slow),  # XLA compiles it in ~40 s
        pytest.param("ResNetLSTMAgent", marks=pytest.mark.slow),
    ],
)
def test_the_xla_step_updates_as_the_plain_step(agent_name):
    """From the same parameters, a batch step (2 minibatches) compiled by XLA (--xla: its graph
    calls 2 compiled functions per minibatch, the plain one none) gives the plain step's loss,
    priorities and updated parameters up to float rounding.

    Adam with epsilon 1 here: where a gradient g is near 0, Adam moves by ~g / (|g| + epsilon)
    of a step, and with an epsilon of 3.2e-4 (1e-5 after the bias correction) the float
    rounding of such a g (XLA fuses and orders the sums differently) turned into up to 18 % of
    a step for one parameter of ResNetAgent (CI, twice in 2 runs). With epsilon 1 the update is
    near-linear in g: the worst of ~10^6 parameters differed by 1e-4 of a step (ResNetAgent and
    ResNetLSTMAgent, 4 initialisations each) against 0.028 with the default; under the suite's
    load on an AMD EPYC, one LSTM bias differed by 1.3e-3 of a step (TF's thread pools then
    order the sums otherwise), so each update must agree to 5e-3 of a step."""
    agent = agents.agent_factory(agent_name)(3)
    spec = ((4,), np.float32) if agent_name == "MLPAgent" else ((84, 84, 4), np.uint8)
    batch = random_unrolls.random_unroll(agent, spec, 3, 4, 5, np.random.default_rng(0))
    inputs = unrolls.to_time_major(batch)
    agent.unroll(inputs.agent_outputs.action, inputs.env_outputs, inputs.agent_state)  # builds it
    initial = [v.numpy() for v in agent.trainable_variables]
    config = dataclasses.replace(config_lib.Config(), epsilon=1.0)
    results = {}
    for xla in (False, True):
        for variable, value in zip(agent.trainable_variables, initial, strict=True):
            variable.assign(value)
        step, _ = train_step.single_process_step(
            agent, dataclasses.replace(config, xla="on" if xla else "off")
        )
        outputs, priorities = train_step.train_in_minibatches(
            step, batch, np.ones(4, np.float32), 2, np.random.default_rng(1)
        )  # minibatches of 2 unrolls
        assert compiled_calls(step, batch, minibatches=2) == (4 if xla else 0)
        results[xla] = outputs, priorities, [v.numpy() for v in agent.trainable_variables]
    (plain_outputs, plain_priorities, plain), (xla_outputs, xla_priorities, xla) = (
        results[False],
        results[True],
    )
    assert plain_outputs.keys() == xla_outputs.keys()
    for name, value in plain_outputs.items():
        np.testing.assert_allclose(xla_outputs[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(xla_priorities, plain_priorities, rtol=1e-4, atol=1e-6)
    # The updates, to 1e-3 of each and 5e-3 of an Adam step (~the learning rate).
    for before, after_plain, after_xla in zip(initial, plain, xla, strict=True):
        assert not np.array_equal(after_plain, before)  # Adam moves every parameter
        np.testing.assert_allclose(
            after_xla - before, after_plain - before, rtol=1e-3, atol=5e-3 * config.learning_rate
        )


@pytest.mark.parametrize(
    "kind, variance, divisor",
    [
        ("variance", 4.0, 4.0),
        ("variance", 1e-6, train_step.MIN_TARGET_VARIANCE),
        ("std", 4.0, 2.0),
        ("std", 1e-6, train_step.MIN_TARGET_VARIANCE**0.5),
    ],
)
def test_the_value_term_is_divided_by_the_targets_variance_or_std_at_least_its_floor(
    kind, variance, divisor
):
    """--normalize_value_loss: the value term over the targets' running variance, or its square
    root with --value_loss_divisor=std (floored: a game whose targets do not vary yet), the
    other terms as they were, the total of them all."""
    agent = agents.MLPAgent(2)
    batch = random_unrolls.random_unroll(
        agent, ((4,), np.float32), 2, 3, 5, np.random.default_rng(2)
    )
    inputs = unrolls.to_time_major(batch)
    config = config_lib.Config(value_loss_divisor=kind)
    plain_total, plain, _ = train_step.actor_critic_loss(agent, inputs, config)
    total, parts, stats = train_step.actor_critic_loss(
        agent, inputs, config, target_variance=tf.constant(variance)
    )
    np.testing.assert_allclose(parts["baseline"], plain["baseline"] / divisor, rtol=1e-5)
    for name in ("policy_gradient", "entropy"):
        np.testing.assert_allclose(parts[name], plain[name], rtol=1e-6)
    expected_total = plain_total - config.baseline_cost * plain["baseline"] * (1 - 1 / divisor)
    np.testing.assert_allclose(total, expected_total, rtol=1e-4, atol=1e-5)
    assert float(stats["target_mean_square"]) >= float(stats["target_mean"]) ** 2


@pytest.mark.parametrize("normalize_value_loss, popart", [(True, False), (False, True)])
def test_the_value_targets_moments_start_at_variance_1(normalize_value_loss, popart):
    """value_target_moments: the learner's and the benchmarks' divisor of the value term starts
    at variance 1 (no target seen), with --normalize_value_loss or --popart (which implies it)."""
    config = config_lib.Config(normalize_value_loss=normalize_value_loss, popart=popart)
    moments = train_step.value_target_moments(config)
    assert float(moments.variance) == 1.0 and float(moments.mean) == 0.0


def test_without_a_normalised_value_term_there_are_no_target_moments():
    config = config_lib.Config(normalize_value_loss=False, popart=False)
    assert train_step.value_target_moments(config) is None
