"""One real training run, judged by several tests: a learner, two actors and an evaluator of
experiment.py as processes on loopback train CartPole on the vector family's defaults (the clipped
surrogate with uniform experience replay) to a frame budget (the run is shared because it is the
suite's most expensive part; each test reads one concern of it)."""

import os
import subprocess
import sys

import cv2
import numpy as np
import pytest

from evaluation import EVAL_SUBDIR, VIDEO_SUBDIR, records_video
from tests.training_settings import CARTPOLE_LEARNING
from tools import local_cluster, summary_reader
from tools.local_cluster import cluster_flags

pytestmark = pytest.mark.slow

BUDGET = 200_000  # frames: learnt by 1 learner + 2 actors (tests/training_settings.py)
EVAL_INTERVAL = 50_000
REPLAY_SIZE = 2000


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The trained run: {"logdir", "learner", "actors", "evaluator"} (ended local_cluster
    Processes), every game's return in frame order as "returns"."""
    directory = tmp_path_factory.mktemp("cartpole")
    logdir = directory / "logdir"
    flags = [
        *cluster_flags(2, evaluator=True),
        f"--logdir={logdir}",
        *CARTPOLE_LEARNING,
        f"--total_environment_frames={BUDGET}",
        f"--replay_size={REPLAY_SIZE}",
        f"--eval_interval_frames={EVAL_INTERVAL}",
        "--eval_games=10",
        "--eval_video_every=2",
    ]
    started = []

    def spawn(role_flags, name):
        argv = [sys.executable, local_cluster.EXPERIMENT, *flags, *role_flags]
        started.append(local_cluster.Process(argv, directory / f"{name}.log"))
        return started[-1]

    try:
        learner = spawn(["--job_name=learner"], "learner")
        actors = [spawn(["--job_name=actor", f"--task={j}"], f"actor{j}") for j in range(2)]
        evaluator = spawn(["--job_name=evaluator"], "evaluator")
        assert learner.wait(timeout=900) == 0, learner.log()[-3000:]
        for actor in actors:
            assert actor.wait(timeout=60) == 0, actor.log()[-3000:]
        assert evaluator.wait(timeout=300) == 0, evaluator.log()[-3000:]
        returns = [r for _, r in summary_reader.episode_returns(logdir, "CartPole-v1")]
        yield {
            "logdir": logdir,
            "learner": learner,
            "actors": actors,
            "evaluator": evaluator,
            "returns": returns,
        }
    finally:
        for process in started:
            process.kill()


def test_one_learner_two_actors_learn_cartpole_with_replay(run):
    assert len(run["returns"]) >= 100
    assert np.mean(run["returns"][-20:]) > 150, run["returns"][-40:]
    log = run["learner"].log()
    assert "frames/s" in log and "| lag " in log
    for actor in run["actors"]:
        assert "learner finished training; exiting" in actor.log()


def test_the_replay_memory_fills_and_tensorboard_holds_what_the_progress_line_leaves_out(run):
    logdir = run["logdir"]
    assert f"learner: replay memory full: {REPLAY_SIZE} unrolls (" in run["learner"].log()
    assert max(fill for _, fill in summary_reader.scalars(logdir, "replay/unrolls")) == REPLAY_SIZE
    left_out = {  # progress.py
        *("loss/policy_gradient", "loss/baseline", "loss/entropy", "loss/gradient_norm"),
        *("policy/mean_abs_log_rho", "policy/clipped_rho_fraction"),
        *("learning_rate", "queue_size", "replay/allocated_gib"),
    }
    assert left_out <= summary_reader.tags(logdir), summary_reader.tags(logdir)


def test_each_role_tunes_its_use_of_the_host_in_one_line(run):
    """host_tuning.py: a lone learner whose actors share its host (loopback) runs its threads
    real-time (--learner_realtime=auto; the tests run as root) on every core, with every core
    but one for TF kernels; an actor lowers its priority by --actor_niceness (default 10) with
    one thread in each TF pool; the evaluator takes only CPU nothing else wants."""
    cores = sorted(os.sched_getaffinity(0))
    assert (
        "learner host tuning: scheduling SCHED_FIFO priority 1 (its actors share this host) | "
        f"cores {cores} (the only learner on this host) | TF threads: {max(1, len(cores) - 1)} "
        "kernel, default scheduling | torso float32 (--torso_dtype=float32) | allocator tcmalloc"
    ) in run["learner"].log()
    for actor in run["actors"]:
        assert (
            f"actor host tuning: niceness {min(19, os.nice(0) + 10)} (--actor_niceness=10) | "
            "TF threads: 1 kernel, 1 scheduling | torso float32 (--torso_dtype=float32) | "
            "allocator tcmalloc"
        ) in actor.log()
    assert (
        "evaluator host tuning: scheduling SCHED_IDLE (only CPU nothing else wants) | "
        "TF threads: 1 kernel, 1 scheduling | torso float32 (--torso_dtype=float32) | "
        "allocator tcmalloc"
    ) in run["evaluator"].log()


def test_an_evaluator_reports_full_games_through_training_and_its_end(run):
    logdir = run["logdir"]
    assert "evaluated the final parameters; exiting" in run["evaluator"].log()
    # Under <logdir>/eval, at the frames of the parameters evaluated: one evaluation per
    # interval at most (the games take a while), and the final parameters'.
    means = summary_reader.scalars(logdir / EVAL_SUBDIR, "eval/return_mean")
    frames = [step for step, _ in means]
    assert len(means) >= 2 and frames == sorted(set(frames)), means
    assert frames[-1] >= BUDGET
    assert means[-1][1] >= 150, means
    versions = summary_reader.scalars(logdir / EVAL_SUBDIR, "eval/parameter_version")
    assert [step for step, _ in versions] == frames
    for tag in ("eval/return_std", "eval/game_frames"):
        assert [step for step, _ in summary_reader.scalars(logdir / EVAL_SUBDIR, tag)] == frames
    # The learner's own summaries stay in <logdir>, untouched by the evaluator's.
    assert not summary_reader.scalars(logdir, "eval/return_mean")

    # The first game of the first and of every second evaluation, at CartPole's rendered size.
    videos = sorted((logdir / VIDEO_SUBDIR).glob("CartPole-v1-*.mp4"))
    recorded = [n for n in range(1, len(means) + 1) if records_video(n, every=2)]
    assert len(videos) == len(recorded) == 1 + len(means) // 2, (videos, means)
    capture = cv2.VideoCapture(str(videos[-1]))
    try:
        assert capture.isOpened()
        size = (capture.get(cv2.CAP_PROP_FRAME_WIDTH), capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
        assert size == (600, 400)
        assert capture.get(cv2.CAP_PROP_FRAME_COUNT) >= 8  # a CartPole game lasts 8 steps or more
    finally:
        capture.release()


def test_the_runs_curves_as_a_picture(run, tmp_path):
    """tools/curves.py: training return, evaluation return and entropy."""
    png = tmp_path / "curves.png"
    plot = subprocess.run(
        [sys.executable, "-m", "tools.curves", str(run["logdir"]), f"--output={png}"],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plot.returncode == 0, plot.stderr[-3000:]
    image = cv2.imread(str(png))
    assert image is not None and min(image.shape[:2]) > 100, png
