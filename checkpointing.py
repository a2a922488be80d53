"""Checkpoints under <logdir>/checkpoints: periodic, atomic, restored with a clear verdict.

Atomicity comes from TF's checkpoint protocol: the data files of a checkpoint are written
first, then the `checkpoint` index file is replaced atomically (write + rename) to point at
them. A crash mid-write leaves the index on the previous, complete checkpoint.

A checkpoint that cannot be read (corrupt or truncated files) is reported by path; on
resume, training falls back to the next older checkpoint instead of discarding all progress.
"""

import os
import time

import tensorflow as tf
from absl import logging


class CheckpointError(RuntimeError):
    """No usable checkpoint where one was required."""


def checkpoint_dir(logdir):
    return os.path.join(logdir, "checkpoints")


class Checkpointer:
    """Saves and restores the tracked objects (e.g. agent, optimizer, frame counter).

    Args:
      logdir: the run's --logdir.
      max_to_keep: checkpoints kept on disk (older ones are the fallback if the newest is bad).
      **tracked: the trackable objects, by name (the names are the checkpoint's keys).
    """

    def __init__(self, logdir, max_to_keep=3, **tracked):
        self._checkpoint = tf.train.Checkpoint(**tracked)
        self._manager = tf.train.CheckpointManager(
            self._checkpoint, checkpoint_dir(logdir), max_to_keep=max_to_keep
        )
        self._last_save = time.monotonic()

    def restore_latest(self):
        """Restores the newest readable checkpoint; returns its path, or None if there is none.

        Unreadable checkpoints are logged by path and skipped (newest first).
        """
        for path in reversed(self._manager.checkpoints):
            try:
                self._checkpoint.restore(path).assert_existing_objects_matched()
            except (tf.errors.OpError, ValueError, AssertionError) as e:
                logging.error(
                    "checkpoint %s is unusable (%s): trying an older one", path, _short(e)
                )
                continue
            logging.info("restored checkpoint %s", path)
            return path
        if self._manager.checkpoints:
            raise CheckpointError(
                f"no readable checkpoint in {self._manager.directory}: all of "
                f"{', '.join(self._manager.checkpoints)} are unusable"
            )
        return None

    def save(self):
        path = self._manager.save()
        self._last_save = time.monotonic()
        logging.info("saved checkpoint %s", path)
        return path

    def save_if_due(self, every_secs):
        if time.monotonic() - self._last_save >= every_secs:
            self.save()


def restore_for_evaluation(logdir, **tracked):
    """Restores the latest checkpoint of `logdir` into `tracked` (partially: no optimizer needed).

    Returns the checkpoint's path; raises CheckpointError naming the directory or file at fault.
    """
    directory = checkpoint_dir(logdir)
    path = tf.train.latest_checkpoint(directory)
    if path is None:
        raise CheckpointError(f"no checkpoint in {directory} (train with --mode=train first)")
    try:
        tf.train.Checkpoint(**tracked).restore(
            path
        ).expect_partial().assert_existing_objects_matched()
    except (tf.errors.OpError, ValueError, AssertionError) as e:
        raise CheckpointError(f"checkpoint {path} is unusable: {_short(e)}") from e
    return path


def _short(error):
    """First line of an exception's message (TF errors carry long stack traces)."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
