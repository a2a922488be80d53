"""A run's curves as a picture: one PNG of three panels (two without evaluations) against frames.

  .venv/bin/python -m tools.curves LOGDIR [LOGDIR...] --output=PNG

Read from the summaries in each LOGDIR (tools/summary_reader.py), one colour per run, the legend
naming it:
  - training return: each game of rank 0's actors (`<level>/episode_return`) a dot, the
    mean of its last 100 games a line;
  - evaluation return: `eval/return_mean` of the evaluator's own run, LOGDIR/eval (a run
    without it has no line in this panel; without any such run, no panel);
  - policy entropy: `policy/entropy_fraction`, the mean entropy per step over its maximum ln A.
"""

import dataclasses
import os
import sys

import matplotlib
import numpy as np
import tensorflow as tf
from absl import app, flags

from evaluation import EVAL_SUBDIR
from tools import summary_reader

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the file-only backend.

WINDOW = 100  # games in the running mean of the training return
EVALUATION_TAG = "eval/return_mean"
ENTROPY_TAG = "policy/entropy_fraction"
_EPISODE_RETURN = "/episode_return"  # the learner's tag: <level>/episode_return
FIGURE_INCHES = (8, 9)
DPI = 100  # FIGURE_INCHES * DPI: the PNG's width and height in pixels


class CurvesError(ValueError):
    """A logdir without the summaries a curve needs: one line naming it."""


@dataclasses.dataclass(frozen=True)
class RunCurves:
    """One run's curves.

    name: the run's name in the legend.
    returns: float64 [N, 3]: (frames, game return, mean return of the last <= WINDOW games).
    evaluation: float64 [M, 2]: (frames, eval/return_mean of logdir/eval); M may be 0.
    entropy: float64 [K, 2]: (frames, policy/entropy_fraction); K may be 0.
    """

    name: str
    returns: np.ndarray
    evaluation: np.ndarray
    entropy: np.ndarray

    def frames(self):
        """The furthest frame count of any of the run's summaries: how far it got."""
        series = (self.returns, self.evaluation, self.entropy)
        return int(max(points[-1, 0] for points in series if len(points)))


def read_run(logdir, name, level_name=None):
    """The RunCurves `name` of the summaries in `logdir`; the game returns are `level_name`'s
    (default: of the one level `logdir` holds)."""
    if not tf.io.gfile.isdir(logdir):
        raise CurvesError(f"{logdir}: not a directory")
    level_name = level_name or _level_of(logdir)
    games = np.array(summary_reader.episode_returns(logdir, level_name), np.float64)
    if not len(games):
        raise CurvesError(f"{logdir}: no {level_name}{_EPISODE_RETURN} summaries")
    return RunCurves(
        name=name,
        returns=np.column_stack([games, running_mean(games[:, 1])]),
        evaluation=_points(os.path.join(logdir, EVAL_SUBDIR), EVALUATION_TAG),
        entropy=_points(logdir, ENTROPY_TAG),
    )


def _level_of(logdir):
    """The one level whose game returns `logdir`'s learner logged."""
    levels = sorted(
        tag.removesuffix(_EPISODE_RETURN)
        for tag in summary_reader.tags(logdir)
        if tag.endswith(_EPISODE_RETURN)
    )
    if not levels:
        raise CurvesError(
            f"{logdir}: no <level>{_EPISODE_RETURN} summaries (not a learner's --logdir, or no "
            "game finished yet)"
        )
    if len(levels) > 1:
        raise CurvesError(f"{logdir}: game returns of several levels: {', '.join(levels)}")
    return levels[0]


def _points(logdir, tag):
    """float64 [N, 2]: (frames, value) of every `tag` summary in `logdir`."""
    return np.array(summary_reader.scalars(logdir, tag), np.float64).reshape(-1, 2)


def running_mean(values, window=WINDOW):
    """[N] -> [N]: the mean of each value and the up to `window` - 1 values before it."""
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    ends = np.arange(1, len(values) + 1)
    counts = np.minimum(ends, window)
    return (cumulative[ends] - cumulative[ends - counts]) / counts


CSV_HEADER = "frames,episode_return,mean_return_100"


def write_csv(points, csv_path):
    """Writes the games `points` (float64 [N, 3] of RunCurves.returns) to `csv_path` as
    CSV_HEADER's columns, one row a game."""
    os.makedirs(os.path.dirname(os.path.abspath(csv_path)), exist_ok=True)
    np.savetxt(
        csv_path, points, fmt=["%d", "%g", "%.3f"], delimiter=",", header=CSV_HEADER, comments=""
    )


def read_csv(csv_path):
    """float64 [N, 3]: the games of a CSV write_csv wrote; CurvesError if it is not one."""
    with open(csv_path) as f:
        header = f.readline().strip()
    if header != CSV_HEADER:
        raise CurvesError(f"{csv_path}: not a curve ({CSV_HEADER!r} expected first)")
    return np.loadtxt(csv_path, delimiter=",", skiprows=1, ndmin=2).reshape(-1, 3)


def first_frames_at(points, target):
    """Frames at which the mean over a full window of games first reaches `target`, or None.

    points: [N, 3] of RunCurves.returns."""
    reached = np.nonzero(points[WINDOW - 1 :, 2] >= target)[0]
    return int(points[WINDOW - 1 + reached[0], 0]) if len(reached) else None


def run_names(logdirs):
    """The legend's names of `logdirs`: the fewest trailing path parts that tell them apart."""
    parts = [os.path.abspath(logdir).split(os.sep) for logdir in logdirs]
    for count in range(1, max(map(len, parts)) + 1):
        names = [os.path.join(*path[-count:]) for path in parts]
        if len(set(names)) == len(names):
            break
    return names


@dataclasses.dataclass(frozen=True)
class Reference:
    """Published returns to compare a run with, marked as labelled points.

    label: the legend's entry (e.g. "PPO").
    points: ((frames, return), ...).
    """

    label: str
    points: tuple


def mark_reference(axes, reference):
    """Marks each point of the Reference `reference` as a star with its value beside it."""
    frames, values = np.array(reference.points, np.float64).T
    axes.plot(frames, values, "*", color="black", markersize=10, label=reference.label)
    for x, y in reference.points:
        # Left of and below the star: the last point is often at the panel's top right corner.
        axes.annotate(f"{y:g}", (x, y), textcoords="offset points", xytext=(-8, -4), ha="right")


def figure_of(runs, title=None, target=None, reference=None):
    """The figure of the RunCurves `runs` (module docstring), with `title` above, a dashed line at
    the training return `target` and the points of the Reference `reference`, when given. The
    evaluation panel only when a run has evaluation summaries (most runs have no evaluator)."""
    with_evaluation = any(len(run.evaluation) for run in runs)
    height_ratios = [3, 2, 1.5] if with_evaluation else [3, 1.5]
    figure, axes = plt.subplots(
        len(height_ratios), 1, figsize=FIGURE_INCHES, sharex=True, height_ratios=height_ratios
    )
    returns_axes, entropy_axes = axes[0], axes[-1]
    for i, run in enumerate(runs):
        color = f"C{i % 10}"
        frames, game_returns, means = run.returns.T
        returns_axes.plot(frames, game_returns, ".", color=color, alpha=0.3, markersize=3)
        returns_axes.plot(frames, means, "-", color=color, label=run.name)
        if with_evaluation and len(run.evaluation):
            axes[1].plot(*run.evaluation.T, "o-", color=color, markersize=3)
        if len(run.entropy):
            entropy_axes.plot(*run.entropy.T, "-", color=color)
    if target is not None:
        returns_axes.axhline(target, color="gray", linestyle="--", label=f"target {target:g}")
    if reference is not None:
        mark_reference(returns_axes, reference)
    returns_axes.set(
        ylabel="training return",
        title=f"games (dots) and the mean of the last {WINDOW} (line)",
    )
    returns_axes.legend(loc="best")
    if with_evaluation:
        axes[1].set(ylabel="evaluation return", title=f"evaluation ({EVALUATION_TAG})")
    entropy_axes.set(
        xlabel="environment frames", ylabel="entropy / max", ylim=(0, 1.05), title="policy entropy"
    )
    for panel in axes:
        panel.grid(alpha=0.3)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    return figure


def draw(runs, path, title=None, target=None, reference=None):
    """Writes the PNG `path` of figure_of(runs, title, target, reference)."""
    save(figure_of(runs, title, target, reference), path)


def save(figure, path):
    """Writes `figure` to the PNG `path` (its directory made if need be) and closes it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=DPI)
    plt.close(figure)


def main(argv):
    logdirs = argv[1:]
    if not logdirs:
        raise app.UsageError("give the LOGDIR of each run to draw")
    try:
        names = run_names(logdirs)
        runs = [read_run(logdir, name) for logdir, name in zip(logdirs, names, strict=True)]
    except CurvesError as e:
        print(f"tools.curves: error: {e}", file=sys.stderr)
        return 2
    draw(runs, flags.FLAGS.output)
    print(f"wrote {flags.FLAGS.output}")
    return 0


if __name__ == "__main__":
    # Defined here, not on import: bench.learning draws with this module without this flag.
    flags.DEFINE_string("output", "curves.png", "The PNG file to write.")
    app.run(main)
