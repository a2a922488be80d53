"""Replay samplings side by side on one Atari game (issue 51): curves and timing, one run at a time.

  .venv/bin/python -m bench.replay --game=Breakout --methods=uniform,prioritized,elite,attentive \
      [--frames=2000000] [--elite_strategy=N] [--output_dir=DIR] [--docs_dir=DIR] [--curves_only]

(from the repository root). Each method in turn trains the real system, 1 learner and --actors
(2) actors of experiment.py on loopback (bench/runs.py, as bench.learning's runs), with the
suite's settings for the game (bench/atari_suite.py: the defaults) and --replay_sampling=<method>,
to --frames, in a run directory of its own in --output_dir; the runner samples the learner's CPU
time meanwhile (bench/replay_timing.py). As each run ends it writes, to be committed at once,
--docs_dir/replay/<Game>-<method>.csv (the curve, bench.learning's docs format) and .json (its
timing figures), then rebuilds the table --docs_dir/replay_results.csv from every curve there
(bench/replay_results.py); a run cut short (a failure, SIGTERM) is written too, as far as it got,
marked partial. It never writes docs/atari/ or the suite's table: those curves are the defaults'
alone. `elite` runs with --elite_strategy (--replay_elite_strategy), named
`elite<N>`. `--curves_only` trains nothing: it writes the files of each method's newest run
directory as far as it got (partial if short of its budget), e.g. of a run still going.

Before each run it waits (at most --load_wait_secs) for the 1-minute load average to drop below
--max_load: never time a run beside another heavy process; the load before and during each run
are in its figures. Every other training flag is forwarded to the workers of every run.
Printed: the table and, last, one JSON line.
"""

import contextlib
import json
import os

from absl import app, flags

import config as config_lib
import environments
import replay
from bench import atari_curves, atari_suite, cluster, replay_results, replay_timing, runs
from tools import curves, local_cluster

flags.DEFINE_string("game", "Breakout", f"The Atari game, one of {', '.join(atari_suite.PPO)}.")
flags.DEFINE_list(
    "methods",
    list(replay_results.METHODS),
    f"The --replay_sampling values to run, in this order: any of {replay_results.METHODS}.",
)
flags.DEFINE_integer("frames", 2_000_000, "Each run's frame budget.")
flags.DEFINE_alias("elite_strategy", "replay_elite_strategy")
flags.DEFINE_integer("actors", 2, "Actors of each run (one learner).")
flags.DEFINE_string("output_dir", "/tmp/impala_bench_replay", "The runs' directories and logs.")
flags.DEFINE_float(
    "skip_secs", 120.0, "Seconds after the learner's first progress line not timed (start-up)."
)
flags.DEFINE_float("sample_secs", 10.0, "Seconds between samples of the learner's CPU time.")
flags.DEFINE_bool(
    "curves_only",
    False,
    "Train nothing: write the curve, timing and table of each method's newest run directory in "
    "--output_dir as far as it got (partial unless it reached its budget).",
)
FLAGS = flags.FLAGS
# Set by --game, --frames and --methods: given as training flags too, they would contradict them.
RUN_FLAGS = ("level_name", "total_environment_frames", "replay_sampling")


def method_config(method):
    """The Config of `method`'s run: the game's suite settings, the budget and the sampling, the
    training flags given on the command line over them."""
    settings = {
        **atari_suite.settings(FLAGS.game),
        "total_environment_frames": FLAGS.frames,
        "replay_sampling": method,
    }
    return config_lib.configure({**settings, **config_lib.given_flags(FLAGS)})


def run_name(method_label):
    """The run directories' name of `method_label` on --game, e.g. breakout_elite2."""
    return f"{atari_suite.run_name(FLAGS.game)}_{method_label}"


def newest_run_dir(name):
    """--curves_only: the newest run directory of `name` in --output_dir."""
    run_dir = runs.newest_run_dir(FLAGS.output_dir, name)
    if run_dir is None:
        raise app.UsageError(f"--curves_only: no {name} run directory in {FLAGS.output_dir}")
    return run_dir


def train(run_dir, config):
    """Trains `config`'s run in `run_dir` to its budget, sampling the learner meanwhile."""
    sampler = replay_timing.Sampler(run_dir, cluster.wait_for_quiet_machine())
    runs.train(run_dir, config, 1, FLAGS.actors, watch=sampler, watch_secs=FLAGS.sample_secs)


def measure(method, provenance):
    """Runs `method` (or takes its newest run, --curves_only) and keeps it in --docs_dir
    (keep()); returns its result for the JSON line. A run cut short (a failure, SIGTERM at the
    sitting's end) is kept as far as it got, partial, before the error goes on."""
    config = method_config(method)
    method_label = replay_results.label(method, config.replay_elite_strategy)
    name = run_name(method_label)
    if FLAGS.curves_only:
        return keep(newest_run_dir(name), name, method_label, config, provenance)
    run_dir = runs.new_run_dir(FLAGS.output_dir, name)
    try:
        train(run_dir, config)
    except BaseException:
        with contextlib.suppress(curves.CurvesError):  # no game finished yet: nothing to keep
            keep(run_dir, name, method_label, config, provenance)
        raise
    return keep(run_dir, name, method_label, config, provenance)


def keep(run_dir, name, method_label, config, provenance):
    """Writes the curve and timing of the run `name` in `run_dir` to --docs_dir/replay/, then
    rebuilds the table; returns the run's result for the JSON line."""
    run = curves.read_run(os.path.join(run_dir, "logdir"), name, config.level_name)
    budget, batch = config.total_environment_frames, runs.batch_frames(config, 1)
    curve = atari_curves.of_run(run, FLAGS.game, budget, batch)
    timing = replay_timing.figures(
        run_dir,
        environments.action_repeat(config.level_name),
        replay.uses_per_agent_step(config),
        FLAGS.skip_secs,
    )
    csv_path = replay_results.curve_path(FLAGS.docs_dir, FLAGS.game, method_label)
    given = config_lib.given_flags(FLAGS)
    replay_results.write(csv_path, curve, provenance, {**timing, "flags": given})
    replay_results.rebuild(FLAGS.docs_dir)
    print(f"\n{method_label}: {run.frames():,} frames, {csv_path}", flush=True)
    return {
        "method": method_label,
        "frames": run.frames(),
        "complete": curve.complete,
        "csv": csv_path,
        "logs": run_dir,
        **timing,
    }


def check_flags():
    """Raises app.UsageError for a game not in the suite, an unknown method, or a training flag
    that --game, --frames or --methods set."""
    if FLAGS.game not in atari_suite.PPO:
        raise app.UsageError(f"--game: {FLAGS.game} is not one of {', '.join(atari_suite.PPO)}")
    unknown = sorted(set(FLAGS.methods) - set(replay_results.METHODS))
    if unknown or not FLAGS.methods:
        raise app.UsageError(f"--methods: none, or unknown {', '.join(unknown)}")
    contradicting = sorted(set(RUN_FLAGS) & set(config_lib.given_flags(FLAGS)))
    if contradicting:
        raise app.UsageError(f"--{', --'.join(contradicting)}: set by --game, --frames, --methods")


def main(argv):
    del argv
    check_flags()
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    local_cluster.exit_cleanly_on_termination()
    # The code the runs train with, taken before a curve changes the tree.
    provenance = atari_curves.provenance(local_cluster.REPO)
    results = [measure(method, provenance) for method in FLAGS.methods]
    print(f"\nThe replay samplings ({FLAGS.docs_dir}/{replay_results.TABLE}):\n")
    print(replay_results.table(replay_results.read_rows(FLAGS.docs_dir)))
    print(json.dumps({"game": FLAGS.game, "budget": FLAGS.frames, "results": results}))


if __name__ == "__main__":
    app.run(main)
