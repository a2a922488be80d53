"""One training run per --logdir: the learner of rank 0 holds an exclusive lock on it.

Two learners given the same --logdir (two runs started by hand) would both write ckpt-1, ckpt-2,
... under the same names and their summaries into one directory, each overwriting the other's
checkpoints. The lock is an flock on LOCK_NAME in the logdir, taken without waiting: a second
learner is refused at once, naming the logdir and the holder's PID (written into the file). The
kernel releases it when its holder's process ends, however it ends, so a killed learner never
leaves a stale lock for its restart. Readers (--mode=test, the evaluator) take no lock.
"""

import contextlib
import fcntl
import os

LOCK_NAME = "learner.lock"


class LogdirLockedError(RuntimeError):
    """Another process holds the logdir's lock."""


@contextlib.contextmanager
def hold(logdir):
    """Holds `logdir`'s lock inside the block (creating the directory if need be); raises
    LogdirLockedError, naming the logdir and the holder's PID, if another process holds it."""
    os.makedirs(logdir, exist_ok=True)
    path = os.path.join(logdir, LOCK_NAME)
    with open(path, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LogdirLockedError(
                f"--logdir={logdir} is in use by another learner (PID {_holder(lock)} holds "
                f"{path}): give this run a --logdir of its own, or stop that one first"
            ) from None
        lock.truncate(0)
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield


def _holder(lock):
    """The PID the holder wrote into the lock file `lock`, or 'unknown' before it wrote it."""
    lock.seek(0)
    return lock.read().strip() or "unknown"
