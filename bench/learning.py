"""Learning curves: environment frames vs. episode return, for CartPole and Pong.

  .venv/bin/python -m bench.learning [--runs=cartpole,pong] [--quick] [--output_dir=DIR]

(from the repository root: `-m` puts it on sys.path for `bench`). Each run trains the
real system (one learner and --actors actors of experiment.py on loopback) to its frame budget,
then reads the per-game returns the learner wrote to TensorBoard and writes, to --output_dir,
`<run>.csv` (frames, episode_return, mean_return_100) and `<run>.png` (returns and the policy's
entropy against frames, drawn by tools/curves.py). Printed: a table and, last, one JSON line.
`--resume` continues an interrupted run from its checkpoint: the learner restores the frame count
(the replay memory refills), and the curve reads the summaries of all parts. `--curves_only`
trains nothing: it writes the CSV and PNG of each run's newest run directory as far as it got (a
run still going, or one stopped before its budget).

  cartpole        CartPole-v1 on the vector family's defaults alone (config.VECTOR_DEFAULTS:
                  MLPAgent, ...), 500K frames (= agent steps): the frames at which the mean
                  return over the last 100 games first reaches 475 (target: within the budget).
  pong            PongNoFrameskip-v4, SimpleConvNetAgent, the default settings (replay ratio
                  3 with the clipped surrogate), 10M frames (2.5M agent steps, hours here): the
                  mean return of the last 100 games (target: >= +18). --quick trains 500K
                  frames instead, to check the whole path in a few minutes.
  breakout, space_invaders, beam_rider, qbert, seaquest
                  the other games of the Atari suite, each as `pong` with its own level
                  (target: PPO's return at 10M frames, bench/atari_suite.py).
  atari           all six, one after the other; then the suite's table (the mean of the last
                  100 games at 2.5M, 5M and 10M frames) as printed text, a CSV (--results_csv)
                  and a grid figure (--grid_png).
  pong_no_replay  the same without replay (each frame learned from once).
  pong_2_learners the main job's shape: 2 learners (Horovod ranks) of one actor each, each
                  learner's batch 1 on-policy + 3 replayed unrolls, so that the global batch
                  is `pong`'s, and so are its updates (4 per batch, each on 2 unrolls: one
                  of each learner's, their gradients summed); 5M frames.

The run's settings below apply unless the flag is given on the command line: every training
flag (the fields of config.Config) is accepted and forwarded to the workers of every run. The
settings a run leaves out take the defaults of its level's environment family (config.py).
"""

import dataclasses
import glob
import json
import os
import tempfile
import time

import numpy as np
from absl import app, flags

import config as config_lib
from bench import atari_suite, cluster
from tools import curves, local_cluster

# Every Atari run: the defaults (config.Config: PPO's Atari recipe on this learner, replay ratio
# 3 with the clipped surrogate, 64-step updates), the same for every game.
ATARI_SETTINGS = {
    "agent_name": "SimpleConvNetAgent",
    "num_envs_per_actor": 8,
    "total_environment_frames": 10_000_000,
}
ATARI_RUNS = {
    atari_suite.run_name(game): {
        "settings": {**ATARI_SETTINGS, "level_name": atari_suite.level_name(game)},
        "quick_frames": 500_000,
        "target": bar,
        "game": game,
    }
    for game, bar in atari_suite.BARS.items()
}
PONG_SETTINGS = ATARI_RUNS["pong"]["settings"]
RUNS = {
    # The level and budget only: what the vector family's defaults learn by themselves.
    "cartpole": {
        "settings": {"level_name": "CartPole-v1", "total_environment_frames": 500_000},
        "quick_frames": 500_000,  # already short: the target needs the whole budget
        "target": 475.0,
    },
    **ATARI_RUNS,
    # The same without replay, each frame learned from once: what replay buys (issue 14's
    # comparison). --policy_clip stays: with one use per frame it only bounds the policy lag.
    "pong_no_replay": {
        "settings": {**PONG_SETTINGS, "replay_size": 0},
        "quick_frames": 500_000,
        "target": 18.0,
    },
    # Horovod sums the learners' gradients: with --batch_size per learner halved, two learners
    # make the one learner's updates (64 steps, 2 unrolls) at its rate.
    "pong_2_learners": {
        "settings": {**PONG_SETTINGS, "batch_size": 1, "total_environment_frames": 5_000_000},
        "learners": 2,
        "quick_frames": 500_000,
        "target": 18.0,
    },
}
flags.DEFINE_list(
    "runs",
    ["cartpole", "pong"],
    f"Any of {', '.join(RUNS)}; `atari`: the Atari suite's games ({', '.join(ATARI_RUNS)}).",
)
flags.DEFINE_bool(
    "quick", False, f"The Atari runs train {RUNS['pong']['quick_frames']:,} frames only."
)
flags.DEFINE_string(
    "results_csv",
    None,
    "Where the Atari suite's table goes as CSV (default: --output_dir/atari_results.csv).",
)
flags.DEFINE_string(
    "grid_png",
    None,
    "Where the Atari suite's grid figure goes (default: --output_dir/atari_suite.png).",
)
flags.DEFINE_integer("actors", 2, "Actors of each run, dealt round-robin to its learners.")
flags.DEFINE_string("output_dir", "/tmp/impala_bench_learning", "CSV, PNG and the workers' logs.")
flags.DEFINE_bool(
    "resume",
    False,
    "Continue each run's newest run directory in --output_dir from its last checkpoint (e.g. "
    "after the machine rebooted mid-run) instead of starting a fresh one.",
)
flags.DEFINE_bool(
    "curves_only",
    False,
    "Train nothing: write the CSV and PNG of each run's newest run directory in --output_dir "
    "from the summaries it has so far.",
)
FLAGS = flags.FLAGS


def run_config(name):
    """The run's Config: its settings over the defaults of its level's environment family,
    flags given on the command line over both; and the run's settings that applied."""
    settings = dict(RUNS[name]["settings"])
    if FLAGS.quick:
        settings["total_environment_frames"] = RUNS[name]["quick_frames"]
    given = config_lib.given_flags(FLAGS)
    settings = {key: value for key, value in settings.items() if key not in given}
    return config_lib.configure({**settings, **given}), settings


def train(run_dir, config, num_learners):
    """Trains `num_learners` learners and --actors actors to the frame budget; returns the wall
    time and the logdir."""
    logdir = os.path.join(run_dir, "logdir")
    flag_args = cluster.worker_flags(config, logdir=logdir)
    # Generous: Pong with replay ratio 3 runs at ~900 frames/s here.
    timeout_secs = 600 + config.total_environment_frames / 300
    start = time.monotonic()
    with local_cluster.WorkerSets(num_learners, FLAGS.actors, flag_args, run_dir) as workers:
        exit_code = workers.learners.wait(timeout=timeout_secs)
        if exit_code != 0:
            raise RuntimeError(f"learner exited with {exit_code}; see {workers.learners_log}")
    return time.monotonic() - start, logdir


def first_frames_at(points, target):
    """Frames at which the mean over a full window of games first reaches `target`, or None.

    points: [N, 3] of curves.RunCurves.returns."""
    window = curves.WINDOW
    reached = np.nonzero(points[window - 1 :, 2] >= target)[0]
    return int(points[window - 1 + reached[0], 0]) if len(reached) else None


def newest_run_dir(name):
    """The most recently started run directory of `name` in --output_dir, or None."""
    # mkdtemp's names: the prefix `<name>_` and 8 random characters ("pong_*" alone would also
    # match pong_no_replay's).
    run_dirs = [
        os.path.dirname(logdir)
        for logdir in glob.glob(os.path.join(FLAGS.output_dir, f"{name}_*", "logdir"))
        if len(os.path.basename(os.path.dirname(logdir))) == len(name) + 1 + 8
    ]
    return max(run_dirs, key=os.path.getctime) if run_dirs else None


def benchmark(name):
    """Trains the run to its budget (or, with --curves_only, takes its newest run directory as it
    is), writes its CSV and PNG; returns its figures and its curves.RunCurves."""
    config, settings = run_config(name)
    num_learners = RUNS[name].get("learners", 1)
    run_dir = newest_run_dir(name) if FLAGS.resume or FLAGS.curves_only else None
    if FLAGS.curves_only:
        if run_dir is None:
            raise app.UsageError(f"--curves_only: no {name} run directory in {FLAGS.output_dir}")
        load_average, wall_secs, logdir = None, None, os.path.join(run_dir, "logdir")
    else:
        if run_dir is None:
            run_dir = tempfile.mkdtemp(prefix=f"{name}_", dir=FLAGS.output_dir)
        load_average = cluster.wait_for_quiet_machine()
        wall_secs, logdir = train(run_dir, config, num_learners)
    level_name = config.level_name
    run = curves.read_run(logdir, name, level_name)
    points = run.returns
    csv_path = os.path.join(FLAGS.output_dir, f"{name}.csv")
    np.savetxt(
        csv_path,
        points,
        fmt=["%d", "%g", "%.3f"],
        delimiter=",",
        header="frames,episode_return,mean_return_100",
        comments="",
    )
    target = RUNS[name]["target"]
    budget = config.total_environment_frames
    frames = int(points[-1, 0])  # at the last game: the budget, unless the run stopped early
    curves.draw(
        [run],
        os.path.join(FLAGS.output_dir, f"{name}.png"),
        title=f"{level_name}, {config.agent_name}, {frames:,} of {budget:,} frames",
        target=target,
    )
    return {
        "run": name,
        "level_name": level_name,
        "learners": num_learners,
        "frames": frames,
        "budget": budget,
        "load_average": load_average,
        "wall_secs": wall_secs,
        "games": len(points),
        "final_mean_return_100": float(points[-1, 2]),
        "target": target,
        "frames_to_target": first_frames_at(points, target),
        "csv": csv_path,
        "logs": run_dir,
        "settings": settings,
        "defaults": config_lib.defaults_line(config),
    }, run


def write_suite(runs):
    """Prints the Atari suite's table of `runs` (RunCurves named by game) and writes its CSV and
    grid figure."""
    rows = atari_suite.summary(runs)
    csv_path = FLAGS.results_csv or os.path.join(FLAGS.output_dir, "atari_results.csv")
    grid_path = FLAGS.grid_png or os.path.join(FLAGS.output_dir, "atari_suite.png")
    atari_suite.write_csv(rows, csv_path)
    atari_suite.draw(runs, grid_path)
    print("\nAtari suite: the mean return of the last 100 games at each budget\n")
    print(atari_suite.table(rows))
    print(f"table: {csv_path}; figure: {grid_path}")


def main(argv):
    del argv
    unknown = sorted(set(FLAGS.runs) - set(RUNS) - {"atari"})
    if unknown:
        raise app.UsageError(f"--runs: unknown {', '.join(unknown)}; valid: {', '.join(RUNS)}")
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    local_cluster.exit_cleanly_on_termination()
    names = [n for name in FLAGS.runs for n in (ATARI_RUNS if name == "atari" else [name])]
    measured = [benchmark(name) for name in names]
    results = [result for result, _ in measured]
    print(
        f"\n{'run':<16}{'frames':>12}{'load':>6}{'minutes':>9}{'games':>7}"
        f"{'mean return (last 100)':>24}{'target':>8}{'frames to target':>18}"
    )
    for r in results:
        reached = f"{r['frames_to_target']:,}" if r["frames_to_target"] else "not reached"
        # --curves_only measured no load or time.
        load = "-" if r["load_average"] is None else f"{r['load_average']:.2f}"
        minutes = "-" if r["wall_secs"] is None else f"{r['wall_secs'] / 60:.1f}"
        print(
            f"{r['run']:<16}{r['frames']:>12,}{load:>6}{minutes:>9}{r['games']:>7}"
            f"{r['final_mean_return_100']:>24.2f}{r['target']:>8g}{reached:>18}"
        )
    print(f"curves: {FLAGS.output_dir}/<run>.csv and .png")
    suite = [
        dataclasses.replace(run, name=ATARI_RUNS[result["run"]]["game"])
        for result, run in measured
        if result["run"] in ATARI_RUNS
    ]
    if suite:
        write_suite(suite)
    print(json.dumps({"quick": FLAGS.quick, "results": results}))


if __name__ == "__main__":
    app.run(main)
