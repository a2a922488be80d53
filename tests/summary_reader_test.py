"""summary_reader.episode_returns reads back exactly the episode returns a writer logged."""

import tensorflow as tf

import progress
from tools import summary_reader


def test_episode_returns_of_the_level_from_every_file_in_frame_order(tmp_path):
    # Two event files (e.g. a learner restarted from a checkpoint), steps out of order in
    # the first, and other tags and levels that must be left out.
    written = [
        [(300, 1.0), (100, -2.5), (200, 3.0)],
        [(400, 7.0), (400, 8.0)],
    ]
    for run in written:
        writer = tf.summary.create_file_writer(str(tmp_path), filename_suffix=f".{len(run)}")
        with writer.as_default():
            for step, episode_return in run:
                tf.summary.scalar("Pong/episode_return", episode_return, step=step)
                tf.summary.scalar("Breakout/episode_return", 99.0, step=step)
                tf.summary.scalar("frames_per_second", 1000.0, step=step)
        writer.close()

    assert summary_reader.episode_returns(tmp_path, "Pong") == [
        (100, -2.5),
        (200, 3.0),
        (300, 1.0),
        (400, 7.0),
        (400, 8.0),
    ]
    assert summary_reader.episode_returns(tmp_path, "Seaquest") == []


def test_a_restarted_learner_replaces_what_its_earlier_run_wrote_past_the_checkpoint(tmp_path):
    # The first run logged games up to frame 500 and was killed; its last checkpoint was at
    # frame 300, from which the restarted run (a new events file) trains again.
    for start, games in (
        (0, [(100, -21.0), (300, -20.0), (400, -19.0), (500, -18.0)]),
        (300, [(350, -17.0), (450, -16.0)]),
    ):
        writer = tf.summary.create_file_writer(str(tmp_path), filename_suffix=f".{start}")
        with writer.as_default():
            tf.summary.scalar(progress.START_TAG, start, step=start)
            for step, episode_return in games:
                tf.summary.scalar("Pong/episode_return", episode_return, step=step)
        writer.close()

    assert summary_reader.episode_returns(tmp_path, "Pong") == [
        (100, -21.0),
        (350, -17.0),
        (450, -16.0),
    ]
    assert summary_reader.scalars(tmp_path, progress.START_TAG) == [(0, 0.0), (300, 300.0)]


def test_simple_value_summaries_as_tensorboardx_writes_them(tmp_path):
    # Sample Factory's summaries (tensorboardX): TF 1 Summary protos with a simple_value.
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        for step, value in ((800, -21.0), (400, -20.0)):
            summary = tf.compat.v1.Summary(
                value=[tf.compat.v1.Summary.Value(tag="reward/reward", simple_value=value)]
            )
            tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=step)
    writer.close()

    assert summary_reader.scalars(tmp_path, "reward/reward") == [(400, -20.0), (800, -21.0)]
