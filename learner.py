"""The learner of one worker set: batches of unrolls -> V-trace loss -> Horovod-averaged step.

Every learner is one Horovod rank (one rank without mpirun when there is a single learner).
Per step, in order:
  1. take the next batch of B unrolls that the prefetch thread dequeued from this worker set's
     queue (waiting at most --batch_timeout_secs);
  2. allreduce a small status vector over all ranks: environment frames in the batch, whether a
     batch came, whether a stop was requested, finished episodes and their return sum. Every rank
     thus sees the same global frame count and the same decision to stop, so all ranks take the
     same number of steps and none is left waiting inside a gradient allreduce;
  3. V-trace loss on the batch, gradients averaged over ranks (hvd.DistributedGradientTape),
     optional global-norm clipping, RMSProp with the learning rate decayed linearly to 0 over
     --total_environment_frames (global frames);
  4. publish the new parameters to this worker set's actors.

Policy lag: an actor acts with the parameters it pulled at the start of its unroll. Between
that pull and the learner's update on the unroll lie at most: the unrolls ahead of it in the
queue (--queue_capacity), one prefetched batch, and the batch being trained on. The log line
and the `policy_lag` summary give the measured lag in learner steps.

Rank 0 alone writes checkpoints and TensorBoard summaries; every rank logs its own throughput.
"""

import collections
import hashlib
import queue
import signal
import threading
import time

import numpy as np
import sonnet as snt
import tensorflow as tf
from absl import logging

import checkpointing
import losses
import unrolls
import vtrace

# Exit codes of a learner that stopped before the frame budget.
EXIT_STARVED = 3  # some learner got no batch from its actors for --batch_timeout_secs.
_FINISH_GRACE_SECS = 5

_Status = collections.namedtuple(
    "_Status", "frames has_batch stop_requested episodes episode_return_sum"
)


def parameter_digest(variables):
    """SHA-256 prefix of the variables' bytes: equal across ranks iff they are bitwise equal."""
    digest = hashlib.sha256()
    for variable in variables:
        digest.update(variable.numpy().tobytes())
    return digest.hexdigest()[:16]


class PrefetchError(RuntimeError):
    """The thread that dequeues batches for the learner failed."""


class BatchPrefetcher:
    """Dequeues batches in a background thread so the train step never waits on the queue.

    TF's dequeue releases the GIL, so the dequeue overlaps the train step. One batch is held
    ready (queue.Queue(maxsize=1)); the thread ends when the TF queue is closed or on stop().
    Any other error ends the thread too and is raised by the next get(), so that the learner
    stops at once (with its final checkpoint) instead of starving for --batch_timeout_secs.
    """

    _POLL_MS = 500

    def __init__(self, transport, batch_size):
        self._transport = transport
        self._batch_size = batch_size
        self._ready = queue.Queue(maxsize=1)
        self._stopping = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="batch-prefetch", daemon=True)
        self._thread.start()

    def _run(self):
        try:
            self._prefetch()
        except Exception as e:  # noqa: BLE001 - handed to the main thread by get().
            self._error = e

    def _prefetch(self):
        while not self._stopping.is_set():
            try:
                batch = self._transport.dequeue(self._batch_size, self._POLL_MS)
            except tf.errors.DeadlineExceededError:
                continue
            except (tf.errors.CancelledError, tf.errors.OutOfRangeError):
                return  # the queue was closed: training is over.
            while not self._stopping.is_set():
                try:
                    self._ready.put(batch, timeout=self._POLL_MS / 1000)
                    break
                except queue.Full:
                    continue

    def get(self, timeout_secs, should_stop):
        """The next batch, or None after `timeout_secs` or as soon as should_stop() is true.

        Raises PrefetchError if the prefetch thread failed.
        """
        deadline = time.monotonic() + timeout_secs
        while not should_stop():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            try:
                return self._ready.get(timeout=min(remaining, self._POLL_MS / 1000))
            except queue.Empty:
                if self._error is not None:
                    raise PrefetchError(
                        f"dequeuing batches from the unroll queue failed: {self._error!r}"
                    ) from self._error
        return None

    def stop(self):
        self._stopping.set()
        self._thread.join(timeout=5)


def vtrace_loss(agent, unroll, config):
    """Total IMPALA loss of a time-major batch and its parts.

    Args:
      agent: the learner's agent.
      unroll: Unroll with env_outputs/agent_outputs [T+1, B, ...], agent_state [B, ...].
      config: the flags (discounting, reward_clipping, baseline_cost, entropy_cost).

    Returns:
      (total_loss, dict of scalar loss parts).
    """
    learner_outputs, _ = agent.unroll(
        unroll.agent_outputs.action, unroll.env_outputs, unroll.agent_state
    )
    bootstrap_value = learner_outputs.baseline[-1]  # [B]
    # Shift so that step t holds the action chosen on observation t and what it led to:
    # agent_outputs[t + 1] was computed on env_outputs[t] and produced env_outputs[t + 1].
    behaviour = tf.nest.map_structure(lambda t: t[1:], unroll.agent_outputs)
    rewards = unroll.env_outputs.reward[1:]
    done = unroll.env_outputs.done[1:]
    learner_outputs = tf.nest.map_structure(lambda t: t[:-1], learner_outputs)

    discounts = tf.cast(~done, tf.float32) * config.discounting  # [T, B]
    vtrace_returns = vtrace.from_logits(
        behaviour_policy_logits=behaviour.policy_logits,
        target_policy_logits=learner_outputs.policy_logits,
        actions=behaviour.action,
        discounts=discounts,
        rewards=losses.clip_rewards(rewards, config.reward_clipping),
        values=learner_outputs.baseline,
        bootstrap_value=bootstrap_value,
    )
    parts = {
        "policy_gradient": losses.policy_gradient_loss(
            learner_outputs.policy_logits, behaviour.action, vtrace_returns.pg_advantages
        ),
        "baseline": losses.baseline_loss(vtrace_returns.vs - learner_outputs.baseline),
        "entropy": losses.entropy_loss(learner_outputs.policy_logits),
    }
    total = (
        parts["policy_gradient"]
        + config.baseline_cost * parts["baseline"]
        + config.entropy_cost * parts["entropy"]
    )
    return total, parts


def loss_gradients(agent, unroll, config, hvd):
    """Gradients of the V-trace loss on this rank's batch, averaged over all Horovod ranks.

    Args:
      agent: the agent.
      unroll: Unroll of batch-major [B, T+1, ...] tensors (as dequeued).
      config: the flags of the loss (see vtrace_loss).
      hvd: the initialised horovod.tensorflow module.

    Returns:
      (list of gradients, one per agent.trainable_variables; this rank's total loss; its parts).
    """
    with tf.GradientTape() as tape:
        total, parts = vtrace_loss(agent, unrolls.to_time_major(unroll), config)
    if hvd.size() > 1:
        tape = hvd.DistributedGradientTape(tape)
    return tape.gradient(total, agent.trainable_variables), total, parts


class Learner:
    """Trains the agent of one worker set as one Horovod rank (see the module docstring).

    Args:
      config: the parsed flags (training_flags plus experiment.py's role flags).
      hvd: the initialised `horovod.tensorflow` module.
      agent: the agent, variables already created.
      transport: transport.Transport of this worker set, learner side.
      frames_per_step: environment frames per agent step (the action repeat).
    """

    def __init__(self, config, hvd, agent, transport, frames_per_step):
        self._config = config
        self._hvd = hvd
        self._agent = agent
        self._transport = transport
        self._frames_per_step = frames_per_step
        self._is_chief = hvd.rank() == 0
        self._log_prefix = f"[learner rank {hvd.rank()}/{hvd.size()}]"
        self._stop_signal = None

        self._learning_rate = tf.Variable(config.learning_rate, trainable=False, dtype=tf.float32)
        self._optimizer = snt.optimizers.RMSProp(
            learning_rate=self._learning_rate,
            decay=config.decay,
            momentum=config.momentum,
            epsilon=config.epsilon,
        )
        # Create the optimizer's state (a zero update on zero state changes nothing) so that
        # restore and broadcast cover it from the first step.
        variables = agent.trainable_variables
        self._optimizer.apply([tf.zeros_like(v) for v in variables], variables)
        self._frames = tf.Variable(0, dtype=tf.int64, trainable=False, name="environment_frames")
        self._checkpointer = checkpointing.Checkpointer(
            config.logdir, agent=agent, optimizer=self._optimizer, environment_frames=self._frames
        )
        self._train_step = tf.function(self._train_step_impl)

    def _train_step_impl(self, unroll):
        gradients, total, parts = loss_gradients(self._agent, unroll, self._config, self._hvd)
        gradient_norm = tf.linalg.global_norm(gradients)
        if self._config.gradients_clipping > 0:
            gradients, _ = tf.clip_by_global_norm(
                gradients, self._config.gradients_clipping, use_norm=gradient_norm
            )
        self._optimizer.apply(gradients, self._agent.trainable_variables)
        return dict(parts, total=total, gradient_norm=gradient_norm)

    def _request_stop(self, signum, _frame):
        self._stop_signal = signal.Signals(signum).name
        logging.info(
            "%s %s received: stopping after this step", self._log_prefix, self._stop_signal
        )

    def _allreduce_status(self, status):
        summed = self._hvd.allreduce(
            tf.constant(status, tf.float64), op=self._hvd.Sum, name="learner_status"
        )
        return _Status(*summed.numpy().tolist())

    def _update_learning_rate(self):
        progress = float(self._frames.numpy()) / self._config.total_environment_frames
        self._learning_rate.assign(self._config.learning_rate * max(0.0, 1.0 - progress))

    def _start(self):
        """Restores (rank 0), syncs every rank to rank 0 and opens the transport to actors."""
        if self._is_chief:
            self._checkpointer.restore_latest()
        # Rank 0's (restored or fresh) state becomes everyone's.
        self._hvd.broadcast_variables(
            self._agent.variables + tuple(self._optimizer.variables) + (self._frames,),
            root_rank=0,
        )
        self._transport.initialize()
        self._publish()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._request_stop)
        logging.info(
            "%s serving actors; training from %d to %d environment frames",
            self._log_prefix,
            int(self._frames.numpy()),
            self._config.total_environment_frames,
        )

    def _publish(self):
        return self._transport.publish([v.numpy() for v in self._agent.trainable_variables])

    def run(self):
        """Trains until the frame budget, a stop signal or starvation; returns the exit code."""
        config = self._config
        self._start()
        prefetcher = BatchPrefetcher(self._transport, config.batch_size)
        progress = _ProgressLog(
            config,
            self._log_prefix,
            self._is_chief,
            self._frames,
            self._learning_rate,
            self._transport,
        )
        reason, exit_code, steps, own_frames = "frame budget reached", 0, 0, 0
        try:
            while int(self._frames.numpy()) < config.total_environment_frames:
                # Actors take a while to start: until the first batch, wait as long as they
                # wait for the learner.
                timeout_flag = "batch_timeout_secs" if steps else "learner_wait_secs"
                timeout = getattr(config, timeout_flag)
                batch = prefetcher.get(timeout, lambda: self._stop_signal)
                unroll = self._transport.unroll_spec.pack(batch) if batch is not None else None
                local_status = self._local_status(unroll)
                status = self._allreduce_status(local_status)
                if status.stop_requested:
                    reason = f"{self._stop_signal or 'a stop signal to another learner'}"
                    break
                if status.has_batch < self._hvd.size():
                    reason = "no data"
                    exit_code = self._report_starvation(unroll is None, timeout, timeout_flag)
                    break
                self._update_learning_rate()
                outputs = self._train_step(unroll)
                self._frames.assign_add(int(status.frames))
                steps, own_frames = steps + 1, own_frames + local_status[0]
                progress.step(unroll, outputs, status, local_status[0], self._publish())
                if self._is_chief:
                    self._checkpointer.save_if_due(config.checkpoint_secs)
        finally:
            prefetcher.stop()
            if self._is_chief:
                self._checkpointer.save()
            progress.close()
        logging.info(
            "%s stopped at %d environment frames (%s); this learner trained on %d frames in "
            "%d steps; parameter digest %s",
            self._log_prefix,
            int(self._frames.numpy()),
            reason,
            own_frames,
            steps,
            parameter_digest(self._agent.trainable_variables),
        )
        self._transport.finish()
        # Keep serving a moment so that actors see the closed queue and exit cleanly instead
        # of waiting for a learner that is gone (after a crash they wait for its restart).
        time.sleep(_FINISH_GRACE_SECS)
        return exit_code

    def _local_status(self, unroll):
        if unroll is None:
            return [0, 0, bool(self._stop_signal), 0, 0]
        # Element 0 of each unroll repeats the previous unroll's last step: count steps 1..T.
        info = unroll.env_outputs.info
        game_over = info.game_over[:, 1:]
        frames = game_over.size * self._frames_per_step
        return [
            frames,
            1,
            bool(self._stop_signal),
            int(game_over.sum()),
            float(info.episode_return[:, 1:][game_over].sum()),
        ]

    def _report_starvation(self, this_rank_starved, timeout_secs, flag):
        """Logs why training stops for lack of data; returns the exit code."""
        if this_rank_starved:
            logging.error(
                "%s no batch of %d unrolls from actors %s in %d s (--%s): are they alive? "
                "Stopping all learners.",
                self._log_prefix,
                self._config.batch_size,
                ",".join(self._config.actor_hosts),
                timeout_secs,
                flag,
            )
        else:
            logging.error(
                "%s another learner got no data from its actors in %d s (--%s): stopping all "
                "learners.",
                self._log_prefix,
                timeout_secs,
                flag,
            )
        return EXIT_STARVED


class _ProgressLog:
    """Log lines every --log_secs on every rank; TensorBoard summaries on rank 0.

    Rank 0 writes one `<level>/episode_return` point per finished game of its own actors (as
    scalable_agent does) and, per log interval, the mean return over all learners' games.
    """

    def __init__(self, config, log_prefix, is_chief, frames, learning_rate, transport):
        self._config = config
        self._log_prefix = log_prefix
        self._frames = frames
        self._learning_rate = learning_rate
        self._transport = transport
        self._writer = tf.summary.create_file_writer(config.logdir) if is_chief else None
        self._last_time = time.monotonic()
        self._last_frames = int(frames.numpy())
        self._recent_returns = collections.deque(maxlen=100)  # this rank's actors' games
        self._reset_interval()

    def _reset_interval(self):
        self._steps = 0
        self._own_frames = 0
        self._lag_sum = 0.0
        self._loss_sums = collections.defaultdict(float)
        self._global_episodes = 0.0
        self._global_return_sum = 0.0

    def step(self, unroll, outputs, status, own_frames, version):
        """Accounts one train step: its batch, loss parts, allreduced status, the frames of
        this rank's batch and the parameter version the step published."""
        frames = int(self._frames.numpy())
        info = unroll.env_outputs.info
        game_over = info.game_over[:, 1:]
        finished = info.episode_return[:, 1:][game_over].tolist()
        self._recent_returns.extend(finished)
        if self._writer is not None and finished:
            with self._writer.as_default(step=frames):
                for episode_return in finished:
                    tf.summary.scalar(f"{self._config.level_name}/episode_return", episode_return)
        self._global_episodes += status.episodes
        self._global_return_sum += status.episode_return_sum
        self._steps += 1
        self._own_frames += own_frames
        for name, value in outputs.items():
            self._loss_sums[name] += float(value)
        # Versions the batch was acted with vs. the version the step before this one produced.
        self._lag_sum += float(np.mean(version - 1 - unroll.parameter_version))
        if time.monotonic() - self._last_time >= self._config.log_secs:
            self.flush()

    def flush(self):
        if not self._steps:
            return
        now = time.monotonic()
        frames = int(self._frames.numpy())
        elapsed = now - self._last_time
        fps = (frames - self._last_frames) / elapsed
        means = {name: total / self._steps for name, total in self._loss_sums.items()}
        lag = self._lag_sum / self._steps
        own_return = np.mean(self._recent_returns) if self._recent_returns else float("nan")
        all_return = (
            self._global_return_sum / self._global_episodes
            if self._global_episodes
            else float("nan")
        )
        queue_size = self._transport.queue_size()
        learning_rate = float(self._learning_rate.numpy())
        logging.info(
            "%s frames %d (%.1f%%) | %.0f frames/s (all learners), %.0f own | %.2f steps/s | "
            "queue %d/%d | policy lag %.1f steps | loss %.3f (pg %.3f, baseline %.3f, "
            "entropy %.3f) | grad norm %.2f | return %.2f (last %d own games), "
            "%.2f (all learners, %d games this interval) | lr %.2e",
            self._log_prefix,
            frames,
            100.0 * frames / self._config.total_environment_frames,
            fps,
            self._own_frames / elapsed,
            self._steps / elapsed,
            queue_size,
            self._config.queue_capacity,
            lag,
            means["total"],
            means["policy_gradient"],
            means["baseline"],
            means["entropy"],
            means["gradient_norm"],
            own_return,
            len(self._recent_returns),
            all_return,
            int(self._global_episodes),
            learning_rate,
        )
        if self._writer is not None:
            with self._writer.as_default(step=frames):
                for name, value in means.items():
                    tf.summary.scalar(f"loss/{name}", value)
                if self._global_episodes:
                    tf.summary.scalar("all_learners/mean_episode_return", all_return)
                tf.summary.scalar("frames_per_second", fps)
                tf.summary.scalar("learning_rate", learning_rate)
                tf.summary.scalar("policy_lag", lag)
                tf.summary.scalar("queue_size", queue_size)
            self._writer.flush()
        self._last_time, self._last_frames = now, frames
        self._reset_interval()

    def close(self):
        self.flush()
        if self._writer is not None:
            self._writer.close()
