"""Reading back what the learner wrote to TensorBoard.

tools/curves.py draws a run's curves from it (for bench/learning.py and bench/peers too); the
tests use it.
"""

import tensorflow as tf


def _read_events_file(path, tag):
    """(wall time of the file's first summary, smallest step of any summary in it, the (step,
    value) points of `tag`) of one events file (its opening event's time is whole seconds)."""
    first_wall_time, first_step, points = None, None, []
    for record in tf.data.TFRecordDataset(path):
        event = tf.compat.v1.Event.FromString(record.numpy())
        if event.summary.value:
            if first_wall_time is None:
                first_wall_time = event.wall_time
            first_step = event.step if first_step is None else min(first_step, event.step)
        for value in event.summary.value:
            if value.tag == tag:
                points.append((event.step, _value(value)))
    return first_wall_time or 0.0, first_step, points


def _value(value):
    """The float of a scalar Summary.Value: a tensor (TF 2's writers) or a simple_value (the
    TF 1 form, which tensorboardX writes: Sample Factory's summaries, bench/peers)."""
    if value.WhichOneof("value") == "simple_value":
        return value.simple_value
    return float(tf.make_ndarray(value.tensor))


def scalars(logdir, tag):
    """Every value of the scalar summary `tag` in `logdir`: list of (step, value), by step.

    A learner restarted from a checkpoint trains again the frames after it, writing to a new
    events file whose first step is the frame count it restored (progress.START_TAG): what the
    earlier files hold from that step on is orphaned (those frames were trained again) and is
    dropped, as TensorBoard drops it.
    """
    paths = tf.io.gfile.glob(f"{logdir}/events.out.tfevents.*")
    files = sorted(
        (_read_events_file(path, tag) for path in paths),
        key=lambda file: file[0],  # in the order they were written
    )
    points = []
    for _, first_step, file_points in files:
        if first_step is not None:
            points = [point for point in points if point[0] < first_step]
        points.extend(file_points)
    return sorted(points, key=lambda step_and_value: step_and_value[0])


def tags(logdir):
    """The tags of every summary in `logdir`'s events files: a set of str."""
    found = set()
    for path in tf.io.gfile.glob(f"{logdir}/events.out.tfevents.*"):
        for record in tf.data.TFRecordDataset(path):
            event = tf.compat.v1.Event.FromString(record.numpy())
            found.update(value.tag for value in event.summary.value)
    return found


def episode_returns(logdir, level_name):
    """Every finished game the learner logged: list of (environment frames, return), by frames.

    The learner (rank 0) writes one `<level_name>/episode_return` scalar per game its actors
    finished, at step = global environment frames after the train step that saw the game end.
    """
    return scalars(logdir, f"{level_name}/episode_return")
