"""The learner of one worker set: batches of unrolls -> actor-critic loss -> Horovod-summed step.

Every learner is one Horovod rank (one rank without mpirun when there is a single learner).
Per step, in order:
  1. take the next batch of B unrolls that the prefetch thread dequeued from this worker set's
     queue (waiting at most --batch_timeout_secs), with the replayed unrolls it added
     (replay_mixing.py: the batch enters the memory, --replay_sampling draws from it);
  2. allreduce a small status vector over all ranks (a lone rank keeps its own): environment
     frames in the batch, whether a batch came, whether a stop was requested, finished episodes
     and their return sum. Every rank thus sees the same global frame count and the same
     decision to stop, so all ranks take the same number of steps and none is left waiting
     inside a gradient allreduce;
  3. with --normalize_input, fold the fresh frames' moments (pooled over the ranks) into the
     agent's input statistics (agents/input_normalization.py);
  4. train_step.actor_critic_loss on the batch (its on-policy and replayed unrolls: PPO's
     clipped surrogate on V-trace targets by default), gradients summed over
     ranks (one grouped Horovod allreduce; with XLA the loss-and-gradients and the update are
     each compiled around it: --xla, by default whichever is cheaper here), optional
     global-norm clipping, an optimizer step with the learning rate decayed linearly to 0 over
     --total_environment_frames (global frames);
     one such step on each minibatch of the batch's unrolls, its share of --minibatch_unrolls.
     Every rank's batch holds the same number of unrolls (each adds B per step to its replay
     memory), so all ranks take the same number of steps, each with its own allreduce;
  5. with --normalize_value_loss or --popart, fold the moments of the batch's V-trace targets
     (pooled over the ranks) into their running statistics, whose variance divides the next
     value terms (--popart: and move the value head's units to them, its values kept);
  6. publish the new parameters (and input statistics) to this worker set's actors.

Policy lag: an actor acts with the parameters it pulled at the start of its unroll. Between
that pull and the learner's update on the unroll lie at most: the unrolls ahead of it in the
queue (--queue_capacity), one prefetched batch, and the batch being trained on. The log line
and the `policy_lag` summary give the measured lag in learner steps.

A step that has not finished --step_timeout_secs after its batch wait ends (a learner stuck
in a collective or a session call) makes the learner print its threads' stacks and exit with
EXIT_STUCK (step_watchdog.py), for the frontend's supervisor to restart the learners from the
last checkpoint.

Training that diverges stops every learner with DivergedError (experiment.py: exit 2): a batch
whose loss or gradient norm, or the parameters it leaves, are no longer finite, found on the
host right after the batch's step, before those parameters are published or checkpointed.

A checkpoint that cannot be written is one logged line, and training goes on (checkpointing.py);
after --max_failed_checkpoints of them in a row every learner stops at the next step with
EXIT_CHECKPOINTS_FAILING. SIGTERM or SIGINT to any learner (a scheduler's preemption, Ctrl-C)
stops every learner after its step, with a final checkpoint, and EXIT_STOPPED_BY_SIGNAL: a
learner stopped before its frame budget never exits 0, the status of a finished training, and
only a learner that reached its budget tells its actors that training is over (they exit 0;
the others' actors wait for the learners' restart); it then serves its evaluator, if its set
has one, until that holds the parameters that end training (at most --learner_wait_secs). A
batch wait that ends empty when the learner was itself stopped or frozen (heartbeat.py) blames
no actor: it starts again.

Rank 0 alone writes checkpoints, logs progress and writes TensorBoard summaries (progress.py).
The step itself (loss, gradients, optimizer) is train_step.py; the prefetch thread prefetch.py.
"""

import collections
import hashlib
import signal
import time

import numpy as np
import tensorflow as tf
from absl import logging

import checkpointing
import config as config_lib
import progress
import replay_mixing
import train_step
from agents import input_normalization
from exit_codes import (
    EXIT_CHECKPOINTS_FAILING,
    EXIT_STARVED,
    EXIT_STOPPED_BY_SIGNAL,
    EXIT_STUCK,
)
from heartbeat import Heartbeat
from prefetch import BatchPrefetcher
from step_watchdog import Watchdog

_FINISH_GRACE_SECS = 5
_FINAL_POLL_SECS = 0.5

_Status = collections.namedtuple(
    "_Status", "frames has_batch stop_requested checkpoints_failing episodes episode_return_sum"
)


class DivergedError(RuntimeError):
    """Training diverged: the loss, the gradients or the parameters are no longer finite."""


def serve_final_parameters(transport, evaluator_host, wait_secs, log_prefix):
    """Keeps a finished learner serving until its evaluator holds the parameters that end
    training (transport.final_parameters_taken), at most `wait_secs` (--learner_wait_secs, as
    long as the evaluator waits for a learner): one starved of CPU (SCHED_IDLE on a busy host)
    or restarting would otherwise find the learner gone. Returns whether it took them."""
    logging.info(
        "%s waiting up to %d s (--learner_wait_secs) for evaluator %s to take the final parameters",
        log_prefix,
        wait_secs,
        evaluator_host,
    )
    deadline = time.monotonic() + wait_secs
    while not transport.final_parameters_taken():
        if time.monotonic() >= deadline:
            logging.warning(
                "%s evaluator %s did not take the final parameters in %d s; exiting",
                log_prefix,
                evaluator_host,
                wait_secs,
            )
            return False
        time.sleep(_FINAL_POLL_SECS)
    logging.info("%s evaluator %s took the final parameters", log_prefix, evaluator_host)
    return True


def parameter_digest(variables):
    """SHA-256 prefix of the variables' bytes: equal across ranks iff they are bitwise equal."""
    digest = hashlib.sha256()
    for variable in variables:
        digest.update(variable.numpy().tobytes())
    return digest.hexdigest()[:16]


def parameter_snapshot(variables):
    """The variables' values now, as numpy arrays that later updates of them do not change.

    Each is a view of the tensor a read returned: TF tensors are immutable (an update of a
    variable whose value is still referenced writes a copy), where `.numpy()` would copy the
    parameters once more per publish.
    """
    return [np.asarray(variable.read_value()) for variable in variables]


def parameters_are_finite(parameters):
    """Whether every value of `parameters` (numpy arrays) is finite (no NaN, no infinity)."""
    return all(np.isfinite(value).all() for value in parameters)


class Learner:
    """Trains the agent of one worker set as one Horovod rank (see the module docstring).

    Args:
      config: config.Config.
      hvd: the initialised `horovod.tensorflow` module.
      agent: the agent, variables already created.
      transport: transport.Transport of this worker set, learner side.
      frames_per_step: environment frames per agent step (the action repeat).
      actor_hosts: this worker set's actors, named when they send nothing.
      evaluator_host: this worker set's evaluator, None if it has none.
    """

    def __init__(
        self, config, hvd, agent, transport, frames_per_step, actor_hosts, evaluator_host=None
    ):
        self._config = config
        self._actor_hosts = actor_hosts
        self._evaluator_host = evaluator_host
        self._hvd = hvd
        self._agent = agent
        # Published: all variables, the input statistics too. Sonnet walks the module tree on
        # every access: read once, not at every publish.
        self._parameters = agent.variables
        self._transport = transport
        self._frames_per_step = frames_per_step
        self._is_chief = hvd.rank() == 0
        self._log_prefix = f"[learner rank {hvd.rank()}/{hvd.size()}]"
        self._stop_signal = None

        self._learning_rate = tf.Variable(config.learning_rate, trainable=False, dtype=tf.float32)
        self._optimizer = train_step.make_optimizer(config, self._learning_rate)
        train_step.create_optimizer_state(self._optimizer, agent)
        self._frames = tf.Variable(0, dtype=tf.int64, trainable=False, name="environment_frames")
        tracked = dict(agent=agent, optimizer=self._optimizer, environment_frames=self._frames)
        self._target_moments = train_step.value_target_moments(config)
        if self._target_moments is not None:
            tracked["value_target_moments"] = self._target_moments
        # Equal on every rank, as the parameters: broadcast from rank 0, in the final digest.
        self._target_statistics = (
            self._target_moments.variables if self._target_moments is not None else ()
        )
        self._checkpointer = checkpointing.Checkpointer(
            config.logdir, max_failures=config.max_failed_checkpoints, **tracked
        )
        self._train_step = train_step.make_batch_step(
            agent, self._optimizer, config, hvd, self._target_moments
        )
        # Runs in the prefetch thread: its generator is its own.
        self._mixer = replay_mixing.ReplayMixer(
            config,
            agent,
            transport.unroll_spec,
            self._progress,
            np.random.default_rng((config.seed, hvd.rank())),
        )
        self._minibatch_rng = np.random.default_rng(config.seed + hvd.rank())
        self._minibatch_unrolls = config_lib.learner_minibatch_unrolls(
            config.minibatch_unrolls, hvd.size()
        )

    def _request_stop(self, signum, _frame):
        self._stop_signal = signal.Signals(signum).name
        logging.info(
            "%s %s received: stopping after this step", self._log_prefix, self._stop_signal
        )

    def _allreduce_status(self, status):
        if self._hvd.size() == 1:  # nothing to agree on: skips Horovod's cycle
            return _Status(*status)
        summed = self._hvd.allreduce(
            tf.constant(status, tf.float64), op=self._hvd.Sum, name="learner_status"
        )
        return _Status(*summed.numpy().tolist())

    def _progress(self):
        """Frames trained / the frame budget."""
        return float(self._frames.numpy()) / self._config.total_environment_frames

    def _update_learning_rate(self):
        self._learning_rate.assign(self._config.learning_rate * max(0.0, 1.0 - self._progress()))

    def _start(self):
        """Restores (rank 0), syncs every rank to rank 0 and opens the transport to actors."""
        if self._is_chief:
            self._checkpointer.restore_latest()
        # Rank 0's (restored or fresh) state becomes everyone's.
        self._hvd.broadcast_variables(
            self._agent.variables
            + tuple(self._optimizer.variables)
            + (self._frames,)
            + self._target_statistics,
            root_rank=0,
        )
        self._transport.initialize()
        self._publish(parameter_snapshot(self._parameters))
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._request_stop)
        share = self._minibatch_unrolls
        logging.info(
            "%s serving actors; training from %d to %d environment frames, %s",
            self._log_prefix,
            int(self._frames.numpy()),
            self._config.total_environment_frames,
            f"minibatches of {share} unroll(s), {share * self._hvd.size()} per update"
            if share
            else "one step per batch",
        )

    def _publish(self, parameters):
        """Publishes `parameters` (parameter_snapshot's) with the frames trained so far."""
        return self._transport.publish(parameters, int(self._frames.numpy()))

    def run(self):
        """Trains until the frame budget, a stop signal or starvation; returns the exit code."""
        config = self._config
        self._start()
        prefetcher = BatchPrefetcher(self._transport, config.batch_size, self._mixer)
        progress_log = progress.ProgressLog(
            config,
            self._is_chief,
            self._frames,
            self._learning_rate,
            self._transport,
            self._mixer.memory,
            self._target_moments,
        )
        reason, exit_code, steps, own_frames = "frame budget reached", 0, 0, 0
        watchdog = Watchdog(f"{self._log_prefix} step", EXIT_STUCK)
        heart = Heartbeat()
        heart.start()
        save_at_end = self._is_chief
        try:
            while int(self._frames.numpy()) < config.total_environment_frames:
                # Actors take a while to start, or to be restarted after giving up on this
                # learner: until the first batch, wait as long as they wait for the learner,
                # and never less than for any later batch.
                first = not steps and config.learner_wait_secs > config.batch_timeout_secs
                timeout_flag = "learner_wait_secs" if first else "batch_timeout_secs"
                timeout = config.learner_wait_secs if first else config.batch_timeout_secs
                mixed = self._next_batch(prefetcher, watchdog, heart, timeout, timeout_flag)
                spec = self._transport.unroll_spec
                unroll = spec.pack(mixed.batch) if mixed is not None else None
                local_status = self._local_status(unroll)
                status = self._allreduce_status(local_status)
                if status.stop_requested:
                    reason = f"{self._stop_signal or 'a stop signal to another learner'}"
                    exit_code = EXIT_STOPPED_BY_SIGNAL
                    break
                if status.checkpoints_failing:
                    reason = "checkpoints failing"
                    exit_code = self._report_checkpoints_failing()
                    save_at_end = False  # it would fail as well
                    break
                if status.has_batch < self._hvd.size():
                    reason = "no data"
                    exit_code = self._report_starvation(unroll is None, timeout, timeout_flag)
                    break
                self._update_learning_rate()
                self._update_input_statistics(unroll)
                outputs, priorities = train_step.train_in_minibatches(
                    self._train_step,
                    spec.pack(mixed.train_batch),
                    mixed.weights,
                    self._minibatch_unrolls,
                    self._minibatch_rng,
                )
                # One copy of the parameters per batch: checked, then published.
                parameters = parameter_snapshot(self._parameters)
                self._check_finite(outputs, parameters, steps + 1)
                self._update_target_statistics(outputs, len(mixed.weights))
                if mixed.indexes is not None:
                    replayed_priorities = priorities[config.batch_size :]
                    self._mixer.memory.update_priorities(mixed.indexes, replayed_priorities)
                self._frames.assign_add(int(status.frames))
                steps, own_frames = steps + 1, own_frames + local_status[0]
                progress_log.step(
                    unroll,
                    outputs,
                    status.episodes,
                    status.episode_return_sum,
                    self._publish(parameters),
                )
                if self._is_chief:
                    self._checkpointer.save_if_due(config.checkpoint_secs)
        except DivergedError:
            save_at_end = False  # the newest checkpoint stays the last one before the divergence
            raise
        finally:
            heart.stop()
            watchdog.stop()
            prefetcher.stop()
            if save_at_end:
                self._save_final_checkpoint()
            progress_log.close()
        logging.info(
            "%s stopped at %d environment frames (%s); this learner trained on %d frames in "
            "%d steps; parameter digest %s",
            self._log_prefix,
            int(self._frames.numpy()),
            reason,
            own_frames,
            steps,
            parameter_digest(self._parameters + self._target_statistics),
        )
        if exit_code == 0:
            # Only a finished training tells the actors it is over (they exit 0); kept serving
            # a moment so that they see it. A learner stopped before its budget tells them
            # nothing: they wait for its restart, as after a crash.
            self._transport.finish()
            if self._evaluator_host is not None:
                serve_final_parameters(
                    self._transport,
                    self._evaluator_host,
                    config.learner_wait_secs,
                    self._log_prefix,
                )
            time.sleep(_FINISH_GRACE_SECS)
        return exit_code

    def _update_input_statistics(self, unroll):
        """Folds the frames of this batch's fresh unrolls (batch-major [B, T+1, ...]; replayed
        ones were counted when fresh), pooled over the ranks, into the agent's input statistics,
        if it normalises its input. Step 0 of each unroll is the previous one's last."""
        normalizer = self._agent.input_normalizer
        if normalizer is None:
            return
        observations = unroll.env_outputs.observation[:, 1:]
        frames = observations.reshape((-1, *observations.shape[2:]))
        mean, mean_square = input_normalization.moments(frames)
        self._fold_pooled(normalizer, mean, mean_square, len(frames))

    def _update_target_statistics(self, outputs, num_unrolls):
        """Folds the moments of the V-trace targets of the batch just trained (`outputs` of
        train_step.train_in_minibatches, on `num_unrolls` unrolls), pooled over the ranks, into
        their running statistics, if --normalize_value_loss or --popart (whose value head then
        follows them)."""
        if self._target_moments is None:
            return
        self._fold_pooled(
            self._target_moments,
            outputs["target_mean"],
            outputs["target_mean_square"],
            num_unrolls * self._config.unroll_length,
        )
        train_step.follow_value_targets(self._agent, self._target_moments)

    def _fold_pooled(self, statistics, mean, mean_square, count):
        """Folds this rank's moments of `count` samples, pooled with every rank's, into the
        RunningMoments `statistics`: the same statistics on every rank."""
        if self._hvd.size() > 1:
            mean, mean_square = self._hvd.grouped_allreduce(
                [tf.constant(mean), tf.constant(mean_square)], op=self._hvd.Average
            )
        statistics.fold(mean, mean_square, count * self._hvd.size())

    def _next_batch(self, prefetcher, watchdog, heart, timeout, flag):
        """The next replay_mixing.Mixed batch; None after `timeout` s (--`flag`) without one,
        or on a stop signal.

        A wait that ends with no batch when this learner was itself stopped or frozen since its
        previous wait ended (heart: a heartbeat.py Heartbeat) proves nothing of its actors,
        which may have sent nothing, or given up, only because this learner stopped answering:
        it is said, and the wait starts again."""
        while True:
            if self._config.step_timeout_secs > 0:
                watchdog.expect_within(
                    timeout + self._config.step_timeout_secs, f"--{flag} + --step_timeout_secs"
                )
            batch = prefetcher.get(timeout, lambda: self._stop_signal)
            frozen_secs = heart.frozen_secs()
            heart.restart()
            if batch is not None or self._stop_signal or not frozen_secs:
                return batch
            logging.warning(
                "%s no batch in %d s (--%s), but this learner itself was stopped or frozen "
                "for %.0f s meanwhile (SIGSTOP? a suspended host?): not blaming its actors; "
                "waiting again",
                self._log_prefix,
                timeout,
                flag,
                frozen_secs,
            )

    def _check_finite(self, outputs, parameters, step):
        """Raises DivergedError, naming the step, if the loss or the gradient norm of the batch
        just trained (`outputs`, of train_in_minibatches), or the `parameters` it left (numpy
        arrays), are no longer finite.

        Every rank stops at the same step: the gradient norm is that of the gradients summed
        over the ranks (a non-finite loss on one rank makes it non-finite on all), and the
        parameters are the same on every rank."""
        loss, gradient_norm = outputs["total"], outputs["gradient_norm"]
        parameters_finite = parameters_are_finite(parameters)
        if parameters_finite and np.isfinite([loss, gradient_norm]).all():
            return
        raise DivergedError(
            f"training diverged at step {step} of this learner "
            f"({int(self._frames.numpy())} environment frames): loss {loss:g}, gradient norm "
            f"{gradient_norm:g}, parameters {'' if parameters_finite else 'not '}finite; "
            "stopped before publishing or checkpointing them (is --learning_rate too high?)"
        )

    def _save_final_checkpoint(self):
        """Saves a checkpoint unless the parameters are no longer finite (a step interrupted
        between its update and its check): then the last one saved stays the newest."""
        if parameters_are_finite(parameter_snapshot(self._parameters)):
            self._checkpointer.save()
        else:
            logging.error("%s the parameters are not finite: no checkpoint saved", self._log_prefix)

    def _local_status(self, unroll):
        stop, failing = bool(self._stop_signal), self._checkpointer.failing
        if unroll is None:
            return [0, 0, stop, failing, 0, 0]
        # Element 0 of each unroll repeats the previous unroll's last step: count steps 1..T.
        info = unroll.env_outputs.info
        game_over = info.game_over[:, 1:]
        frames = game_over.size * self._frames_per_step
        return [
            frames,
            1,
            stop,
            failing,
            int(game_over.sum()),
            float(info.episode_return[:, 1:][game_over].sum()),
        ]

    def _report_checkpoints_failing(self):
        """Logs why training stops for checkpoints that cannot be written; returns the exit
        code."""
        logging.error(
            "%s %s: stopping all learners (is the disk of --logdir=%s full, or its "
            "checkpoints directory unwritable? the checkpoint errors above say which)",
            self._log_prefix,
            f"{self._config.max_failed_checkpoints} checkpoint(s) in a row not written "
            "(--max_failed_checkpoints)"
            if self._is_chief
            else "the first learner could not write its checkpoints",
            self._config.logdir,
        )
        return EXIT_CHECKPOINTS_FAILING

    def _report_starvation(self, this_rank_starved, timeout_secs, flag):
        """Logs why training stops for lack of data; returns the exit code."""
        if this_rank_starved:
            logging.error(
                "%s no batch of %d unrolls from actors %s in %d s (--%s): are they alive? "
                "Stopping all learners.",
                self._log_prefix,
                self._config.batch_size,
                ",".join(self._actor_hosts),
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
