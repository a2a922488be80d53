"""The evaluator's cost to training's frames/s, measured in one run.

  .venv/bin/python -m bench.evaluator_cost [--rounds=4] [--window_secs=60] [training flags]

The main job's shape on this host (one learner, two actors, Pong by default) with an evaluator
that plays without a pause (--eval_interval_frames=1: a new evaluation as soon as the last one
ends, the most an evaluator can take). Each round has two windows in turn, their order
alternating from round to round: the evaluator running, and the evaluator stopped (SIGSTOP,
so it takes no CPU). Printed: each window's frames/s, each round's ratio running / stopped,
and their median (the target: at least 0.95).
"""

import json
import signal
import statistics
import tempfile
import time

from absl import app, flags

import config as config_lib
from bench import cluster
from tools import local_cluster

flags.DEFINE_integer("rounds", 4, "Rounds of two windows (evaluator running, stopped).")
flags.DEFINE_integer("window_secs", 60, "Seconds of each window.")
flags.DEFINE_integer("warmup_secs", 120, "Seconds of training before the first window.")
FLAGS = flags.FLAGS

_SETTLE_SECS = 5  # After the evaluator is stopped or resumed, before a window opens.


def _signal_evaluator(workers, signum):
    for process in local_cluster.experiment_processes(workers.evaluator.popen.pid):
        process.send_signal(signum)


def _window(workers, evaluating):
    """Frames/s of one window with the evaluator running (`evaluating`) or stopped."""
    _signal_evaluator(workers, signal.SIGCONT if evaluating else signal.SIGSTOP)
    return cluster.window_rate(workers, FLAGS.window_secs, _SETTLE_SECS)


def main(argv):
    del argv
    config = config_lib.from_flags(FLAGS)
    flag_args = cluster.worker_flags(config, eval_interval_frames=1, log_secs=5)
    print(f"load before: {cluster.wait_for_quiet_machine()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="evaluator_cost_") as run_dir:
        flag_args.append(f"--logdir={run_dir}/logdir")
        with local_cluster.WorkerSets(1, 2, flag_args, run_dir, evaluator=True) as workers:
            workers.learners.wait_for_log("] frames", timeout=600)
            workers.evaluator.wait_for_log("connected to learner", timeout=600)
            time.sleep(FLAGS.warmup_secs)
            rounds = []
            for index in range(FLAGS.rounds):
                order = (True, False) if index % 2 == 0 else (False, True)
                rates = {evaluating: _window(workers, evaluating) for evaluating in order}
                rounds.append(rates)
                print(
                    f"round {index + 1}: frames/s {rates[True]:.0f} with the evaluator, "
                    f"{rates[False]:.0f} without: {rates[True] / rates[False]:.3f}",
                    flush=True,
                )
            _signal_evaluator(workers, signal.SIGCONT)
            evaluations = workers.evaluator.log().count("environment frames (parameters")
    ratio = statistics.median(r[True] / r[False] for r in rounds)
    print(f"median with / without the evaluator: {ratio:.3f} ({evaluations} evaluations)")
    print(json.dumps({"ratio": ratio, "evaluations": evaluations, "rounds": len(rounds)}))
    return 0


if __name__ == "__main__":
    app.run(main)
