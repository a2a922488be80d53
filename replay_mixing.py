"""A learner's train batch: its on-policy unrolls and the replayed ones --replay_sampling picks,
made in the prefetch thread (prefetch.py) while the batch before it trains.

  uniform      R unrolls drawn uniformly (with replacement) from the memory (replay.py).
  prioritized  R drawn in proportion to priority^alpha, with importance weights (replay.py).
  elite        N = lambda x R candidates drawn uniformly without replacement (at most the whole
               memory; replay_selection.candidate_count); the current network encodes each
               candidate's K feature states (`feature_steps`) in one forward pass; a candidate's
               distance is the mean over those states of KL(mu || pi) between the behaviour
               policy its actor stored and the current policy; --replay_elite_strategy picks R
               of the N (replay_selection.choose).
  attentive    Attentive experience replay (Sun, Zhou and Li, AAAI 2020): N candidates likewise;
               the R whose feature states are on average closest (Euclidean) to the mean
               feature of the on-policy batch's feature states, the states the agent visits
               now; a state's feature is the current policy's action probabilities there.

The features. Every unroll already holds the policy logits its actor computed at each step, the
behaviour policy's "state feature vectors", stored for free; the current network's logits on the
same observations say how far that policy now is from the learner's. The distance is a KL, not a
norm of logit differences: logits are defined up to a shift (l and l + c are one policy), so a
norm would call equal policies far; and KL(mu || pi) is what --replay_trust_region measures.
Attentive replay compares states, not policies: probabilities (shift-free, bounded) from the
same forward pass serve as the state's features, so both need only the policy head.

A batch is prepared up to two learner steps ahead (one training, one ready), so its "current"
network is that many updates old, and prioritized replay samples with priorities as old.
"""

import collections

import numpy as np
import tensorflow as tf

import replay
import replay_selection
import unrolls

# K: the states of an unroll whose features are compared.
FEATURE_STEPS = 4

# batch: the flat list of on-policy [B, ...] arrays, as dequeued; train_batch: the flat list of
# [B + R, ...] arrays trained on (R = 0 until the memory holds enough); weights: float32 [B + R],
# 1 but for prioritized replay's importance weights; indexes: prioritized replay's memory slots
# of the R replayed unrolls (int [R]), else None.
Mixed = collections.namedtuple("Mixed", "batch train_batch weights indexes")


def feature_steps(unroll_length, count=FEATURE_STEPS):
    """int64 [K]: K = min(count, T) evenly spaced observation steps among 0..T-1 of an unroll,
    first and last included; the behaviour logits of step t are agent_outputs[t + 1]'s."""
    return np.unique(np.linspace(0, unroll_length - 1, count).round().astype(np.int64))


def logits_at_steps(agent, unroll, steps):
    """float32 [N, K, A]: `agent`'s policy logits now on observations `steps` (int [K]) of
    `unroll` (batch-major Unroll, [N, T+1, ...]); TensorFlow ops only, so traceable.

    A feed-forward agent sees just those K observations (with their last action and reward); a
    recurrent one steps its core over the whole unroll from the stored state, as training does.
    """
    if not agent.recurrent:

        def at_steps(x):
            return tf.gather(x, steps, axis=1)

        unroll = unroll._replace(
            env_outputs=tf.nest.map_structure(at_steps, unroll.env_outputs),
            agent_outputs=tf.nest.map_structure(at_steps, unroll.agent_outputs),
        )
        steps = np.arange(len(steps))
    inputs = unrolls.to_time_major(unroll)
    outputs, _ = agent.unroll(inputs.agent_outputs.action, inputs.env_outputs, inputs.agent_state)
    return tf.transpose(tf.gather(outputs.policy_logits, steps), [1, 0, 2])


def current_logits(agent, unroll_spec, steps):
    """The function batch-major Unroll ([N, T+1, ...], any N; `unroll_spec`'s layout) ->
    float32 [N, K, A] of logits_at_steps, traced here, in the calling thread.

    The prefetch thread then runs a graph, never the agent's Python: a Sonnet module's name
    scope is one object whose stack of exits every thread shares, so a call in the prefetch
    thread beside a trace in the learner's thread could leave the learner's thread inside
    the agent's scope (every summary tag after it prefixed with it, the curves unreadable).
    """
    signature = tf.nest.map_structure(
        lambda spec: tf.TensorSpec([None, *spec.shape], spec.dtype), unroll_spec.structure
    )
    logits = tf.function(
        lambda unroll: logits_at_steps(agent, unroll, steps), input_signature=[signature]
    ).get_concrete_function()

    def run(unroll):
        return logits(unroll).numpy()

    return run


class ReplayMixer:
    """Makes each dequeued batch a Mixed: stores it in the memory and adds the replayed unrolls.

    Args:
      config: config.Config (replay_*, batch_size, unroll_length).
      agent: the learner's agent (its variables, as training leaves them, encode the states).
      unroll_spec: unrolls.UnrollSpec of one unroll.
      progress: callable, frames trained / the frame budget (anneals beta and the candidates).
      rng: numpy Generator of the candidate sets (this thread's own).
    """

    def __init__(self, config, agent, unroll_spec, progress, rng):
        self._config = config
        self._spec = unroll_spec
        self._progress = progress
        self._rng = rng
        self._num_replayed = replay.replayed_per_batch(config)
        self._steps = feature_steps(config.unroll_length)
        self.memory = None
        if config.replay_size:
            self.memory = replay.UnrollReplay(
                unroll_spec,
                config.replay_size,
                config.replay_sampling == "prioritized",
                config.replay_alpha,
                config.replay_beta,
            )
        # Traced now, in the learner's thread, not the prefetch thread's (current_logits).
        self._current_logits = None  # Only elite and attentive sampling read the policy.
        if config.replay_size and config.replay_sampling in ("elite", "attentive"):
            self._current_logits = current_logits(agent, unroll_spec, self._steps)

    def __call__(self, batch):
        """The Mixed of `batch`, the flat list of dequeued [B, ...] arrays."""
        ones = np.ones(len(batch[0]), np.float32)
        if self.memory is None:
            return Mixed(batch, batch, ones, None)
        self.memory.add(batch)
        if self.memory.size < replay.start_size(self._config.replay_size, self._num_replayed):
            return Mixed(batch, batch, ones, None)
        replayed, weights, indexes = self._replayed(batch)
        mixed = [np.concatenate([a, b]) for a, b in zip(batch, replayed, strict=True)]
        return Mixed(batch, mixed, np.concatenate([ones, weights]), indexes)

    def _replayed(self, batch):
        """(flat list of [R, ...] arrays, importance weights float32 [R], slots or None)."""
        config, progress = self._config, min(1.0, self._progress())
        if config.replay_sampling in ("uniform", "prioritized"):
            beta = config.replay_beta + (1 - config.replay_beta) * progress
            flat, indexes, weights = self.memory.sample(self._num_replayed, beta)
            return flat, weights, indexes
        count = replay_selection.candidate_count(
            self._num_replayed,
            config.replay_candidates,
            self.memory.size,
            config.replay_anneal,
            progress,
        )
        slots = replay_selection.draw_candidates(self._rng, self.memory.size, count)
        candidates = self.memory.gather(slots)
        if config.replay_sampling == "elite":
            positions = self._elite(candidates, self.memory.sample_counts[slots])
        else:
            positions = self._attentive(batch, candidates)
        self.memory.count_replayed(slots[positions])
        return [x[positions] for x in candidates], np.ones(len(positions), np.float32), None

    def _elite(self, candidates, sample_counts):
        """Positions [R] of the candidates (flat [N, ...]; sample_counts int [N]) to replay."""
        unroll = self._spec.pack(candidates)
        behaviour = unroll.agent_outputs.policy_logits[:, self._steps + 1]
        distances = replay_selection.policy_kl(behaviour, self._current_logits(unroll))
        return replay_selection.elite_choice(
            self._config.replay_elite_strategy, distances, sample_counts, self._num_replayed
        )

    def _attentive(self, batch, candidates):
        """Positions [R] of the candidates (flat [N, ...]) to replay, next to `batch` ([B, ...])."""
        both = [np.concatenate([a, b]) for a, b in zip(batch, candidates, strict=True)]
        logits = self._current_logits(self._spec.pack(both))
        features = np.exp(replay_selection.log_softmax(logits))  # [B + N, K, A]
        on_policy = len(batch[0])
        reference = features[:on_policy].reshape(-1, features.shape[-1]).mean(axis=0)
        distances = replay_selection.distance_to_mean(features[on_policy:], reference)
        return replay_selection.choose(distances, self._num_replayed)
