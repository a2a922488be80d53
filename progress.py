"""The learners' progress: one log line every --log_secs, and TensorBoard summaries.

Rank 0 alone logs and writes summaries, with global figures (every learner's frames and games,
from the status allreduce each step); the other ranks stay quiet but for errors, so that the
log of an N-learner run reads like a one-learner run's. A line:

  frames 1234560 (12.3%) | 1890 frames/s | return -20.31 (last 100 games) | loss 12.3 (pg 0.12,
  baseline 9.87, entropy -1.55) | entropy 97% | |log rho| 0.03, 0% clipped | grad norm 41.2 |
  lag 3.1 | queue 64/64 | lr 5.9e-04

`return` is the mean over (at least) the last 100 games finished by any learner's actors;
`entropy` the policy's mean entropy per step as a fraction of its maximum (ln A): near 100 %
the policy is still uniform; `|log rho|` and `clipped` compare the learner's policy with the
actors' (behaviour) policy on the batch: near 0 when the policy lag is small; `lag` the
learner steps between the parameters an unroll was acted with and the step that trains on it.

Summaries (rank 0): `learner/start_frames` once, at the frame count the learner starts (or,
restored, restarts) from (summaries.scalars drops what an earlier run wrote past it);
`<level>/episode_return` per game of rank 0's own actors (as scalable_agent); and per
interval `all_learners/mean_episode_return`, `loss/*`, `frames_per_second`, `learning_rate`,
`policy_lag`, `queue_size`, `policy/*`.
"""

import collections
import time

import numpy as np
import tensorflow as tf
from absl import logging

import summaries

RETURN_WINDOW = 100  # games in the logged mean return


class ProgressLog:
    """Accounts every train step; logs and writes summaries every `config.log_secs` (rank 0).

    Args:
      config: config.Config.
      is_chief: whether this is rank 0.
      frames: the global environment-frame counter (tf.Variable).
      learning_rate: the learning rate (tf.Variable).
      transport: the learner's transport (for the queue size).
      replay: the learner's replay.UnrollReplay, or None.
    """

    def __init__(self, config, is_chief, frames, learning_rate, transport, replay=None):
        self._config = config
        self._replay = replay
        self._is_chief = is_chief
        self._frames = frames
        self._learning_rate = learning_rate
        self._transport = transport
        self._writer = tf.summary.create_file_writer(config.logdir) if is_chief else None
        self._last_time = time.monotonic()
        self._last_frames = int(frames.numpy())
        if self._writer is not None:
            with self._writer.as_default(step=self._last_frames):
                tf.summary.scalar(summaries.START_TAG, self._last_frames)
        # (games, return sum) of each recent step, over all learners.
        self._recent_games = collections.deque()
        self._reset_interval()

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
            with self._writer.as_default(step=int(self._frames.numpy())):
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
        replay_text = ""
        if self._replay is not None:
            replay_text = (
                f" | replay {self._replay.size}/{self._replay.capacity} "
                f"({self._replay.bytes / 2**30:.1f} GiB)"
            )
        logging.info(
            "frames %d (%.1f%%) | %.0f frames/s | return %.2f (last %d games) | loss %.3f (pg "
            "%.3f, baseline %.3f, entropy %.3f) | entropy %.0f%% | |log rho| %.3f, %.0f%% clipped"
            " | grad norm %.2f | lag %.1f | queue %d/%d | lr %.2e%s",
            frames,
            100.0 * frames / self._config.total_environment_frames,
            fps,
            mean_return,
            games,
            means["total"],
            means["policy_gradient"],
            means["baseline"],
            means["entropy"],
            100.0 * means["entropy_fraction"],
            means["mean_abs_log_rho"],
            100.0 * means["clipped_rho_fraction"],
            means["gradient_norm"],
            lag,
            queue_size,
            self._config.queue_capacity,
            learning_rate,
            replay_text,
        )
        with self._writer.as_default(step=frames):
            for name in ("total", "policy_gradient", "baseline", "entropy", "gradient_norm"):
                tf.summary.scalar(f"loss/{name}", means[name])
            for name in (
                "entropy_fraction",
                "mean_abs_log_rho",
                "clipped_rho_fraction",
                "trust_region_fraction",
            ):
                tf.summary.scalar(f"policy/{name}", means[name])
            if self._replay is not None:
                tf.summary.scalar("replay/unrolls", self._replay.size)
                tf.summary.scalar("replay/allocated_gib", self._replay.bytes / 2**30)
            if games:
                tf.summary.scalar("all_learners/mean_episode_return", mean_return)
            tf.summary.scalar("frames_per_second", fps)
            tf.summary.scalar("learning_rate", learning_rate)
            tf.summary.scalar("policy_lag", lag)
            tf.summary.scalar("queue_size", queue_size)
        self._writer.flush()
        self._last_time, self._last_frames = now, frames
        self._reset_interval()

    def close(self):
        if self._is_chief:
            self.flush()
            self._writer.close()
