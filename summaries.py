"""Reading back what the learner wrote to TensorBoard (for benchmarks and tests)."""

import tensorflow as tf


def episode_returns(logdir, level_name):
    """Every finished game the learner logged: list of (environment frames, return), by frames.

    The learner (rank 0) writes one `<level_name>/episode_return` scalar per game its actors
    finished, at step = global environment frames after the train step that saw the game end.
    """
    returns = []
    for path in sorted(tf.io.gfile.glob(f"{logdir}/events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.tag == f"{level_name}/episode_return":
                    returns.append((event.step, float(tf.make_ndarray(value.tensor))))
    return sorted(returns, key=lambda frames_and_return: frames_and_return[0])
