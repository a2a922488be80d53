"""bench.learning --curves_only: the CSV, PNG and JSON of a run stopped before its budget, read
from the summaries its learner wrote (written here as the learner writes them), an Atari game's
curve in --docs_dir, an A/B run's beside it; and how a run is stopped early."""

import json
import signal
import subprocess
import sys

import numpy as np
import tensorflow as tf

from bench import atari_curves, atari_suite, learning, runs
from tools import local_cluster

LEVEL = "PongNoFrameskip-v4"


def curves_only(output_dir, runs="pong", *flags):
    """Runs `bench.learning --runs=RUNS --curves_only [flags]`, its docs in output_dir/docs;
    returns the finished process."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.learning",
            f"--runs={runs}",
            "--curves_only",
            f"--output_dir={output_dir}",
            f"--docs_dir={output_dir / 'docs'}",
            *flags,
        ],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def write_games(logdir, level, frames, returns):
    """Summaries of games as the learner writes them: each game's return at its frames, and a
    falling entropy fraction."""
    writer = tf.summary.create_file_writer(str(logdir))
    with writer.as_default():
        for step, episode_return in zip(frames, returns, strict=True):
            tf.summary.scalar(f"{level}/episode_return", episode_return, step=int(step))
            tf.summary.scalar("policy/entropy_fraction", 1.0 - step / 1e7, step=int(step))
    writer.close()


def test_the_curve_of_a_stopped_run_is_written_as_far_as_it_got(tmp_path):
    # 200 games, a game every 4000 frames, returns rising by 0.5 a game from -21 to +21; the
    # entropy fraction falling. A run directory of another run, that must be left alone.
    returns = np.minimum(-21.0 + 0.5 * np.arange(200), 21.0)
    frames = 4000 * np.arange(1, 201)
    write_games(tmp_path / "pong_abcd1234" / "logdir", LEVEL, frames, returns)
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
    # Stopped at 800K of 10M frames: its docs curve, partial, to 800K.
    docs_curve = atari_curves.read(tmp_path / "docs" / "atari" / "Pong.csv")
    assert not docs_curve.complete and docs_curve.budget == 10_000_000
    np.testing.assert_array_equal(docs_curve.rows[:, 0], 100_000 * np.arange(1, 9))
    assert docs_curve.rows[-1, 2] == 200  # games by 800K


def test_without_a_run_directory_it_says_so(tmp_path):
    finished = curves_only(tmp_path)

    assert finished.returncode != 0
    assert f"--curves_only: no pong run directory in {tmp_path}" in finished.stderr


def test_the_atari_suite_table_and_figure_of_its_runs(tmp_path):
    """Two games of the suite, budget 5M frames, one past it, one stopped at 3M: their docs
    curves, complete and partial, and the table rebuilt from them: the issue's header and a return
    at each budget the complete run reached (means of the last 100 games)."""
    pong_frames = 40_000 * np.arange(1, 151)  # to 6M
    write_games(tmp_path / "pong_abcd1234" / "logdir", LEVEL, pong_frames, np.arange(150.0))
    breakout_frames = 30_000 * np.arange(1, 101)  # to 3M
    breakout = tmp_path / "breakout_abcd1234" / "logdir"
    write_games(breakout, "BreakoutNoFrameskip-v4", breakout_frames, np.full(100, 7.0))
    docs = tmp_path / "docs"

    finished = curves_only(tmp_path, "pong,breakout", "--total_environment_frames=5000000")

    assert finished.returncode == 0, finished.stderr[-3000:]
    pong_curve = atari_curves.read(docs / "atari" / "Pong.csv")
    assert pong_curve.complete
    assert not atari_curves.read(docs / "atari" / "Breakout.csv").complete
    # Each curve names the commit that trained it: this checkout's.
    commit = atari_curves.commit_of(atari_curves.provenance(local_cluster.REPO))
    assert commit and pong_curve.commit == commit
    # Pong by 2.5M: games 0..61, the mean of 0..61; by 5M: games 0..124, the mean of 25..124.
    # Breakout, partial: how far it got only.
    assert (docs / "atari_results.csv").read_text().splitlines() == [
        "game,frames,return_2.5M,return_5M,return_10M",
        f"Pong,5000000,{np.mean(np.arange(62)):.2f},{np.mean(np.arange(25, 125)):.2f},",
        "Breakout,3000000,,,",
    ]
    assert "Atari suite" in finished.stdout
    assert (docs / "atari_suite.png").stat().st_size > 10_000


def test_each_games_figure_marks_its_own_ppo_returns():
    assert learning.figure_marks("breakout") == (None, atari_suite.reference("Breakout"))
    assert learning.figure_marks("pong") == (None, atari_suite.reference("Pong"))
    assert learning.figure_marks("cartpole") == (475.0, None)


def test_an_ab_curve_goes_beside_the_suites_with_its_flags(tmp_path):
    frames = 20_000 * np.arange(1, 101)  # to 2M of the 5M budget
    write_games(
        tmp_path / "space_invaders_abcd1234" / "logdir",
        "SpaceInvadersNoFrameskip-v4",
        frames,
        np.full(100, 250.0),
    )
    docs = tmp_path / "docs"

    finished = curves_only(
        tmp_path,
        "space_invaders",
        "--ab=queue2",
        "--queue_capacity=2",
        "--total_environment_frames=5000000",
    )

    assert finished.returncode == 0, finished.stderr[-3000:]
    path = docs / "atari" / "ab" / "SpaceInvaders-queue2.csv"
    curve = atari_curves.read(path)
    assert not curve.complete and curve.budget == 5_000_000
    assert curve.rows[-1, 0] == 2_000_000 and curve.rows[-1, 1] == 250.0
    comment = path.read_text().splitlines()[0]
    assert "A/B queue2: " in comment and "--queue_capacity=2" in comment
    assert not (docs / "atari" / "SpaceInvaders.csv").exists()
    assert not (docs / "atari_results.csv").exists()


def test_stopping_early_needs_an_ab_name(tmp_path):
    finished = curves_only(tmp_path, "space_invaders", "--stop_at_frames=2000000")

    assert finished.returncode != 0
    assert "--stop_at_frames: give --ab too" in finished.stderr


class FakeLearners:
    """WorkerSets' learners and log as runs.stopping_at() sees them."""

    def __init__(self, frames):
        self.log = "".join(
            f"I1127 21:19:{second:02d}.315398 1 progress.py:166] frames {f} (1.0%) | ...\n"
            for second, f in enumerate(frames)
        )
        self.learners = self
        self.signals = []

    def learner_log(self):
        return self.log

    def signal(self, signum):
        self.signals.append(signum)


def test_a_run_stopped_early_gets_sigterm_once_its_frames_are_logged():
    watched = []
    stop = runs.stopping_at(2_000_000, watched.append)
    short, there = FakeLearners([1_000_000, 1_990_000]), FakeLearners([1_990_000, 2_004_224])

    stop(short)
    stop(there)

    assert watched == [short, there]  # The run's own watch still called.
    assert short.signals == [] and there.signals == [signal.SIGTERM]
    nothing_logged = FakeLearners([])
    runs.stopping_at(1)(nothing_logged)
    assert nothing_logged.signals == []
