"""The learners' progress: one log line every --log_secs, and TensorBoard summaries.

Rank 0 alone logs and writes summaries, with global figures (every learner's frames and games,
from the status allreduce each step); the other ranks stay quiet but for errors, so that the
log of an N-learner run reads like a one-learner run's. A line:

  frames N (P%) | F frames/s | return R | entropy E% | lag L | loss X

- `frames N (P%)`: environment frames trained on by all learners, P% of
  --total_environment_frames;
- `F frames/s`: frames trained on per second since the previous line;
- `return R`: the mean return of the last (at least) 100 games finished by any learner's
  actors, followed by `(n games)` while fewer have finished since the learner started;
- `entropy E%`: the policy's mean entropy per step as a fraction of its maximum (ln A): near
  100 % the policy is still uniform;
- `lag L`: the learner steps between the parameters an unroll was acted with and the step that
  trains on it;
- `loss X`: the total loss, the mean over the interval's steps.

Summaries (rank 0): `learner/start_frames` once, at the frame count the learner starts (or,
restored, restarts) from (tools/summary_reader.py drops what an earlier run wrote past it);
`<level>/episode_return` per game of rank 0's own actors (as scalable_agent); and per
interval, besides the line's figures (`frames_per_second`, `all_learners/mean_episode_return`,
`policy/entropy_fraction`, `policy_lag`, `loss/total`), what the line leaves out:
`loss/policy_gradient`, `loss/baseline`, `loss/entropy` (the loss's terms),
`loss/gradient_norm`, `policy/mean_abs_log_rho`, `policy/clipped_rho_fraction` and
`policy/surrogate_clipped_fraction` (the learner's policy against the actors' on the batch:
near 0 when the policy lag is small; the last, PPO's clipfrac, on replayed unrolls too),
`policy/trust_region_fraction`, `value/mean`, `value/explained_variance` and
`value/advantage_std` (the values' scale and fit, the advantages' scale before normalisation:
losses.value_statistics), with --normalize_value_loss `value/target_variance` (the running
variance of the value targets that divides the value term), `learning_rate`, `queue_size`
(unrolls waiting in the queue) and, with replay, `replay/unrolls` and `replay/allocated_gib`
(the memory's fill and size; replay.py logs when it first fills).

A summary write that fails (a full disk, an unwritable logdir) does not stop training: it is one
logged line naming the logdir and the cause (one per outage, not one per write), its summaries
are lost, and the next ones are written as usual once writing works again.
"""

import collections
import contextlib
import time

import numpy as np
import tensorflow as tf
from absl import logging

from checkpointing import write_error_cause

RETURN_WINDOW = 100  # games in the logged mean return
# Written once when the learner starts, at step = the frame count it starts (or restarts) from.
START_TAG = "learner/start_frames"
# losses.value_statistics' scalars and their summaries' tags.
VALUE_TAGS = {
    "value_mean": "value/mean",
    "explained_variance": "value/explained_variance",
    "advantage_std": "value/advantage_std",
}


class ProgressLog:
    """Accounts every train step; logs and writes summaries every `config.log_secs` (rank 0).

    Args:
      config: config.Config.
      is_chief: whether this is rank 0.
      frames: the global environment-frame counter (tf.Variable).
      learning_rate: the learning rate (tf.Variable).
      transport: the learner's transport (for the queue size).
      replay: the learner's replay.UnrollReplay, or None.
      target_moments: the RunningMoments of the value targets (--normalize_value_loss), or None.
    """

    def __init__(
        self, config, is_chief, frames, learning_rate, transport, replay=None, target_moments=None
    ):
        self._config = config
        self._replay = replay
        self._target_moments = target_moments
        self._is_chief = is_chief
        self._frames = frames
        self._learning_rate = learning_rate
        self._transport = transport
        self._writer = tf.summary.create_file_writer(config.logdir) if is_chief else None
        self._writes_failing = False
        self._last_time = time.monotonic()
        self._last_frames = int(frames.numpy())
        if self._writer is not None:
            with self._summaries(self._last_frames):
                tf.summary.scalar(START_TAG, self._last_frames)
        # (games, return sum) of each recent step, over all learners.
        self._recent_games = collections.deque()
        self._reset_interval()

    @contextlib.contextmanager
    def _summaries(self, step, flush=False):
        """Writes the block's summaries at `step` (to disk with `flush`, else when the writer's
        queue fills). A write that fails ends the block: the first failure since a flush last
        worked is logged in one line, and training goes on."""
        try:
            with self._writer.as_default(step=step):
                yield
            if flush:
                self._writer.flush()
        except tf.errors.OpError as e:
            if not self._writes_failing:
                logging.error(
                    "summaries in %s not written: %s; trying again at every interval",
                    self._config.logdir,
                    write_error_cause(e),
                )
            self._writes_failing = True
            return
        if flush and self._writes_failing:
            logging.info("summaries in %s written again", self._config.logdir)
            self._writes_failing = False

    def _reset_interval(self):
        self._steps = 0
        self._lag_sum = 0.0
        self._sums = collections.defaultdict(float)

    def step(self, unroll, outputs, games, return_sum, version):
        """Accounts one train step.

        Args:
          unroll: this rank's batch (batch-major numpy Unroll).
          outputs: the train step's dict of scalars.
          games, return_sum: games finished by all learners' actors in this step's batches and
            the sum of their returns (from the status allreduce).
          version: the parameter version this step published.
        """
        if not self._is_chief:
            return
        info = unroll.env_outputs.info
        game_over = info.game_over[:, 1:]  # element 0 repeats the previous unroll's last step
        finished = info.episode_return[:, 1:][game_over].tolist()
        if self._writer is not None and finished:
            with self._summaries(int(self._frames.numpy())):
                for episode_return in finished:
                    tf.summary.scalar(f"{self._config.level_name}/episode_return", episode_return)
        if games:
            self._recent_games.append((games, return_sum))
            while sum(g for g, _ in self._recent_games) - self._recent_games[0][0] >= RETURN_WINDOW:
                self._recent_games.popleft()
        self._steps += 1
        for name, value in outputs.items():
            self._sums[name] += float(value)
        # Versions the batch was acted with vs. the version the step before this one produced.
        self._lag_sum += float(np.mean(version - 1 - unroll.parameter_version))
        if time.monotonic() - self._last_time >= self._config.log_secs:
            self.flush()

    def mean_return(self):
        """(mean return of the last >= RETURN_WINDOW games of all learners, number of games)."""
        games = sum(g for g, _ in self._recent_games)
        total = sum(s for _, s in self._recent_games)
        return (total / games if games else float("nan")), int(games)

    def flush(self):
        if not self._steps:
            return
        now = time.monotonic()
        frames = int(self._frames.numpy())
        fps = (frames - self._last_frames) / (now - self._last_time)
        means = {name: total / self._steps for name, total in self._sums.items()}
        lag = self._lag_sum / self._steps
        mean_return, games = self.mean_return()
        queue_size = self._transport.queue_size()
        learning_rate = float(self._learning_rate.numpy())
        logging.info(
            "frames %d (%.1f%%) | %.0f frames/s | return %.2f%s | entropy %.0f%% | lag %.1f | "
            "loss %.3f",
            frames,
            100.0 * frames / self._config.total_environment_frames,
            fps,
            mean_return,
            f" ({games} games)" if games < RETURN_WINDOW else "",
            100.0 * means["entropy_fraction"],
            lag,
            means["total"],
        )
        with self._summaries(frames, flush=True):
            for name in ("total", "policy_gradient", "baseline", "entropy", "gradient_norm"):
                tf.summary.scalar(f"loss/{name}", means[name])
            for name in (
                "entropy_fraction",
                "mean_abs_log_rho",
                "clipped_rho_fraction",
                "surrogate_clipped_fraction",
                "trust_region_fraction",
            ):
                tf.summary.scalar(f"policy/{name}", means[name])
            for name, tag in VALUE_TAGS.items():
                tf.summary.scalar(tag, means[name])
            if self._target_moments is not None:
                tf.summary.scalar("value/target_variance", self._target_moments.variance)
            if self._replay is not None:
                tf.summary.scalar("replay/unrolls", self._replay.size)
                tf.summary.scalar("replay/allocated_gib", self._replay.bytes / 2**30)
            if games:
                tf.summary.scalar("all_learners/mean_episode_return", mean_return)
            tf.summary.scalar("frames_per_second", fps)
            tf.summary.scalar("learning_rate", learning_rate)
            tf.summary.scalar("policy_lag", lag)
            tf.summary.scalar("queue_size", queue_size)
        self._last_time, self._last_frames = now, frames
        self._reset_interval()

    def close(self):
        if self._is_chief:
            self.flush()
            with self._summaries(int(self._frames.numpy())):
                self._writer.close()
