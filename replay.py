"""Experience replay of whole unrolls in a learner, mixed into its batches (LASER-style), on cpprb.

Each learner keeps its own memory of the unrolls its actors sent, exactly as dequeued (uint8
frames, actions, rewards, done, behaviour logits, the agent's initial core state, ...: every
tensor of the unroll layout), in a cpprb ReplayBuffer (uniform) or PrioritizedReplayBuffer.
With --replay_size > 0 and --replay_ratio r, each learner batch holds:

  B on-policy unrolls (--batch_size, just dequeued; they also enter the memory)
  + R = round(B * r) unrolls sampled from the memory as --replay_sampling says (uniformly, in
    proportion to priority^alpha, or chosen from candidates: replay_mixing.py),

once the memory holds at least `start_size(replay_size, R)` = max(R, replay_size // 10)
unrolls; until then batches are on-policy only. V-trace corrects replayed unrolls for their
older behaviour policy with the behaviour logits stored in them.

Prioritized replay (Schaul et al. 2016, proportional variant): an unroll's priority is
  p = 0.9 * max_t |v_t - V(x_t)| + 0.1 * mean_t |v_t - V(x_t)| (losses.unroll_priorities),
the V-trace value errors of its steps, mixed as R2D2 (Kapturowski et al. 2019) does for
sequences: the mean alone would squash one large error in a long unroll, the max alone is
noisy. New unrolls get the largest priority seen so far. Sampling probability
P(i) = (p_i + eps)^alpha / sum_j (p_j + eps)^alpha; the importance weights
w_i = (N P(i))^-beta / max_j w_j scale the replayed unrolls' loss terms (on-policy unrolls weigh
1). Priorities of the replayed unrolls are updated after every learner step.

The memory is not checkpointed: a restarted learner refills it. Its size is checked against the
host's available memory before the learner starts (`check_fits`). The learner's prefetch thread
adds and samples while its main thread updates priorities: every access holds the memory's lock.
"""

import threading

import numpy as np
import psutil
from absl import logging
from cpprb import PrioritizedReplayBuffer, ReplayBuffer

# The share of the host's available memory the replay may take (TF, the queue, the batches and
# the other processes need the rest).
MEMORY_SHARE = 0.8


class ReplayTooLargeError(ValueError):
    """--replay_size asks for more memory than the host has."""


def replayed_per_batch(config):
    """Replayed unrolls in each learner batch of `config`: round(B x ratio), 0 without replay."""
    return round(config.batch_size * config.replay_ratio) if config.replay_size else 0


def uses_per_agent_step(config):
    """How many times the learner trains on each agent step of `config`: (B + replayed) / B."""
    return (config.batch_size + replayed_per_batch(config)) / config.batch_size


def start_size(replay_size, num_replayed):
    """Unrolls the memory must hold before batches include replayed ones."""
    return max(num_replayed, replay_size // 10)


def bytes_per_unroll(unroll_spec):
    """Bytes one unroll of `unroll_spec` (unrolls.UnrollSpec) takes in the memory."""
    return sum(spec.shape.num_elements() * spec.dtype.size for spec in unroll_spec.specs)


def check_fits(replay_size, unroll_spec, available_bytes=None):
    """Raises ReplayTooLargeError, naming --replay_size and the figures, if the memory would not
    fit in MEMORY_SHARE of the host's available memory. Returns the bytes it needs."""
    per_unroll = bytes_per_unroll(unroll_spec)
    needed = replay_size * per_unroll
    available = psutil.virtual_memory().available if available_bytes is None else available_bytes
    if needed > MEMORY_SHARE * available:
        raise ReplayTooLargeError(
            f"--replay_size={replay_size} unrolls need {needed / 2**30:.1f} GiB "
            f"({per_unroll / 2**20:.2f} MiB per unroll), more than "
            f"{MEMORY_SHARE:.0%} of the {available / 2**30:.1f} GiB available on this host: "
            f"lower --replay_size to at most {int(MEMORY_SHARE * available) // per_unroll}"
        )
    return needed


class UnrollReplay:
    """The replay memory of one learner.

    Args:
      unroll_spec: unrolls.UnrollSpec of one unroll (the queue's layout).
      capacity: unrolls held (--replay_size); the oldest are overwritten first.
      prioritized: `sample` by priority (--replay_sampling=prioritized), else uniformly.
      alpha, beta: prioritized replay's priority and importance-sampling exponents.
    """

    def __init__(self, unroll_spec, capacity, prioritized=False, alpha=0.6, beta=0.4):
        self._specs = unroll_spec.specs
        self._names = [f"field_{i}" for i in range(len(self._specs))]
        # cpprb wants a shape of at least one dimension: scalars are stored as [1].
        fields = {
            name: {"shape": spec.shape.as_list() or 1, "dtype": spec.dtype.as_numpy_dtype}
            for name, spec in zip(self._names, self._specs, strict=True)
        }
        self.capacity = capacity
        self.prioritized = prioritized
        self._beta = beta
        if prioritized:
            # check_for_update: a priority computed for an unroll that was overwritten since it
            # was sampled is dropped instead of landing on its successor.
            self._buffer = PrioritizedReplayBuffer(
                capacity, fields, alpha=alpha, check_for_update=True
            )
        else:
            self._buffer = ReplayBuffer(capacity, fields)
        self.bytes = capacity * bytes_per_unroll(unroll_spec)
        # int64 [capacity]: times the unroll in each slot was replayed through `gather`.
        self.sample_counts = np.zeros(capacity, np.int64)
        self._lock = threading.Lock()

    @property
    def size(self):
        """Unrolls held now."""
        return self._buffer.get_stored_size()

    def add(self, flat_unrolls):
        """Stores a dequeued batch: the flat list of [B, ...] numpy arrays, as the queue gives.

        Logs once, when the memory first becomes full."""
        with self._lock:
            was_full = self.size == self.capacity
            first = self._buffer.add(**dict(zip(self._names, flat_unrolls, strict=True)))
            written = (first + np.arange(len(flat_unrolls[0]))) % self.capacity
            self.sample_counts[written] = 0  # new unrolls in those slots, never replayed
        if not was_full and self.size == self.capacity:
            logging.info(
                "learner: replay memory full: %d unrolls (%.1f GiB)",
                self.capacity,
                self.bytes / 2**30,
            )

    def sample(self, num_unrolls, beta=None):
        """(flat list of [n, ...] arrays, indexes [n], importance weights float32 [n]).

        `beta` overrides the constructor's (e.g. annealed). Uniform replay: weights are all 1
        and indexes None.
        """
        with self._lock:
            if self.prioritized:
                beta = self._beta if beta is None else beta
                sampled = self._buffer.sample(num_unrolls, beta=beta)
            else:
                sampled = self._buffer.sample(num_unrolls)
        flat = self._unpack(sampled, num_unrolls)
        if not self.prioritized:
            return flat, None, np.ones(num_unrolls, np.float32)
        return flat, sampled["indexes"], sampled["weights"].astype(np.float32)

    def gather(self, indexes):
        """The unrolls in slots `indexes` (int [n], each below `size`): flat list of [n, ...]
        arrays. Counts nothing: `count_replayed` the ones trained on."""
        with self._lock:
            # cpprb's sample draws its indexes and hands them to this same method.
            sampled = self._buffer._encode_sample(np.asarray(indexes))
        return self._unpack(sampled, len(indexes))

    def count_replayed(self, indexes):
        """Adds one to the sample counts of slots `indexes` (int [n], distinct)."""
        with self._lock:
            self.sample_counts[indexes] += 1

    def _unpack(self, sampled, num_unrolls):
        """cpprb's dict of stored fields -> the flat list of [num_unrolls, ...] arrays."""
        return [
            sampled[name].reshape(num_unrolls, *spec.shape)
            for name, spec in zip(self._names, self._specs, strict=True)
        ]

    def update_priorities(self, indexes, priorities):
        """Sets the priorities of the unrolls at `indexes` (from `sample`); no-op if uniform.

        An unroll overwritten by `add` since the last `sample` keeps its (new) priority: the
        update was computed for its predecessor.
        """
        if self.prioritized:
            with self._lock:
                self._buffer.update_priorities(indexes, np.asarray(priorities, np.float64))
