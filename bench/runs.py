"""One training run of the real system in a run directory of its own: what bench.learning and
bench.replay share.

A run directory (`<name>_<8 random characters>` in an output directory) holds the workers' logs
(`learners.log`, `actor-<i>-<j>.log`) and the learner's `logdir` (summaries, checkpoints).
"""

import contextlib
import glob
import os
import signal
import subprocess
import tempfile
import time

import environments
import exit_codes
from bench import cluster
from tools import local_cluster


def new_run_dir(output_dir, name):
    """A fresh run directory of `name` in `output_dir`."""
    return tempfile.mkdtemp(prefix=f"{name}_", dir=output_dir)


def newest_run_dir(output_dir, name):
    """The most recently started run directory of `name` in `output_dir`, or None."""
    # mkdtemp's names: the prefix `<name>_` and 8 random characters ("pong_*" alone would also
    # match pong_no_replay's).
    run_dirs = [
        os.path.dirname(logdir)
        for logdir in glob.glob(os.path.join(output_dir, f"{name}_*", "logdir"))
        if len(os.path.basename(os.path.dirname(logdir))) == len(name) + 1 + 8
    ]
    return max(run_dirs, key=os.path.getctime) if run_dirs else None


def train(
    run_dir, config, num_learners, num_actors, watch=None, watch_secs=10.0, stop_at_frames=None
):
    """Trains `num_learners` learners and `num_actors` actors to the frame budget in `run_dir`;
    returns the wall time and the logdir.

    watch: called with the local_cluster.WorkerSets every `watch_secs` while the learners run
      (e.g. to sample their CPU time), or None.
    stop_at_frames: stop the learners at this many frames instead, their learning-rate schedule
      still the budget's (stopping_at()); None: at the budget.
    """
    logdir = os.path.join(run_dir, "logdir")
    flag_args = cluster.worker_flags(config, logdir=logdir)
    # Generous: a floor of 300 frames/s, well below the defaults' measured rates (bench/README.md).
    timeout_secs = 600 + config.total_environment_frames / 300
    finished = {0}
    if stop_at_frames is not None:
        watch = stopping_at(stop_at_frames, watch)
        finished.add(exit_codes.EXIT_STOPPED_BY_SIGNAL)
    start = time.monotonic()
    with local_cluster.WorkerSets(num_learners, num_actors, flag_args, run_dir) as workers:
        try:
            exit_code = _wait(workers, start + timeout_secs, watch, watch_secs)
        except local_cluster.TerminatedError:
            _stop_learners(workers)
            raise
        if exit_code not in finished:
            raise RuntimeError(f"learner exited with {exit_code}; see {workers.learners_log}")
    return time.monotonic() - start, logdir


def stopping_at(frames, watch=None):
    """A watch for train() that calls `watch` (if any), then sends the learners SIGTERM once rank
    0 has logged `frames` frames: they save a checkpoint and their summaries, and exit."""

    def stop_when_there(workers):
        if watch is not None:
            watch(workers)
        logged = cluster.progress_points(workers.learner_log())
        if logged and logged[-1][1] >= frames:
            workers.learners.signal(signal.SIGTERM)

    return stop_when_there


# How long a run stopped from outside waits for its learners to save their state.
STOP_GRACE_SECS = 60


def _stop_learners(workers):
    """Sends the learners SIGTERM and waits (at most STOP_GRACE_SECS) for them to save a checkpoint
    and their summaries (the run's curve as far as it got, and --resume's starting point)."""
    workers.learners.signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        workers.learners.popen.wait(timeout=STOP_GRACE_SECS)


def _wait(workers, deadline, watch, watch_secs):
    """The learners' exit code, calling `watch(workers)` every `watch_secs` meanwhile; at the
    (monotonic) `deadline`, raises AssertionError with their log's tail."""
    while watch is not None and time.monotonic() < deadline:
        watch(workers)
        try:
            return workers.learners.popen.wait(timeout=watch_secs)
        except subprocess.TimeoutExpired:
            continue
    return workers.learners.wait(timeout=max(0.0, deadline - time.monotonic()))


def batch_frames(config, num_learners):
    """Environment frames of one batch of all `num_learners` learners (the global frame count's
    step): on-policy unrolls x steps x frames per step (the action repeat)."""
    frames_per_step = environments.action_repeat(config.level_name)
    return config.batch_size * config.unroll_length * frames_per_step * num_learners
