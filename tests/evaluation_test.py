"""The evaluator beside real training: a learner, two actors and an evaluator as processes on
loopback (evaluation.py)."""

import subprocess
import sys

import cv2
import pytest

from evaluation import EVAL_SUBDIR, VIDEO_SUBDIR
from tests.training_settings import CARTPOLE_ADAM
from tools import local_cluster, summary_reader
from tools.local_cluster import cluster_flags

pytestmark = pytest.mark.slow

BUDGET = 400_000  # frames: CartPole learnt (see tests/experiment_test.py)
INTERVAL = 100_000


def test_an_evaluator_reports_full_games_through_training_and_its_end(spawn, tmp_path):
    logdir = tmp_path / "logdir"
    flags = [
        *cluster_flags(2, evaluator=True),
        f"--logdir={logdir}",
        *CARTPOLE_ADAM,
        f"--total_environment_frames={BUDGET}",
        f"--eval_interval_frames={INTERVAL}",
        "--eval_games=10",
        "--eval_video_every=2",
    ]
    learner = spawn([*flags, "--job_name=learner"], "learner")
    actors = [spawn([*flags, "--job_name=actor", f"--task={j}"], f"actor{j}") for j in range(2)]
    evaluator = spawn([*flags, "--job_name=evaluator"], "evaluator")
    assert learner.wait(timeout=900) == 0, learner.log()[-3000:]
    for actor in actors:
        assert actor.wait(timeout=60) == 0, actor.log()[-3000:]
    assert evaluator.wait(timeout=300) == 0, evaluator.log()[-3000:]
    log = evaluator.log()
    assert (
        "evaluator host tuning: scheduling SCHED_IDLE (only CPU nothing else wants) | "
        "TF threads: 1 kernel, 1 scheduling | allocator tcmalloc"
    ) in log
    assert "evaluated the final parameters; exiting" in log

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

    # Every second evaluation's first game, at CartPole's rendered size.
    videos = sorted((logdir / VIDEO_SUBDIR).glob("CartPole-v1-*.mp4"))
    assert len(videos) == len(means) // 2, (videos, means)
    capture = cv2.VideoCapture(str(videos[-1]))
    try:
        assert capture.isOpened()
        assert (capture.get(cv2.CAP_PROP_FRAME_WIDTH), capture.get(cv2.CAP_PROP_FRAME_HEIGHT)) == (
            600,
            400,
        )
        assert capture.get(cv2.CAP_PROP_FRAME_COUNT) >= 8  # a CartPole game lasts 8 steps or more
    finally:
        capture.release()

    # The run's curves as a picture: training return, evaluation return and entropy.
    png = tmp_path / "curves.png"
    plot = subprocess.run(
        [sys.executable, "-m", "tools.curves", str(logdir), f"--output={png}"],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plot.returncode == 0, plot.stderr[-3000:]
    image = cv2.imread(str(png))
    assert image is not None and min(image.shape[:2]) > 100, png
