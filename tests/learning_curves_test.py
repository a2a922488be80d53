"""bench.learning --curves_only: the CSV, PNG and JSON of a run stopped before its budget, read
from the summaries its learner wrote (written here as the learner writes them)."""

import json
import subprocess
import sys

import numpy as np
import tensorflow as tf

import local_cluster

LEVEL = "PongNoFrameskip-v4"


def curves_only(output_dir):
    """Runs `bench.learning --runs=pong --curves_only`; returns the finished process."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.learning",
            "--runs=pong",
            "--curves_only",
            f"--output_dir={output_dir}",
        ],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_curve_of_a_stopped_run_is_written_as_far_as_it_got(tmp_path):
    # 200 games, a game every 4000 frames, returns rising by 0.5 a game from -21 to +21; the
    # entropy fraction falling. A run directory of another run, that must be left alone.
    returns = np.minimum(-21.0 + 0.5 * np.arange(200), 21.0)
    frames = 4000 * np.arange(1, 201)
    logdir = tmp_path / "pong_abcd1234" / "logdir"
    writer = tf.summary.create_file_writer(str(logdir))
    with writer.as_default():
        for step, episode_return in zip(frames, returns, strict=True):
            tf.summary.scalar(f"{LEVEL}/episode_return", episode_return, step=int(step))
            tf.summary.scalar("policy/entropy_fraction", 1.0 - step / 1e6, step=int(step))
    writer.close()
    (tmp_path / "pong_no_replay_abcd1234" / "logdir").mkdir(parents=True)

    finished = curves_only(tmp_path)

    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(finished.stdout.strip().splitlines()[-1])["results"][0]
    table = np.loadtxt(tmp_path / "pong.csv", delimiter=",", skiprows=1)
    assert table.shape == (200, 3)
    np.testing.assert_array_equal(table[:, 0], frames)
    np.testing.assert_allclose(table[:, 1], returns, atol=1e-4)
    # The running mean of the last 100 games: at game 200, games 101..200.
    np.testing.assert_allclose(table[-1, 2], returns[100:].mean(), atol=1e-3)
    full_windows = np.array([returns[i - 99 : i + 1].mean() for i in range(99, 200)])
    first = frames[99 + np.nonzero(full_windows >= 18.0)[0][0]]
    assert result["frames_to_target"] == first
    assert result["frames"] == frames[-1] and result["budget"] == 10_000_000
    assert result["wall_secs"] is None and result["games"] == 200
    assert (tmp_path / "pong.png").stat().st_size > 10_000


def test_without_a_run_directory_it_says_so(tmp_path):
    finished = curves_only(tmp_path)

    assert finished.returncode != 0
    assert f"--curves_only: no pong run directory in {tmp_path}" in finished.stderr
