"""A run's timing figures, from what its run directory keeps: the learner's CPU milliseconds per
trained sample, frames/s, and the load the machine was under meanwhile.

While the run trains, `Sampler` appends to `<run_dir>/samples.csv`, every few seconds, the
learners' CPU seconds so far (user + system, all their threads; psutil) and the 1-minute load
average, under a comment line with the load before training. `figures()` reads them back beside
rank 0's progress lines in `<run_dir>/learners.log` (global frames, every --log_secs), so that a
run still going or stopped early (bench.replay --curves_only) has its figures too:

  - the steady window: from `skip_secs` after the first progress line (start-up: TF's traces,
    the replay memory filling) to the last sample within the progress lines;
  - frames_per_sec: the frames between the first and last progress line in the window over the
    time between them (cluster.rate_of, as bench.throughput and bench.peers read them);
  - learner_cpu_ms_per_trained_sample: the learners' CPU over the window per agent step trained
    on, each on-policy agent step counting `uses` = (B + replayed) / B times (the frames at the
    window's ends interpolated between progress lines);
  - load_average: the mean of the sampled 1-minute load averages over the window (the run's own
    processes included: compare it across runs, and with load_before).
"""

import os
import time

import numpy as np

from bench import cluster
from bench.peers import speed

SAMPLES = "samples.csv"
LEARNERS_LOG = "learners.log"
_LOAD_BEFORE = "# load average before training: "
FIGURES = ("frames_per_sec", "learner_cpu_ms_per_trained_sample", "load_average")


class Sampler:
    """The watch of runs.train: appends one sample of the workers to `run_dir`/SAMPLES a call."""

    def __init__(self, run_dir, load_before):
        self._path = os.path.join(run_dir, SAMPLES)
        with open(self._path, "w") as f:
            f.write(f"{_LOAD_BEFORE}{load_before}\nunix_time,learner_cpu_secs,load_1min\n")

    def __call__(self, workers):
        cpu = sum(speed.cpu_seconds(workers.learner_processes()).values())
        # Appended and closed at once: a run cut short keeps every sample taken.
        with open(self._path, "a") as f:
            f.write(f"{time.time():.3f},{cpu:.3f},{os.getloadavg()[0]:.2f}\n")


def read_samples(run_dir):
    """(load before training or None, float64 [N, 3] of (unix time, learner CPU s, load))."""
    path = os.path.join(run_dir, SAMPLES)
    if not os.path.exists(path):
        return None, np.zeros((0, 3))
    with open(path) as f:
        comment, _header, *lines = f.read().splitlines()
    rows = [[float(cell) for cell in line.split(",")] for line in lines]
    return float(comment.removeprefix(_LOAD_BEFORE)), np.array(rows, np.float64).reshape(-1, 3)


def figures(run_dir, frames_per_step, uses, skip_secs):
    """The run's timing figures (module docstring) as a dict of FIGURES, `load_before` and
    `window_secs`; a figure is None when the steady window holds fewer than two samples.

    frames_per_step: environment frames per agent step (the action repeat).
    uses: trainings of each on-policy agent step (replay.uses_per_agent_step).
    """
    load_before, samples = read_samples(run_dir)
    log_path = os.path.join(run_dir, LEARNERS_LOG)
    with open(log_path, errors="replace") as f:
        points = np.array(cluster.progress_points(f.read()), np.float64).reshape(-1, 2)
    empty = {**dict.fromkeys(FIGURES), "load_before": load_before, "window_secs": None}
    if len(points) < 2:
        return empty
    in_window = (samples[:, 0] >= points[0, 0] + skip_secs) & (samples[:, 0] <= points[-1, 0])
    window = samples[in_window]
    if len(window) < 2:
        return empty
    (start, cpu_start, _), (end, cpu_end, _) = window[0], window[-1]
    frames = np.interp([start, end], points[:, 0], points[:, 1])
    trained = (frames[1] - frames[0]) / frames_per_step * uses
    return {
        "frames_per_sec": cluster.rate_of(points.tolist(), start, end),
        "learner_cpu_ms_per_trained_sample": 1e3 * (cpu_end - cpu_start) / trained
        if trained
        else None,
        "load_average": float(np.mean(window[:, 2])),
        "load_before": load_before,
        "window_secs": end - start,
    }
