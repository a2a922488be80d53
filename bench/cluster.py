"""What the benchmarks share: a quiet machine before measuring, their workers' flags, memory.

The workers themselves are started by local_cluster.WorkerSets (also the tests' helper), which
kills them all, children included, when the benchmark ends or fails.
"""

import dataclasses
import datetime
import os
import pathlib
import re
import time

from absl import flags

import config as config_lib

flags.DEFINE_float("max_load", 1.5, "Wait before each measurement until the 1-min load is below.")
flags.DEFINE_integer("load_wait_secs", 300, "Longest wait for --max_load per measurement.")
FLAGS = flags.FLAGS
config_lib.define_flags(FLAGS)  # Every benchmark accepts the training flags.


def wait_for_quiet_machine():
    """Waits (bounded) for the 1-min load average to drop below --max_load; returns it.

    The machine may be shared: a measurement taken while other work runs says little.
    """
    deadline = time.monotonic() + FLAGS.load_wait_secs
    while os.getloadavg()[0] >= FLAGS.max_load and time.monotonic() < deadline:
        time.sleep(10)
    return round(os.getloadavg()[0], 2)


def worker_flags(config, **overrides):
    """`config` (this process's Config) with `overrides` applied, as the workers' flags."""
    return config_lib.flag_args(dataclasses.replace(config, **overrides))


def pss_mb(process):
    """Proportional set size of a live psutil.Process (shared pages split among their users),
    in MiB."""
    return process.memory_full_info().pss / 2**20


def peak_rss_mb(process):
    """Peak resident set size (VmHWM) of a live psutil.Process, in MiB."""
    status = pathlib.Path(f"/proc/{process.pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)[1]) / 1024


_PROGRESS_LINE = re.compile(r"^I(\d{4}) (\d\d:\d\d:\d\d\.\d+) .*\] frames (\d+) \(", re.MULTILINE)


def progress_points(log):
    """(unix time, global frames) of each of rank 0's progress log lines."""
    year = datetime.date.today().year
    return [
        (
            datetime.datetime.strptime(f"{year}{day} {clock}", "%Y%m%d %H:%M:%S.%f").timestamp(),
            int(frames),
        )
        for day, clock, frames in _PROGRESS_LINE.findall(log)
    ]


def rate_between(log, start, end):
    """Global frames/s of rank 0's progress lines logged from `start` to `end` (unix times);
    None if fewer than two lines fall in between."""
    return rate_of(progress_points(log), start, end)


def rate_of(points, start, end):
    """Frames/s of the (unix time, frames) `points` from `start` to `end` (unix times): the
    frames between the first and the last point in between over the time between them; None if
    fewer than two points fall in between."""
    points = [p for p in points if start <= p[0] <= end]
    if len(points) < 2:
        return None
    return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


def window_rate(workers, window_secs, settle_secs):
    """Frames/s of `workers` (a local_cluster.WorkerSets) in a window of `window_secs` opened
    `settle_secs` from now (after a change, e.g. a process stopped or resumed). Raises
    RuntimeError if a worker exited or its learner logged fewer than two progress lines."""
    time.sleep(settle_secs)
    start = time.time()
    time.sleep(window_secs)
    workers.check_running()
    rate = rate_between(workers.learner_log(), start, time.time())
    if rate is None:
        raise RuntimeError(f"fewer than two progress lines in a {window_secs} s window")
    return rate
