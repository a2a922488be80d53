"""The games a training script finished: a progress line as it goes, the curve as CSV.

Shared by bench/inprocess.py and bench/reference_ppo.py (NumPy only: the reference runs in a
virtualenv of its own); the CSV has the columns bench.learning reads, `frames,episode_return`.
"""

import collections
import os
import time

import numpy as np

WINDOW = 100  # games in the printed running mean


class GameLog:
    """Collects (frames, return) per finished game; `report` prints and saves every
    `every_frames` frames."""

    def __init__(self, csv_path, every_frames=50_000):
        self._csv_path = csv_path
        self._every_frames = every_frames
        self._games = []
        self._recent = collections.deque(maxlen=WINDOW)
        self._start = time.monotonic()
        self._next_report = 0
        os.makedirs(os.path.dirname(os.path.abspath(csv_path)), exist_ok=True)

    def add(self, frames, episode_returns):
        """Games that ended at `frames` environment frames, with these returns."""
        for episode_return in episode_returns:
            self._recent.append(float(episode_return))
            self._games.append((frames, float(episode_return)))

    def report(self, frames, details):
        """If due: one line `frames N | F frames/s | return R (last n games) | details`, and the
        CSV rewritten."""
        if frames < self._next_report:
            return
        self._next_report += self._every_frames
        mean = np.mean(self._recent) if self._recent else float("nan")
        fps = frames / (time.monotonic() - self._start)
        print(
            f"frames {frames} | {fps:.0f} frames/s | return {mean:.2f} "
            f"(last {len(self._recent)} games) | {details}",
            flush=True,
        )
        np.savetxt(
            self._csv_path,
            np.array(self._games).reshape(-1, 2),
            fmt=["%d", "%g"],
            delimiter=",",
            header="frames,episode_return",
            comments="",
        )
