"""Reading back what the learner wrote to TensorBoard.

It ships for the benchmarks (bench/learning.py draws its curves from it); the tests use it too.
"""

import tensorflow as tf


def scalars(logdir, tag):
    """Every value of the scalar summary `tag` in `logdir`: list of (step, value), by step."""
    points = []
    for path in sorted(tf.io.gfile.glob(f"{logdir}/events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.tag == tag:
                    points.append((event.step, float(tf.make_ndarray(value.tensor))))
    return sorted(points, key=lambda step_and_value: step_and_value[0])


def episode_returns(logdir, level_name):
    """Every finished game the learner logged: list of (environment frames, return), by frames.

    The learner (rank 0) writes one `<level_name>/episode_return` scalar per game its actors
    finished, at step = global environment frames after the train step that saw the game end.
    """
    return scalars(logdir, f"{level_name}/episode_return")
