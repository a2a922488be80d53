"""tools.curves draws the curves of runs from the summaries their learners (and evaluators) wrote,
written here under the tags progress.py writes; a logdir without them is one line naming it."""

import re
import subprocess
import sys

import cv2
import numpy as np
import pytest
import tensorflow as tf

import progress
from evaluation import EVAL_SUBDIR
from tools import curves, local_cluster

LEVEL = "PongNoFrameskip-v4"


def write_run(logdir, num_games=150, evaluations=True):
    """Summaries as a learner writes them: a game every 4000 frames, returns rising from -21; the
    entropy fraction falling; with `evaluations`, the evaluator's eval/return_mean every 100K
    frames, in its run logdir/eval."""
    learner = tf.summary.create_file_writer(str(logdir))
    with learner.as_default():
        tf.summary.scalar(progress.START_TAG, 0, step=0)
        for game in range(num_games):
            frames = 4000 * (game + 1)
            tf.summary.scalar(f"{LEVEL}/episode_return", -21.0 + 0.3 * game, step=frames)
            tf.summary.scalar(curves.ENTROPY_TAG, 1.0 - frames / 1e6, step=frames)
    learner.close()
    if evaluations:
        evaluator = tf.summary.create_file_writer(str(logdir / EVAL_SUBDIR))
        with evaluator.as_default():
            for frames in range(100_000, 4000 * num_games + 1, 100_000):
                tf.summary.scalar(curves.EVALUATION_TAG, -20.0 + frames / 1e5, step=frames)
        evaluator.close()


def run_curves(*args):
    """`python -m tools.curves *args` -> the finished process."""
    return subprocess.run(
        [sys.executable, "-m", "tools.curves", *map(str, args)],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_curves_of_two_runs_are_one_png(tmp_path):
    write_run(tmp_path / "a" / "logdir")
    write_run(tmp_path / "b" / "logdir", num_games=80, evaluations=False)
    png = tmp_path / "out" / "curves.png"

    finished = run_curves(tmp_path / "a" / "logdir", tmp_path / "b" / "logdir", f"--output={png}")

    assert finished.returncode == 0, finished.stderr[-3000:]
    image = cv2.imread(str(png))
    width, height = (inches * curves.DPI for inches in curves.FIGURE_INCHES)
    assert image is not None and image.shape == (height, width, 3)
    assert image.std() > 10  # drawn on, not blank


def test_a_missing_logdir_is_one_line_naming_it(tmp_path):
    write_run(tmp_path / "a")

    finished = run_curves(tmp_path / "a", tmp_path / "missing", f"--output={tmp_path / 'c.png'}")

    assert finished.returncode == 2
    assert finished.stderr.splitlines()[-1] == (
        f"tools.curves: error: {tmp_path / 'missing'}: not a directory"
    )
    assert not (tmp_path / "c.png").exists()


def test_an_empty_logdir_is_named(tmp_path):
    expected = f"^{re.escape(str(tmp_path))}: no <level>/episode_return summaries"
    with pytest.raises(curves.CurvesError, match=expected):
        curves.read_run(str(tmp_path), "empty")


def test_a_run_is_read_with_the_running_mean_of_its_games(tmp_path):
    write_run(tmp_path, num_games=150)

    run = curves.read_run(str(tmp_path), "run")

    returns = -21.0 + 0.3 * np.arange(150)
    np.testing.assert_array_equal(run.returns[:, 0], 4000 * np.arange(1, 151))
    np.testing.assert_allclose(run.returns[:, 1], returns, atol=1e-5)
    np.testing.assert_allclose(run.returns[9, 2], returns[:10].mean(), atol=1e-5)
    np.testing.assert_allclose(run.returns[-1, 2], returns[50:].mean(), atol=1e-5)
    np.testing.assert_array_equal(run.evaluation[:, 0], 100_000 * np.arange(1, 7))
    assert run.entropy.shape == (150, 2)


def test_legend_names_are_the_fewest_path_parts_that_differ():
    assert curves.run_names(["/x/pong_a/logdir", "/x/pong_b/logdir"]) == [
        "pong_a/logdir",
        "pong_b/logdir",
    ]
    assert curves.run_names(["/runs/pong"]) == ["pong"]


def test_a_run_without_evaluations_has_no_evaluation_panel_and_marks_its_reference(tmp_path):
    write_run(tmp_path, evaluations=False)
    run = curves.read_run(str(tmp_path), "run")
    reference = curves.Reference("PPO", ((5_000_000, 33.0), (10_000_000, 70.0)))

    figure = curves.figure_of([run], reference=reference)

    returns_axes, entropy_axes = figure.axes  # no evaluation panel between them
    assert entropy_axes.get_title() == "policy entropy"
    labels = {line.get_label(): line for line in returns_axes.lines}
    np.testing.assert_array_equal(labels["PPO"].get_xydata(), [[5e6, 33.0], [1e7, 70.0]])
    assert not any(label.startswith("target") for label in labels)
    curves.plt.close(figure)


def test_a_run_with_evaluations_has_the_evaluation_panel(tmp_path):
    write_run(tmp_path)

    figure = curves.figure_of([curves.read_run(str(tmp_path), "run")], target=18.0)

    assert [axes.get_ylabel() for axes in figure.axes] == [
        "training return",
        "evaluation return",
        "entropy / max",
    ]
    assert "target 18" in [line.get_label() for line in figure.axes[0].lines]
    curves.plt.close(figure)


def test_a_curve_csv_reads_back_and_the_frames_at_which_a_full_window_reached_the_target(tmp_path):
    # 150 games at 1K frames apiece, each returning its index i: the mean of the last 100 at
    # index i >= 99 is i - 49.5, at least 60 first at index 110 (its game ends at 111K frames).
    returns = np.arange(150, dtype=np.float64)
    points = np.column_stack([1000 * np.arange(1, 151), returns, curves.running_mean(returns)])
    path = tmp_path / "run.csv"

    curves.write_csv(points, path)

    lines = path.read_text().splitlines()
    assert lines[:2] == ["frames,episode_return,mean_return_100", "1000,0,0.000"]
    np.testing.assert_allclose(curves.read_csv(path), points, atol=5e-4)
    assert curves.first_frames_at(points, 60.0) == 111_000
    # Before a full window of 100 games, a high mean does not count.
    assert curves.first_frames_at(points, 0.0) == 100_000
    assert curves.first_frames_at(points, 100.0) is None


def test_a_csv_that_is_not_a_curve_is_named(tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("frames,return_mean_100,games,entropy\n")
    with pytest.raises(curves.CurvesError, match="other.csv: not a curve"):
        curves.read_csv(path)
