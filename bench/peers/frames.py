"""`--part=frames`: one configuration trained until the mean of its last 100 games reaches the
target, or to the frame budget; its curve goes to docs/peers/<system>-<config>-<Game>.csv, or,
the configuration having runs already, to <system>-<config>-<Game>-run<N>.csv.

The run is polled: its summaries are read every poll (tools/curves.py, the same for both systems:
sf_train.py writes bench.learning's per-game tag) and it is stopped from outside once a full
window of games reached the target (SF 2.1.1 has no such stop; its --train_for_seconds does not
stop it either). Frames to the target come from the games themselves, so how late the poll
notices does not change them.
"""

import os
import time

import numpy as np

from tools import curves


def curve_path(peers_dir, system, config, game, run=1):
    """Where the configuration's `run`th curve goes: peers_dir/<system>-<config>-<Game>.csv, the
    later runs' <system>-<config>-<Game>-run<N>.csv."""
    suffix = "" if run == 1 else f"-run{run}"
    return os.path.join(peers_dir, f"{system}-{config}-{game}{suffix}.csv")


def curve_paths(peers_dir, system, config, game):
    """The configuration's committed curves, its first run's first."""
    paths = []
    while os.path.exists(path := curve_path(peers_dir, system, config, game, len(paths) + 1)):
        paths.append(path)
    return paths


def next_curve_path(peers_dir, system, config, game):
    """Where a new run of the configuration writes its curve: after those committed, as one run
    of a configuration is one sample of its frames to the target."""
    runs = len(curve_paths(peers_dir, system, config, game))
    return curve_path(peers_dir, system, config, game, runs + 1)


def games(run, level_name):
    """float64 [N, 3] (frames, return, mean of the last <= 100) of the Run's games so far."""
    logdir = run.logdir()
    try:
        return curves.read_run(logdir, run.system, level_name).returns if logdir else _none()
    except curves.CurvesError:  # no directory or no game yet
        return _none()


def _none():
    return np.zeros([0, 3])


def finished(points, target, max_frames):
    """Whether games `points` ([N, 3]) reached `target` (a full window's mean) or the budget."""
    reached = curves.first_frames_at(points, target) is not None
    return reached or (len(points) > 0 and points[-1, 0] >= max_frames)


def train_to_target(run, level_name, target, max_frames, poll_secs):
    """Polls the Run every `poll_secs` until finished() or it exits, and stops it (also when
    interrupted). Raises RuntimeError (with its log's tail) if it exited with an error first."""
    try:
        while True:
            time.sleep(poll_secs)
            points = games(run, level_name)
            if len(points):
                print(
                    f"frames {points[-1, 0]:,.0f}, {len(points)} games, mean of the last "
                    f"{curves.WINDOW}: {points[-1, 2]:.2f}",
                    flush=True,
                )
            exit_code = run.exit_code()
            if finished(points, target, max_frames) or exit_code == 0:
                return
            if exit_code is not None:
                raise RuntimeError(
                    f"{run.system} exited with {exit_code}; log tail:\n{run.process.log()[-3000:]}"
                )
    finally:
        run.stop()
