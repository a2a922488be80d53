"""replay.py: what goes in comes out bit-identical, sampling follows its distribution, the
learner's batches mix as documented, priorities and importance weights follow the formulas.

The frequency tests are chi-square goodness-of-fit tests; each fails a correct implementation
with probability 1e-6 (cpprb draws from its own unseeded generator, so runs differ).
"""

import numpy as np
import pytest
import tensorflow as tf

import agents
import config as config_lib
import losses
import replay
import train_step
import unrolls
from tools import random_unrolls

# Upper 1e-6 quantiles of the chi-square distribution (computed with mpmath's regularized
# incomplete gamma function): the statistic exceeds them with probability 1e-6.
CHI_SQUARE_1E6 = {4: 33.377, 9: 44.811}
T, NUM_ACTIONS, FRAME = 5, 6, ((84, 84, 4), np.uint8)


def lstm_unroll_spec():
    """The real unroll layout of ResNetLSTMAgent on Atari frames (it has a core state)."""
    agent = agents.ResNetLSTMAgent(NUM_ACTIONS)
    return agent, unrolls.UnrollSpec(unrolls.unroll_structure(agent, FRAME, NUM_ACTIONS, T))


def random_batch(agent, size, first_id, seed):
    """A batch-major random Unroll whose parameter_version numbers its unrolls from first_id;
    its LSTM state random too (not the all-zero initial state)."""
    rng = np.random.default_rng(seed)
    batch = random_unrolls.random_unroll(agent, FRAME, NUM_ACTIONS, size, T, rng)
    state = tf.nest.map_structure(
        lambda s: rng.normal(size=s.shape).astype(s.dtype), batch.agent_state
    )
    return batch._replace(
        agent_state=state, parameter_version=np.arange(first_id, first_id + size, dtype=np.int64)
    )


def chi_square(counts, probabilities):
    expected = np.sum(counts) * np.asarray(probabilities)
    return float(np.sum((counts - expected) ** 2 / expected))


def test_a_replayed_unroll_is_bit_identical_to_the_one_stored():
    agent, spec = lstm_unroll_spec()
    memory = replay.UnrollReplay(spec, capacity=8)
    stored = {}
    for first_id, seed in ((0, 1), (3, 2)):
        batch = random_batch(agent, 3, first_id, seed)
        memory.add(tf.nest.flatten(batch))
        for b in range(3):
            stored[first_id + b] = [x[b] for x in tf.nest.flatten(batch)]
    assert memory.size == 6
    flat, indexes, weights = memory.sample(200)
    assert indexes is None and np.all(weights == 1)
    sampled = spec.pack(flat)
    assert set(sampled.parameter_version) == set(stored)  # all six came back, by 200 draws
    for i, unroll_id in enumerate(sampled.parameter_version):
        for want, got in zip(stored[unroll_id], (x[i] for x in flat), strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)


def test_the_oldest_unrolls_are_overwritten_first():
    agent, spec = lstm_unroll_spec()
    memory = replay.UnrollReplay(spec, capacity=4)
    memory.add(tf.nest.flatten(random_batch(agent, 3, 0, 1)))
    memory.add(tf.nest.flatten(random_batch(agent, 3, 3, 2)))
    assert memory.size == 4
    assert set(spec.pack(memory.sample(300)[0]).parameter_version) == {2, 3, 4, 5}


def small_spec():
    return unrolls.UnrollSpec(
        unrolls.Unroll(
            agent_state=(),
            env_outputs=tf.TensorSpec([3], tf.float32),
            agent_outputs=tf.TensorSpec([3], tf.int32),
            parameter_version=tf.TensorSpec([], tf.int64),
        )
    )


def fill(memory, count):
    memory.add([np.zeros((count, 3), np.float32), np.zeros((count, 3), np.int32), np.arange(count)])


def set_priorities(memory, priorities):
    """Gives slot i priority priorities[i] (after a sample: only unrolls stored before the last
    sample are updated, as in the learner's cycle)."""
    memory.sample(1)
    memory.update_priorities(np.arange(len(priorities)), np.asarray(priorities))


def sampled_counts(memory, count, draws, batches=50, beta=None):
    counts = np.zeros(count)
    for _ in range(batches):
        flat, _, _ = memory.sample(draws // batches, beta)
        counts += np.bincount(flat[-1], minlength=count)
    return counts


def test_uniform_sampling_frequencies_are_uniform():
    memory = replay.UnrollReplay(small_spec(), capacity=10)
    fill(memory, 10)
    counts = sampled_counts(memory, 10, 50_000)
    assert chi_square(counts, np.full(10, 0.1)) < CHI_SQUARE_1E6[9], counts


def test_prioritized_frequencies_follow_priority_to_the_alpha():
    alpha = 0.6
    memory = replay.UnrollReplay(small_spec(), capacity=5, prioritized=True, alpha=alpha)
    fill(memory, 5)
    priorities = np.array([0.5, 1.0, 2.0, 4.0, 8.0])
    set_priorities(memory, priorities)
    counts = sampled_counts(memory, 5, 50_000)
    # cpprb adds eps = 1e-4 to each priority before raising it to alpha.
    expected = (priorities + 1e-4) ** alpha
    assert chi_square(counts, expected / expected.sum()) < CHI_SQUARE_1E6[4], counts
    # Not merely uniform: the highest priority is drawn far more often than the lowest.
    assert counts[4] > 3 * counts[0]


@pytest.mark.parametrize("beta", [0.4, 1.0])
def test_importance_weights_match_the_formula(beta):
    alpha = 0.6
    memory = replay.UnrollReplay(small_spec(), capacity=5, prioritized=True, alpha=alpha)
    fill(memory, 5)
    priorities = np.array([0.5, 1.0, 2.0, 4.0, 8.0])
    set_priorities(memory, priorities)
    flat, indexes, weights = memory.sample(64, beta)
    np.testing.assert_array_equal(flat[-1], indexes)  # the index is the unroll's slot
    probability = (priorities + 1e-4) ** alpha / np.sum((priorities + 1e-4) ** alpha)
    # w_i = (N P(i))^-beta / max_j w_j, the max being the least likely unroll's weight.
    expected = (5 * probability[indexes]) ** -beta / (5 * probability.min()) ** -beta
    np.testing.assert_allclose(weights, expected, rtol=1e-4)


def test_new_unrolls_get_the_highest_priority_seen():
    memory = replay.UnrollReplay(small_spec(), capacity=6, prioritized=True)
    fill(memory, 2)
    set_priorities(memory, [0.1, 5.0])
    memory.add([np.zeros((1, 3), np.float32), np.zeros((1, 3), np.int32), np.array([2])])
    _, indexes, weights = memory.sample(200, beta=1.0)
    # Slot 2 entered with priority 5, as likely as slot 1: the same (smallest) weight.
    assert set(indexes) == {0, 1, 2}
    np.testing.assert_allclose(weights[indexes == 2], weights[indexes == 1][0])


def test_start_size_and_memory_figures():
    assert replay.start_size(10_000, 32) == 1000
    assert replay.start_size(100, 32) == 32
    _, spec = lstm_unroll_spec()
    frames = (T + 1) * 84 * 84 * 4
    assert frames < replay.bytes_per_unroll(spec) < frames + 5000  # frames dominate
    needed = replay.check_fits(1000, spec, available_bytes=10 * 2**30)
    assert needed == 1000 * replay.bytes_per_unroll(spec)
    with pytest.raises(replay.ReplayTooLargeError, match=r"--replay_size=100000 unrolls need"):
        replay.check_fits(100_000, spec, available_bytes=10 * 2**30)


def test_priorities_are_the_r2d2_mix_of_max_and_mean_value_errors():
    errors = np.array([[1.0, -4.0], [-3.0, 0.0]], np.float32)  # [T=2, B=2]
    np.testing.assert_allclose(
        losses.unroll_priorities(errors), [0.9 * 3 + 0.1 * 2, 0.9 * 4 + 0.1 * 2], rtol=1e-6
    )


def mlp_setup(seed=0):
    """MLPAgent on CartPole shapes, the default Config's train step, a random batch."""
    agent = agents.MLPAgent(2)
    rng = np.random.default_rng(seed)
    batch = random_unrolls.random_unroll(agent, ((4,), np.float32), 2, 8, T, rng)
    inputs = unrolls.to_time_major(batch)
    agent.unroll(inputs.agent_outputs.action, inputs.env_outputs, inputs.agent_state)
    return agent, batch


def on_policy(agent, batch):
    """`batch` (batch-major) with the agent's current logits and values stored as behaviour's:
    rho = 1, and the stored values are the current ones."""
    inputs = unrolls.to_time_major(batch)
    learner_outputs, _ = agent.unroll(
        inputs.agent_outputs.action, inputs.env_outputs, inputs.agent_state
    )

    def current(stored, computed):
        """agent_outputs[:, t + 1] was computed on env_outputs[:, t]."""
        computed = np.swapaxes(computed.numpy()[:-1], 0, 1)
        return np.concatenate([stored[:, :1], computed], axis=1)

    return batch._replace(
        agent_outputs=batch.agent_outputs._replace(
            policy_logits=current(batch.agent_outputs.policy_logits, learner_outputs.policy_logits),
            baseline=current(batch.agent_outputs.baseline, learner_outputs.baseline),
        )
    )


def loss_gradients(agent, batch, config):
    with tf.GradientTape() as tape:
        total, _, stats = train_step.actor_critic_loss(agent, unrolls.to_time_major(batch), config)
    return tape.gradient(total, agent.trainable_variables), stats


def test_policy_clip_on_policy_is_the_policy_gradient_and_off_policy_clips():
    """On-policy (ratio 1, stored values the current ones) PPO's clipped surrogate has IMPALA's
    gradient; on a batch from another policy the two differ."""
    agent, batch = mlp_setup()
    impala, clipped = config_lib.Config(policy_clip=0.0), config_lib.Config(policy_clip=0.1)
    current = on_policy(agent, batch)
    for expected, actual in zip(
        loss_gradients(agent, current, impala)[0],
        loss_gradients(agent, current, clipped)[0],
        strict=True,
    ):
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-6)
    # Its advantages come from the values stored with the unroll, not the current ones.
    other_values = current._replace(
        agent_outputs=current.agent_outputs._replace(
            baseline=current.agent_outputs.baseline + np.linspace(-1, 1, T + 1, dtype=np.float32)
        )
    )
    policy_weights = [v.name for v in agent.trainable_variables].index(
        "mlp_agent/policy_logits/w:0"
    )
    assert not np.allclose(
        loss_gradients(agent, other_values, clipped)[0][policy_weights],
        loss_gradients(agent, current, clipped)[0][policy_weights],
        atol=1e-4,
    )
    impala_gradients, stats = loss_gradients(agent, batch, impala)
    clipped_gradients, _ = loss_gradients(agent, batch, clipped)
    assert float(stats["mean_abs_log_rho"]) > 0.1
    assert not np.allclose(
        clipped_gradients[policy_weights], impala_gradients[policy_weights], atol=1e-4
    )


def test_vtrace_uses_the_stored_behaviour_logits_of_a_replayed_unroll():
    """The importance weights pi/mu use mu = the logits stored in the unroll, not the current
    policy: with stored logits unlike the current policy's, |log rho| is far from 0, and the
    loss equals V-trace computed by hand from those stored logits."""
    agent, batch = mlp_setup()
    config = config_lib.Config()
    _, parts, stats = train_step.actor_critic_loss(agent, unrolls.to_time_major(batch), config)
    assert float(stats["mean_abs_log_rho"]) > 0.1

    _, on_policy_parts, on_policy_stats = train_step.actor_critic_loss(
        agent, unrolls.to_time_major(on_policy(agent, batch)), config
    )
    assert float(on_policy_stats["mean_abs_log_rho"]) < 1e-5
    assert not np.isclose(
        float(parts["policy_gradient"]), float(on_policy_parts["policy_gradient"])
    )


def test_priorities_change_after_a_learner_step():
    """The learner's cycle with prioritized replay: sample, train, update the priorities."""
    agent, batch = mlp_setup()
    spec = unrolls.UnrollSpec(
        tf.nest.map_structure(lambda x: tf.TensorSpec(x.shape[1:], x.dtype), batch)
    )
    memory = replay.UnrollReplay(spec, capacity=16, prioritized=True)
    memory.add(tf.nest.flatten(batch))
    config = config_lib.Config()
    optimizer = train_step.make_optimizer(config, tf.Variable(config.learning_rate))

    step = tf.function(
        train_step.make_update(agent, optimizer, config, train_step.SingleProcess, xla=False)
    )
    flat, indexes, weights = memory.sample(8, beta=1.0)
    np.testing.assert_array_equal(weights, 1)  # all entered with the same (max) priority
    outputs, priorities = step(spec.pack(flat), weights)
    assert priorities.shape == (8,) and np.all(priorities.numpy() > 0)
    memory.update_priorities(indexes, priorities.numpy())
    _, _, weights_after = memory.sample(64, beta=1.0)
    assert len(np.unique(np.round(weights_after, 5))) > 1  # priorities now differ


def test_gather_gives_the_slots_asked_for_and_counts_start_again_when_a_slot_is_overwritten():
    memory = replay.UnrollReplay(small_spec(), capacity=4)
    fill(memory, 4)  # slot i holds unroll i
    np.testing.assert_array_equal(memory.gather(np.array([2, 0, 3]))[-1], [2, 0, 3])
    memory.count_replayed(np.array([0, 1, 3]))
    memory.count_replayed(np.array([1]))
    np.testing.assert_array_equal(memory.sample_counts, [1, 2, 0, 1])
    memory.add([np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int32), np.array([4, 5])])
    np.testing.assert_array_equal(memory.sample_counts, [0, 0, 0, 1])  # slots 0, 1 are new
    np.testing.assert_array_equal(memory.gather(np.array([0, 1]))[-1], [4, 5])
