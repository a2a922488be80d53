"""progress.ProgressLog: a short line of what a person reads, which the benchmarks parse; the
figures it leaves out go to TensorBoard."""

import logging
import types

import numpy as np
import pytest
import tensorflow as tf
from absl import logging as absl_logging

import config
import progress
from agents.running_moments import RunningMoments
from bench import cluster
from tools import summary_reader

# The loss's parts and the policy's figures of one train step (train_step's outputs).
OUTPUTS = {
    "total": -123456.789,
    "policy_gradient": -0.02,
    "baseline": 0.47,
    "entropy": -56.9,
    "gradient_norm": 34.99,
    "entropy_fraction": 1.0,
    "mean_abs_log_rho": 0.053,
    "clipped_rho_fraction": 0.54,
    "surrogate_clipped_fraction": 0.31,
    "trust_region_fraction": 0.0,
    "value_mean": 0.8,
    "explained_variance": 0.25,
    "advantage_std": 0.125,
}


def unroll(episode_returns, acted_with):
    """A batch of one unroll per game in `episode_returns`, each ending with its game, acted
    with parameter version `acted_with`."""
    game_over = np.zeros((len(episode_returns), 3), bool)
    game_over[:, -1] = True
    returns = np.zeros(game_over.shape)
    returns[:, -1] = episode_returns
    info = types.SimpleNamespace(game_over=game_over, episode_return=returns)
    return types.SimpleNamespace(
        env_outputs=types.SimpleNamespace(info=info),
        parameter_version=np.full(len(episode_returns), acted_with),
    )


@pytest.fixture
def logged(tmp_path, monkeypatch, caplog):
    """The progress line (with absl's header) of one step of a large run: frames near a budget
    of ten billion, a million frames/s, large negative returns and loss, a long policy lag,
    fewer games than the return's window; the summaries in tmp_path."""
    clock = iter([1000.0, 1001.0, 1001.0])  # start, the step, its line
    monkeypatch.setattr(progress, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    frames = tf.Variable(9_998_000_000, dtype=tf.int64)
    settings = dict(logdir=str(tmp_path), log_secs=0, total_environment_frames=10**10)
    transport = types.SimpleNamespace(queue_size=lambda: 7)
    replay = types.SimpleNamespace(size=60, capacity=64, bytes=2**30)
    log = progress.ProgressLog(
        config.Config(**settings), True, frames, tf.Variable(2e-4), transport, replay
    )
    frames.assign_add(1_000_000)
    games = [-123456.78] * 99
    with caplog.at_level(logging.INFO, logger="absl"):
        log.step(unroll(games, acted_with=0), OUTPUTS, len(games), sum(games), version=1236)
        log.close()
    (record,) = [r for r in caplog.records if r.filename == "progress.py"]
    return absl_logging.PythonFormatter().format(record), record.getMessage()


def test_the_line_is_short_and_says_what_a_person_reads(logged):
    _, line = logged
    assert line == (
        "frames 9999000000 (100.0%) | 1000000 frames/s | return -123456.78 (99 games) | "
        "entropy 100% | lag 1235.0 | loss -123456.789"
    )
    assert len(line) < 160


def test_the_benchmarks_read_the_frames_of_the_line(logged):
    with_header, _ = logged
    ((_, frames),) = cluster.progress_points(with_header)
    assert frames == 9_999_000_000


def test_what_the_line_leaves_out_is_in_tensorboard(logged, tmp_path):
    tags = summary_reader.tags(tmp_path)
    assert {
        *("loss/policy_gradient", "loss/baseline", "loss/entropy", "loss/gradient_norm"),
        *("policy/mean_abs_log_rho", "policy/clipped_rho_fraction", "learning_rate"),
        "policy/surrogate_clipped_fraction",
        *("queue_size", "replay/unrolls", "replay/allocated_gib"),
        *("value/mean", "value/explained_variance", "value/advantage_std"),
    } <= tags, tags
    assert summary_reader.scalars(tmp_path, "value/explained_variance") == [(9_999_000_000, 0.25)]
    assert summary_reader.scalars(tmp_path, "queue_size") == [(9_999_000_000, 7.0)]
    assert summary_reader.scalars(tmp_path, "policy/surrogate_clipped_fraction") == [
        (9_999_000_000, pytest.approx(0.31))
    ]
    assert summary_reader.scalars(tmp_path, "replay/unrolls") == [(9_999_000_000, 60.0)]
    assert "value/target_variance" not in tags  # only with --normalize_value_loss


def test_the_value_terms_divisor_is_in_tensorboard_with_normalize_value_loss(tmp_path):
    """--normalize_value_loss: the running variance of the value targets that divides the value
    term, as folded in by the learner (targets 1 and 3: variance 1)."""
    targets = RunningMoments(name="value_target_moments")
    targets.create_variables([])
    targets.fold(mean=2.0, mean_square=5.0, count=64)
    frames = tf.Variable(5_000, dtype=tf.int64)
    settings = dict(logdir=str(tmp_path), log_secs=0, normalize_value_loss=True)
    transport = types.SimpleNamespace(queue_size=lambda: 0)
    log = progress.ProgressLog(
        config.Config(**settings), True, frames, tf.Variable(2e-4), transport, None, targets
    )
    log.step(unroll([21.0], acted_with=0), OUTPUTS, 1, 21.0, version=1)
    log.close()
    assert summary_reader.scalars(tmp_path, "value/target_variance") == [(5_000, 1.0)]
