"""What bench/chaos.py checks of a run once it ended, read from the learners' logs and summaries
(and, when the frontend failed, what it reports of the frontend's).

Apart from the run itself so that each check is a function of text and numbers (the logs'
absl lines: `I1127 12:00:00.123 ... ] frames N (`, `training from X to B environment frames`,
`stopped at N environment frames (frame budget reached)`).
"""

import os
import re

import numpy as np

from bench import cluster
from evaluation import EVAL_SUBDIR
from tools import summary_reader

BUDGET_REACHED = re.compile(r"stopped at (\d+) environment frames \(frame budget reached\)")
TRAINING_FROM = re.compile(r"training from (\d+) to \d+ environment frames")
# A checkpoint is written some seconds after its moment comes (the step in flight, the save):
# so much more training than --checkpoint_secs may be lost.
SAVE_SLACK_SECS = 5
EVALUATION_TAG = "eval/return_mean"
GAMES = 20  # The learning bar's window of training games.


def budget_frames(log):
    """The frames at which the learner of `log` stopped at its budget, or None."""
    found = BUDGET_REACHED.search(log)
    return int(found.group(1)) if found else None


def last_frames(log):
    """The global frames of rank 0's last progress line in `log`, or 0."""
    points = cluster.progress_points(log)
    return points[-1][1] if points else 0


def frames_lost(log_before, log_after, fault_unix, checkpoint_secs, log_secs):
    """(lost, allowed, resumed) frames of one restart of the learners, or None if the log after
    the fault shows no restart (yet).

    lost: rank 0's last progress frames before the fault minus the frames the restarted
    learners trained from; allowed: the frames rank 0 logged over the last checkpoint interval
    before the fault (--checkpoint_secs, plus the progress lines' period and the save's time),
    i.e. one checkpoint interval of training.
    """
    resumed = TRAINING_FROM.search(log_after)
    if not resumed:
        return None
    points = cluster.progress_points(log_before)
    last = points[-1][1] if points else 0
    since = fault_unix - checkpoint_secs - log_secs - SAVE_SLACK_SECS
    earlier = [frames for unix, frames in points if unix <= since]
    allowed = last - (earlier[-1] if earlier else 0)
    return last - int(resumed.group(1)), allowed, int(resumed.group(1))


def learning(logdir, level_name):
    """(mean return of the last GAMES training games or None, the evaluator's last
    eval/return_mean or None)."""
    games = summary_reader.episode_returns(logdir, level_name)
    training = float(np.mean([r for _, r in games[-GAMES:]])) if games else None
    evaluations = summary_reader.scalars(os.path.join(logdir, EVAL_SUBDIR), EVALUATION_TAG)
    return training, (evaluations[-1][1] if evaluations else None)


def learned(training, evaluation, bar):
    """The learning bar: the last training games' mean above `bar`, or the final evaluation at
    least `bar`."""
    return (training is not None and training > bar) or (
        evaluation is not None and evaluation >= bar
    )


def frontend_errors(output, last_lines=10):
    """The frontend's `output` lines that say why the run ended: its error lines (a worker's
    `error:` may lie above a long traceback) and its `last_lines`."""
    lines = output.splitlines()
    return [line for line in lines[:-last_lines] if "error:" in line] + lines[-last_lines:]
