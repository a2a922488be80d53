"""replay_mixing.py, the learner's batches as its prefetch thread makes them: elite replay picks
the stored unrolls whose behaviour logits are nearest to the current network's on their states,
attentive replay the ones whose states are like the on-policy batch's; the features are the
network's logits on the very states training sees."""

import dataclasses
import signal
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import agents
import config as config_lib
import learner
import prefetch
import replay_mixing
import train_step
import unrolls
from tools import random_unrolls

T, NUM_ACTIONS, OBSERVATION = 8, 3, ((4,), np.float32)
# Each batch: 2 on-policy unrolls and 6 replayed ones, from a memory of 24.
CONFIG = config_lib.Config(
    batch_size=2, replay_ratio=3.0, replay_size=24, unroll_length=T, replay_candidates=16
)


def agent_and_spec():
    """A feed-forward agent whose policy differs from state to state (Sonnet's initialisation:
    orthogonal's starts uniform everywhere), its variables created, and its unroll layout."""
    agent = agents.MLPAgent(NUM_ACTIONS, initialization="sonnet")
    batch = random_unrolls.random_unroll(
        agent, OBSERVATION, NUM_ACTIONS, 1, T, np.random.default_rng(0)
    )
    inputs = unrolls.to_time_major(batch)
    agent.unroll(inputs.agent_outputs.action, inputs.env_outputs, inputs.agent_state)
    spec = unrolls.UnrollSpec(
        tf.nest.map_structure(lambda x: tf.TensorSpec(x.shape[1:], x.dtype), batch)
    )
    return agent, spec


def numbered_unrolls(agent, count, first_id, seed, observation=None):
    """`count` random unrolls whose parameter_version numbers them from `first_id`; with
    `observation`, all in one state: every observation that, every last action 0 and reward 0
    (the agent sees all three)."""
    rng = np.random.default_rng(seed)
    batch = random_unrolls.random_unroll(agent, OBSERVATION, NUM_ACTIONS, count, T, rng)
    if observation is not None:
        batch.env_outputs.observation[:] = observation
        batch.env_outputs.reward[:] = 0
        batch.agent_outputs.action[:] = 0
    return batch._replace(parameter_version=np.arange(first_id, first_id + count))


def with_behaviour(batch, logits):
    """`batch` with logits [N, T, A] stored as the behaviour policy's of observations 0..T-1."""
    stored = batch.agent_outputs.policy_logits.copy()
    stored[:, 1:] = logits
    return batch._replace(agent_outputs=batch.agent_outputs._replace(policy_logits=stored))


def mixer(agent, spec, **settings):
    config = dataclasses.replace(CONFIG, **settings)
    rng = np.random.default_rng(0)
    return replay_mixing.ReplayMixer(config, agent, spec, lambda: 0.0, rng)


class _OneBatch:
    """A transport whose first dequeue gives `batch` (flat [B, ...] arrays); the next ones wait
    their timeout for nothing."""

    def __init__(self, batch):
        self._batches = [batch]

    def dequeue(self, _batch_size, timeout_ms):
        if self._batches:
            return self._batches.pop()
        time.sleep(timeout_ms / 1000)
        raise tf.errors.DeadlineExceededError(None, None, "no batch")


def prepared_in_the_prefetch_thread(mix, batch):
    """The Mixed the prefetch thread makes of on-policy `batch` (batch-major Unroll)."""
    prefetcher = prefetch.BatchPrefetcher(_OneBatch(tf.nest.flatten(batch)), 2, mix)
    try:
        return prefetcher.get(timeout_secs=60, should_stop=lambda: False)
    finally:
        prefetcher.stop()


def replayed_ids(spec, mixed):
    return sorted(spec.pack(mixed.train_batch).parameter_version[CONFIG.batch_size :])


def test_the_features_are_the_logits_training_computes_on_those_observations():
    agent, spec = agent_and_spec()
    batch = numbered_unrolls(agent, 3, 0, seed=1)
    steps = replay_mixing.feature_steps(T)
    np.testing.assert_array_equal(steps, [0, 2, 5, 7])
    everywhere = replay_mixing.current_logits(agent, spec, np.arange(T + 1))(batch)
    np.testing.assert_allclose(
        replay_mixing.current_logits(agent, spec, steps)(batch), everywhere[:, steps], rtol=1e-5
    )
    inputs = unrolls.to_time_major(batch)
    trained_on, _ = agent.unroll(
        inputs.agent_outputs.action, inputs.env_outputs, inputs.agent_state
    )
    np.testing.assert_allclose(
        everywhere, np.swapaxes(trained_on.policy_logits, 0, 1), rtol=1e-5, atol=1e-6
    )


def test_elite_sampling_replays_the_unrolls_nearest_to_the_current_policy():
    """Of 24 stored unrolls, 6 carry the current network's own logits on their states and 18
    logits far from them; with the whole memory as candidates, the 6 near ones are replayed."""
    agent, spec = agent_and_spec()
    mix = mixer(agent, spec, replay_sampling="elite")
    stored = numbered_unrolls(agent, 24, 0, seed=1)
    current = replay_mixing.current_logits(agent, spec, np.arange(T))(stored)
    far = current + np.array([6.0, -6.0, 0.0], np.float32)  # KL ~ 6 nats from the current
    near_ids = [3, 4, 9, 14, 20, 22]
    near = np.isin(np.arange(24), near_ids)[:, None, None]
    mix.memory.add(tf.nest.flatten(with_behaviour(stored, np.where(near, current, far))))

    mixed = prepared_in_the_prefetch_thread(mix, numbered_unrolls(agent, 2, 100, seed=2))
    # The on-policy pair entered the memory too (overwriting ids 0 and 1) and leads the batch.
    np.testing.assert_array_equal(spec.pack(mixed.batch).parameter_version, [100, 101])
    assert replayed_ids(spec, mixed) == near_ids
    np.testing.assert_array_equal(mixed.weights, 1)
    assert mixed.indexes is None
    assert mix.memory.sample_counts.sum() == 6


def test_elite_strategy_3_replays_the_unrolls_replayed_least_so_far_first():
    agent, spec = agent_and_spec()
    mix = mixer(agent, spec, replay_sampling="elite", replay_elite_strategy=3)
    mix.memory.add(tf.nest.flatten(numbered_unrolls(agent, 22, 0, seed=1)))
    first = replayed_ids(spec, mix(tf.nest.flatten(numbered_unrolls(agent, 2, 22, seed=2))))
    second = replayed_ids(spec, mix(tf.nest.flatten(numbered_unrolls(agent, 2, 24, seed=3))))
    assert not set(first) & set(second)  # 24 - 6 never replayed yet: none again


def test_attentive_replay_picks_the_unrolls_whose_states_the_agent_visits_now():
    """The on-policy batch is in one state throughout; of the 22 unrolls stored before it, 6 are
    in that state too and 16 elsewhere. The whole memory (those and the on-policy pair) are the
    candidates: the 6 replayed are of the 8 in the batch's state."""
    agent, spec = agent_and_spec()
    mix = mixer(agent, spec, replay_sampling="attentive")
    here = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    mix.memory.add(tf.nest.flatten(numbered_unrolls(agent, 16, 0, seed=1)))
    mix.memory.add(tf.nest.flatten(numbered_unrolls(agent, 6, 16, seed=2, observation=here)))
    on_policy = numbered_unrolls(agent, 2, 100, seed=3, observation=here)
    replayed = replayed_ids(spec, prepared_in_the_prefetch_thread(mix, on_policy))
    assert len(replayed) == 6 and set(replayed) <= {*range(16, 22), 100, 101}


def test_the_prefetch_thread_runs_no_agent_python_beside_the_learners_traces(monkeypatch):
    """Elite's features are a graph traced as the mixer is made: mixing in another thread calls
    none of the agent's Python, whose Sonnet name scopes every thread shares, while this thread
    traces the agent anew; so this thread's name scope (the summaries' tags) stays the root."""
    agent, spec = agent_and_spec()
    mix = mixer(agent, spec, replay_sampling="elite")
    mix.memory.add(tf.nest.flatten(numbered_unrolls(agent, 22, 0, seed=1)))
    callers, unroll = [], agent.unroll

    def recorded_unroll(*args):
        callers.append(threading.current_thread().name)
        return unroll(*args)

    monkeypatch.setattr(agent, "unroll", recorded_unroll)
    traced, mixes = threading.Event(), []

    def mix_until_traced():
        while not traced.is_set() and len(mixes) < 1000:
            mixes.append(mix(tf.nest.flatten(numbered_unrolls(agent, 2, 22, seed=2))))

    mixing = threading.Thread(target=mix_until_traced, name="mixing")
    mixing.start()
    inputs = unrolls.to_time_major(numbered_unrolls(agent, 2, 0, seed=3))
    for _ in range(20):  # a new trace each: the learner's step choice and retraces
        tf.function(lambda i=inputs: agent.unroll(i.agent_outputs.action, i.env_outputs, ()))()
    traced.set()
    mixing.join(timeout=120)
    assert not mixing.is_alive() and mixes
    assert set(callers) == {threading.current_thread().name}
    with tf.name_scope("probe") as scope:
        assert scope == "probe/"


def test_uniform_and_prioritized_sampling_mix_as_before():
    agent, spec = agent_and_spec()
    for sampling in ("uniform", "prioritized"):
        mix = mixer(agent, spec, replay_sampling=sampling)
        mix.memory.add(tf.nest.flatten(numbered_unrolls(agent, 22, 0, seed=1)))
        mixed = mix(tf.nest.flatten(numbered_unrolls(agent, 2, 22, seed=2)))
        assert len(mixed.weights) == len(mixed.train_batch[0]) == 8
        assert (mixed.indexes is None) == (sampling == "uniform")


class _Horovod(train_step.SingleProcess):
    """One rank, as the learner sees Horovod: nothing to broadcast."""

    @staticmethod
    def broadcast_variables(_variables, root_rank):
        assert root_rank == 0


class _RandomUnrolls:
    """A learner's transport whose actors send random unrolls, at once."""

    def __init__(self, agent, spec):
        self.unroll_spec = spec
        self._agent = agent
        self._rng = np.random.default_rng(5)
        self.version = 0

    def initialize(self):
        pass

    def dequeue(self, batch_size, _timeout_ms):
        batch = random_unrolls.random_unroll(
            self._agent, OBSERVATION, NUM_ACTIONS, batch_size, T, self._rng
        )
        return tf.nest.flatten(batch)

    def publish(self, _parameters, _frames):
        self.version += 1
        return self.version

    def queue_size(self):
        return 0

    def finish(self):
        pass


@pytest.mark.parametrize("sampling", ["elite", "prioritized"])
def test_a_learner_trains_on_the_batches_its_prefetch_thread_mixes(sampling, tmp_path, monkeypatch):
    """learner.Learner's own loop, 3 batches of 2 unrolls of 8 steps, its memory filled
    beforehand: each batch holds 6 replayed unrolls the prefetch thread chose (elite: counted in
    the memory) or drew (prioritized: their priorities set after the step)."""
    monkeypatch.setattr(learner, "_FINISH_GRACE_SECS", 0)
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # pytest keeps its own handlers
    agent, spec = agent_and_spec()
    config = dataclasses.replace(
        CONFIG,
        replay_sampling=sampling,
        logdir=str(tmp_path),
        total_environment_frames=3 * 2 * T,
        xla="off",
    )
    transport = _RandomUnrolls(agent, spec)
    trainer = learner.Learner(config, _Horovod, agent, transport, 1, ["localhost"])
    memory = trainer._mixer.memory
    memory.add(transport.dequeue(20, 0))
    assert trainer.run() == 0
    assert transport.version == 4  # the parameters at start and after each batch
    assert (memory.sample_counts.sum() > 0) == (sampling == "elite")
