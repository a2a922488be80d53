"""Two configurations of the main job's shape on this host, raced in one run: B's frames/s
over A's.

  .venv/bin/python -m bench.system_ab --b=intra_op_threads=2 [--b=...] [--rounds=6]
      [--window_secs=45] [training flags]

A is the training flags given (Pong's defaults by default); B is A with each --b NAME=VALUE on
top, checked as the training flags are before anything starts. Both systems (one learner and
--actors actors each, on loopback) start together and warm up side by side. Then each round
has two windows in turn, their order alternating from round to round: A alone and B alone,
the other system stopped (SIGSTOP, so it takes no CPU). A machine's speed drifts within
minutes (bench/README.md), so only windows seconds apart are compared.
Printed: each round's frames/s of A and B and their ratio B / A, the median ratio, and last
one JSON line.
"""

import json
import statistics
import tempfile
import time

from absl import app, flags

import config as config_lib
from bench import cluster
from tools import local_cluster

flags.DEFINE_multi_string(
    "b", [], "A training flag of configuration B, as NAME=VALUE (repeatable); B is A with these."
)
flags.DEFINE_integer("actors", 2, "Actors of each system (one learner each).")
flags.DEFINE_integer("rounds", 6, "Rounds of two windows (A alone, B alone).")
flags.DEFINE_integer("window_secs", 45, "Seconds of each window.")
flags.DEFINE_integer("warmup_secs", 90, "Seconds both systems train side by side first.")
FLAGS = flags.FLAGS

_SETTLE_SECS = 5  # After a system is resumed, before its window opens.
_STARTUP_TIMEOUT_SECS = 900


def training_flags(args):
    """absl FlagValues of the training flags alone, parsed from `args` (`--name=value` each)
    and checked as a worker checks them; raises flags.Error naming the flag at fault."""
    values = flags.FlagValues()
    config_lib.define_flags(values)
    values(["system_ab", *args])
    return values


@flags.validator("b")
def _check_b(settings):
    for setting in settings:
        if setting.split("=", 1)[0] not in config_lib.NAMES or "=" not in setting:
            raise flags.ValidationError(f"--b={setting}: not NAME=VALUE of a training flag")
        try:
            training_flags([f"--{setting}"])
        except flags.Error as error:
            raise flags.ValidationError(f"--b={setting}: {error}") from None
    return True


def b_config(a_flag_args, b_settings):
    """Configuration B's Config: the flags `a_flag_args` (`--name=value`) with `b_settings`
    (NAME=VALUE each) on top."""
    return config_lib.from_flags(training_flags([*a_flag_args, *(f"--{s}" for s in b_settings)]))


def start_system(name, flag_args, run_dir):
    """One learner and --actors actors on `flag_args`, their logdir and logs under `run_dir`."""
    flag_args = [*flag_args, f"--logdir={run_dir}/{name}"]
    return local_cluster.WorkerSets(1, FLAGS.actors, flag_args, f"{run_dir}/{name}_logs")


def window(running, stopped):
    """Frames/s of `running` (a WorkerSets) in one window, `stopped` paused meanwhile."""
    stopped.pause()
    running.resume()
    return cluster.window_rate(running, FLAGS.window_secs, _SETTLE_SECS)


def race(systems):
    """--rounds rounds over `systems` ({"A": WorkerSets, "B": ...}) -> [{"A": frames/s, "B":
    frames/s} per round], printing each."""
    rounds = []
    for index in range(FLAGS.rounds):
        order = ("A", "B") if index % 2 == 0 else ("B", "A")
        rates = {}
        for name in order:
            other = systems["B" if name == "A" else "A"]
            rates[name] = window(systems[name], other)
        rounds.append(rates)
        print(
            f"round {index + 1}: frames/s A {rates['A']:.0f}, B {rates['B']:.0f}: "
            f"B / A {rates['B'] / rates['A']:.3f}",
            flush=True,
        )
    return rounds


def main(argv):
    del argv
    a_config = config_lib.from_flags(FLAGS)
    a_args = cluster.worker_flags(a_config, log_secs=5)
    b_args = cluster.worker_flags(b_config(a_args, FLAGS.b), log_secs=5)
    print(f"B: A with {' '.join(FLAGS.b) or 'nothing changed'}", flush=True)
    print(f"load before: {cluster.wait_for_quiet_machine()}", flush=True)
    with (
        tempfile.TemporaryDirectory(prefix="system_ab_") as run_dir,
        start_system("a", a_args, run_dir) as system_a,
        start_system("b", b_args, run_dir) as system_b,
    ):
        for system in (system_a, system_b):
            system.learners.wait_for_log("] frames", timeout=_STARTUP_TIMEOUT_SECS)
        time.sleep(FLAGS.warmup_secs)
        rounds = race({"A": system_a, "B": system_b})
    ratios = [r["B"] / r["A"] for r in rounds]
    print(
        f"median B / A: {statistics.median(ratios):.3f} (rounds {min(ratios):.3f}-"
        f"{max(ratios):.3f}); frames/s A {statistics.median(r['A'] for r in rounds):.0f}, "
        f"B {statistics.median(r['B'] for r in rounds):.0f}"
    )
    print(json.dumps({"b": FLAGS.b, "ratio": statistics.median(ratios), "rounds": rounds}))
    return 0


if __name__ == "__main__":
    app.run(main)
