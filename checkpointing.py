"""Checkpoints under <logdir>/checkpoints: periodic, atomic, restored with a clear verdict.

Atomicity comes from TF's checkpoint protocol: the data files of a checkpoint are written
first, then the `checkpoint` state file is replaced atomically (write + rename) to point at
them. A crash mid-write leaves the state file on the previous, complete checkpoint.

A save that fails (a full disk, a directory made unwritable) does not stop training: it is one
logged line naming the checkpoint and the cause, what it left (`ckpt-N_temp/`, a partial
`ckpt-N`) is removed, and the next save is due --checkpoint_secs later. `Checkpointer.failing`
tells the learner when too many failed in a row (--max_failed_checkpoints).

Restoring (the learner's resume, `--mode=test`) tries the checkpoints newest first:
  - Damage (a truncated, corrupt or missing file: any error while reading a checkpoint) is
    logged with the checkpoint's path and a short reason, and the next older checkpoint is
    tried; when none can be read, one CheckpointError names the directory and each checkpoint
    tried, with its reason.
  - The `checkpoint` state file emptied, garbled or missing does not stop that: it is logged,
    and the checkpoints are taken from their `ckpt-N.index` files, newest N first. The learner
    then writes the state file anew from them (its CheckpointManager needs one it can read,
    and deletes the old checkpoints only if it lists them).
  - A checkpoint whose variables do not match the objects restored into (another agent, another
    number of actions, another optimizer, another --normalize_input: shapes differ, variables
    are missing, or the checkpoint's agent has variables the restored one lacks) is not
    damage: it is a CheckpointError at once, naming the checkpoint, the agent and one differing
    variable. It is not skipped for an older checkpoint: the directory is most likely another
    run's (--logdir pointed at it), whose older checkpoints are not this agent's either.
"""

import os
import re
import tempfile
import time

import tensorflow as tf
from absl import logging

# The names TF's CheckpointManager gives: its state file, and its checkpoints' prefixes.
_STATE_FILE = "checkpoint"
_INDEX_FILE = re.compile(r"ckpt-(\d+)\.index")


class CheckpointError(RuntimeError):
    """No usable checkpoint where one was required."""


def checkpoint_dir(logdir):
    return os.path.join(logdir, "checkpoints")


class Checkpointer:
    """Saves and restores the tracked objects (e.g. agent, optimizer, frame counter).

    Only the process that restores and saves (the learner's rank 0) touches the directory:
    the CheckpointManager is made on the first restore or save.

    Args:
      logdir: the run's --logdir.
      max_to_keep: checkpoints kept on disk (older ones are the fallback if the newest is bad).
      max_failures: failed saves in a row after which `failing` is true.
      **tracked: the trackable objects, by name (the names are the checkpoint's keys).
    """

    def __init__(self, logdir, max_to_keep=3, max_failures=3, **tracked):
        self._directory = checkpoint_dir(logdir)
        self._max_to_keep = max_to_keep
        self._max_failures = max_failures
        self._tracked = tracked
        self._checkpoint = tf.train.Checkpoint(**tracked)
        self._manager = None
        self._last_save = time.monotonic()
        self._failures = 0  # failed saves since the last one that succeeded

    def _open(self):
        """Finds the checkpoints (newest first), repairs an unreadable state file from them and
        makes the CheckpointManager; returns the checkpoints."""
        checkpoints, state_readable = find_checkpoints(self._directory)
        if not state_readable:
            _rewrite_state_file(self._directory, checkpoints)
        self._manager = tf.train.CheckpointManager(
            self._checkpoint, self._directory, max_to_keep=self._max_to_keep
        )
        return checkpoints

    def restore_latest(self):
        """Restores the newest readable checkpoint; returns its path, or None if there is none.

        Unreadable checkpoints are logged by path and skipped (newest first); CheckpointError if
        none is readable, or if the newest readable one does not match the tracked objects.
        """
        checkpoints = self._open()
        if not checkpoints:
            return None
        return _restore_newest(
            self._checkpoint,
            checkpoints,
            self._directory,
            self._tracked,
            partial=False,
            advice=f"move {self._directory} away to train from scratch",
        )

    def save(self):
        """Writes a checkpoint; returns its path, or None if it could not be written (logged in
        one line; what the failed save left is removed)."""
        self._last_save = time.monotonic()
        number = int(self._checkpoint.save_counter) + 1  # the manager's name for it: ckpt-N
        try:
            if self._manager is None:
                self._open()
            path = self._manager.save()
        except (tf.errors.OpError, OSError) as e:
            self._failures += 1
            self._report_failure(e, number)
            return None
        self._failures = 0
        logging.info("saved checkpoint %s", path)
        return path

    @property
    def failing(self):
        """Whether the last `max_failures` saves all failed."""
        return self._failures >= self._max_failures

    def _report_failure(self, error, number):
        """Removes what the failed save of checkpoint `number` left and logs one line: the
        checkpoint, the cause and what was removed."""
        prefix = os.path.join(self._directory, f"ckpt-{number}")
        # A save that failed after its files were complete (recording or sweeping) keeps them.
        written = self._manager is not None and self._manager.latest_checkpoint == prefix
        removed = _remove_unfinished(self._directory, prefix, keep_checkpoint=written)
        logging.error(
            "checkpoint %s not written: %s; %s; failure %d in a row, at most %d "
            "(--max_failed_checkpoints)",
            prefix,
            write_error_cause(error),
            f"removed {', '.join(removed)}" if removed else "nothing left to remove",
            self._failures,
            self._max_failures,
        )

    def save_if_due(self, every_secs):
        if time.monotonic() - self._last_save >= every_secs:
            self.save()


def restore_for_evaluation(logdir, **tracked):
    """Restores the newest readable checkpoint of `logdir` into `tracked` (partially: no
    optimizer needed), skipping unreadable ones as Checkpointer.restore_latest does.

    Returns the checkpoint's path; raises CheckpointError naming the directory or file at fault.
    """
    directory = checkpoint_dir(logdir)
    checkpoints, _ = find_checkpoints(directory)
    if not checkpoints:
        raise CheckpointError(f"no checkpoint in {directory} (train with --mode=train first)")
    return _restore_newest(
        tf.train.Checkpoint(**tracked), checkpoints, directory, tracked, partial=True
    )


def write_error_cause(error):
    """Why a write failed, in a few words: the OS's reason of a TF error ('No space left on
    device', 'Permission denied'), else its first line."""
    message = getattr(error, "message", None) or getattr(error, "strerror", None) or _short(error)
    cause = message.strip().splitlines()[0].rpartition("; ")[2]
    return re.sub(r"\s*\[Op:\w+\]$", "", cause)


def _remove_unfinished(directory, prefix, keep_checkpoint):
    """Removes what a failed save of the checkpoint `prefix` left: its temporary directory
    (`ckpt-N_temp`), the state file's temporary copies and, unless `keep_checkpoint`, its own
    files. Returns the names of what it removed; what it cannot remove stays."""
    leftovers = tf.io.gfile.glob(f"{prefix}_temp*")
    leftovers += tf.io.gfile.glob(os.path.join(directory, f"{_STATE_FILE}.tmp*"))
    if not keep_checkpoint:
        leftovers += tf.io.gfile.glob(f"{prefix}.*")
    removed = []
    for path in leftovers:
        try:
            if tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
            else:
                tf.io.gfile.remove(path)
        except tf.errors.OpError:
            continue
        removed.append(os.path.basename(path))
    return removed


def find_checkpoints(directory):
    """The checkpoints (path prefixes) in `directory`, newest first, and whether its state file
    was readable.

    Those the state file lists come first, newest first; then any other `ckpt-N.index` files of
    the directory, newest N first (all of them when the state file is emptied, garbled or
    missing, which is logged).
    """
    state_file = os.path.join(directory, _STATE_FILE)
    numbered = []
    if tf.io.gfile.isdir(directory):
        for name in tf.io.gfile.listdir(directory):
            match = _INDEX_FILE.fullmatch(name)
            if match:
                prefix = os.path.normpath(os.path.join(directory, name.removesuffix(".index")))
                numbered.append((int(match.group(1)), prefix))
    on_disk = [path for _, path in sorted(numbered, reverse=True)]
    if not tf.io.gfile.exists(state_file):
        if on_disk:
            logging.warning(
                "checkpoint state file %s is missing: taking the checkpoints from the ckpt-N.index "
                "files: %s",
                state_file,
                ", ".join(on_disk),
            )
        return on_disk, not on_disk  # a state file to write if there are checkpoints
    try:
        # Raises ValueError when the file is empty (UnicodeDecodeError when it is not text);
        # returns None, after logging a warning, when its text does not parse.
        state = tf.train.get_checkpoint_state(directory)
        reason = None if state is not None else "it does not parse"
    except Exception as e:  # whatever the file holds, the checkpoints are found
        state, reason = None, _short(e)
    if state is None:
        logging.error(
            "checkpoint state file %s is unreadable (%s): taking the checkpoints from the "
            "ckpt-N.index files: %s",
            state_file,
            reason,
            ", ".join(on_disk) or "none",
        )
        return on_disk, False
    listed = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path not in listed:
        listed.append(state.model_checkpoint_path)
    listed = [os.path.normpath(path) for path in reversed(listed)]
    return listed + [path for path in on_disk if path not in listed], True


def _rewrite_state_file(directory, checkpoints):
    """Replaces an unreadable (or missing) state file by one listing `checkpoints` (newest first);
    removes it if there are none."""
    state_file = os.path.join(directory, _STATE_FILE)
    if not checkpoints:
        if tf.io.gfile.exists(state_file):
            tf.io.gfile.remove(state_file)
            logging.warning("removed the unreadable checkpoint state file %s", state_file)
        return
    oldest_first = list(reversed(checkpoints))
    names = [os.path.basename(path) for path in oldest_first]  # relative, as TF's own
    # The manager deletes a checkpoint beyond max_to_keep only if its timestamp (here its index
    # file's time) is later than the state's last preserved timestamp (here before them all).
    times = [tf.io.gfile.stat(f"{path}.index").mtime_nsec / 1e9 for path in oldest_first]
    tf.compat.v1.train.update_checkpoint_state(
        directory,
        names[-1],
        names,
        all_model_checkpoint_timestamps=times,
        last_preserved_timestamp=min(times) - 1,
    )
    logging.warning("rewrote the checkpoint state file %s: %s", state_file, ", ".join(names))


def _restore_newest(checkpoint, checkpoints, directory, tracked, partial, advice=None):
    """Restores the first of `checkpoints` that can be read into `checkpoint`; returns its path.

    Damaged ones are logged and skipped; a mismatch with `tracked` raises at once. The variables
    a checkpoint holds are compared with the tracked ones before it is restored (so that a
    mismatch is told from damage, and no variable is half restored from another agent)."""
    expected = _variable_shapes(tracked)
    failures = []
    for i, path in enumerate(checkpoints):
        try:
            saved = dict(tf.train.list_variables(path))  # its index file alone
            difference = _difference(saved, expected)
            if difference is None:
                status = checkpoint.restore(path)
                if partial:
                    status = status.expect_partial()
                status.assert_existing_objects_matched()
        # Any damage: a truncated data file raises IndexError, a corrupt index file OpError, a
        # missing file NotFoundError.
        except Exception as e:
            reason = _short(e)
            failures.append(f"checkpoint {path} is unusable ({reason})")
            logging.error(
                "checkpoint %s is unusable (%s): %s",
                path,
                reason,
                "trying the next older one" if i + 1 < len(checkpoints) else "no older one",
            )
            continue
        if difference is not None:
            raise CheckpointError(
                f"checkpoint {path} does not match {_describe(tracked)}: {difference}; was it "
                "written with another --agent_name, --level_name, --normalize_input, "
                "--separate_value_torso, --normalize_value_loss or --popart (a --logdir of another "
                "run)?"
            )
        if i:
            logging.warning("restored checkpoint %s, skipping %d newer unusable one(s)", path, i)
        logging.info("restored checkpoint %s", path)
        return path
    advice = f"; {advice}" if advice else ""
    raise CheckpointError(f"no readable checkpoint in {directory}: {'; '.join(failures)}{advice}")


def _variable_shapes(tracked):
    """{checkpoint key: shape} of the variables of `tracked`, as a checkpoint of them holds them
    (written to a temporary directory and listed, so that the keys are TF's own). Empty, and
    logged, if that cannot be written: checkpoints are then restored without telling a mismatch
    from damage."""
    try:
        with tempfile.TemporaryDirectory(prefix="checkpoint_keys_") as scratch:
            path = tf.train.Checkpoint(**tracked).write(os.path.join(scratch, "expected"))
            return {
                key: shape
                for key, shape in tf.train.list_variables(path)
                if key.split("/", 1)[0] in tracked
            }
    except Exception as e:
        logging.warning("cannot list the variables to restore (%s): not compared", _short(e))
        return {}


def _difference(saved, expected):
    """How a checkpoint's variables `saved` differ from `expected` (both {key: shape}): one
    example and the count, or None if it holds all of the expected ones with their shapes (and
    no agent variable besides)."""
    reshaped = [key for key in sorted(expected) if key in saved and saved[key] != expected[key]]
    missing = [key for key in sorted(expected) if key not in saved]
    # An agent variable the restored agent lacks (e.g. the input statistics of an agent trained
    # with --normalize_input) would be dropped without a word.
    extra = []
    if any(key.startswith("agent/") for key in expected):
        extra = [key for key in sorted(saved) if key.startswith("agent/") and key not in expected]
    if not reshaped and not missing and not extra:
        return None
    if reshaped:
        key = reshaped[0]
        owner = "the agent" if key.startswith("agent/") else "this process"
        example = (
            f"{_readable(key)} has shape {saved[key]} in the checkpoint, {expected[key]} in {owner}"
        )
    elif missing:
        key = missing[0]
        example = f"{_readable(key)} (shape {expected[key]}) is not in the checkpoint"
    else:
        key = extra[0]
        example = f"{_readable(key)} (shape {saved[key]}) is in the checkpoint, not in the agent"
    others = len(reshaped) + len(missing) + len(extra) - 1
    return example + (f" ({others} more variable(s) differ)" if others else "")


def _describe(tracked):
    """'the agent (--agent_name=MLPAgent, 2 actions)', or the tracked objects' names."""
    agent = tracked.get("agent")
    if agent is None:
        return "the restored objects (" + ", ".join(tracked) + ")"
    return f"the agent (--agent_name={agent.describe()})"


def _readable(key):
    """A checkpoint key without TF's attribute suffix: agent/_torso/_layers/0/w."""
    return key.removesuffix("/.ATTRIBUTES/VARIABLE_VALUE")


def _short(error):
    """First line of an exception's message (TF errors carry long stack traces)."""
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
