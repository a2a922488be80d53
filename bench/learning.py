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
run still going, or one stopped before its budget). SIGTERM or SIGHUP stops the workers, writes the
stopped run's curves as far as it got, as --curves_only would, and runs no further run.

A game of the Atari suite (below) also writes, as its run ends, its curve to
--docs_dir/atari/<Game>.csv (the repository's docs/; bench/atari_curves.py: complete if the run
reached its budget within one batch, else partial, e.g. with --curves_only on a run still going),
to be committed at once, and rebuilds the suite's table and figure from every game's curve there
(bench/atari_suite.py; `python -m bench.atari_suite` rebuilds them alone). --quick writes none.
An A/B run of a game (`--ab=<change> <its flags>`, often with `--stop_at_frames` to cut it short
on the budget's schedule) writes its curve to --docs_dir/atari/ab/<Game>-<change>.csv instead,
the flags given on its comment line, and leaves the suite's table alone.

  cartpole        CartPole-v1 on the vector family's defaults alone (config.VECTOR_DEFAULTS:
                  MLPAgent, ...), 500K frames (= agent steps): the frames at which the mean
                  return over the last 100 games first reaches 475 (target: within the budget).
  pong            PongNoFrameskip-v4, SimpleConvNetAgent, the default settings (replay ratio
                  2 with the clipped surrogate), 10M frames (2.5M agent steps, hours here): the
                  mean return of the last 100 games (target: >= +18). --quick trains 500K
                  frames instead, to check the whole path in a few minutes.
  breakout, space_invaders, beam_rider, qbert, seaquest
                  the other games of the Atari suite, each as `pong` with its own level
                  (target: PPO's return at 10M frames, bench/atari_suite.py; the figure
                  marks PPO's returns at 5M and 10M).
  atari           all six, one after the other; then the suite's table (the mean of the last
                  100 games at 2.5M, 5M and 10M frames) printed, and in --docs_dir.
  pong_no_replay  the same without replay (each frame learned from once).
  pong_2_learners the main job's shape: 2 learners (Horovod ranks) of one actor each, each
                  learner's batch 1 on-policy + 1 replayed unroll, so that the global batch
                  is `pong`'s, and so are its updates (2 per batch, each on 2 unrolls: one
                  of each learner's, their gradients summed); 5M frames.

The run's settings below apply unless the flag is given on the command line: every training
flag (the fields of config.Config) is accepted and forwarded to the workers of every run. The
settings a run leaves out take the defaults of its level's environment family (config.py).
"""

import json
import os

from absl import app, flags

import config as config_lib
from bench import atari_curves, atari_suite, cluster, runs
from tools import curves, local_cluster

ATARI_RUNS = {
    atari_suite.run_name(game): {
        "settings": atari_suite.settings(game),
        "quick_frames": 500_000,
        "target": ppo[10_000_000],
        "game": game,
    }
    for game, ppo in atari_suite.PPO.items()
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
    "from the summaries it has so far (and an Atari game's curve in --docs_dir, partial unless "
    "the run reached its budget).",
)
flags.DEFINE_integer(
    "stop_at_frames",
    None,
    "Stop each run at this many frames, its learning-rate schedule still the budget's: a short "
    "A/B run (needs --ab; its curve is partial).",
    lower_bound=1,
)
flags.DEFINE_string(
    "ab",
    None,
    "The name of an A/B change (e.g. queue2, given with its flags): an Atari game's curve goes to "
    "--docs_dir/atari/ab/<Game>-<name>.csv, its flags on its comment line, and the suite's table "
    "is left alone.",
)
flags.register_validator(
    "ab", lambda name: name is None or name.isidentifier(), "--ab: letters, digits and _ only"
)
flags.register_multi_flags_validator(
    ["stop_at_frames", "ab"],
    lambda given: given["stop_at_frames"] is None or given["ab"] is not None,
    "--stop_at_frames: give --ab too, so that the partial curve does not replace the suite's",
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


def run_logdir(name, config, num_learners, as_it_is):
    """Trains the run to its budget in a new run directory (with --resume: in its newest one), or,
    `as_it_is`, takes its newest run directory as it is; returns its logdir, the run directory,
    the load average before training and the wall time (None when `as_it_is`)."""
    run_dir = runs.newest_run_dir(FLAGS.output_dir, name) if FLAGS.resume or as_it_is else None
    if as_it_is:
        if run_dir is None:
            raise app.UsageError(f"--curves_only: no {name} run directory in {FLAGS.output_dir}")
        return os.path.join(run_dir, "logdir"), run_dir, None, None
    if run_dir is None:
        run_dir = runs.new_run_dir(FLAGS.output_dir, name)
    load_average = cluster.wait_for_quiet_machine()
    wall_secs, logdir = runs.train(
        run_dir, config, num_learners, FLAGS.actors, stop_at_frames=FLAGS.stop_at_frames
    )
    return logdir, run_dir, load_average, wall_secs


def figure_marks(name):
    """(target, reference) of the run's figure: an Atari game's own PPO returns at 5M and 10M
    frames (a curves.Reference), any other run's target line."""
    if name in ATARI_RUNS:
        return None, atari_suite.reference(ATARI_RUNS[name]["game"])
    return RUNS[name]["target"], None


def benchmark(name, as_it_is):
    """Trains the run to its budget (or, `as_it_is`, takes its newest run directory as it is),
    writes its CSV and PNG; returns its figures and its curves.RunCurves."""
    config, settings = run_config(name)
    num_learners = RUNS[name].get("learners", 1)
    logdir, run_dir, load_average, wall_secs = run_logdir(name, config, num_learners, as_it_is)
    level_name = config.level_name
    run = curves.read_run(logdir, name, level_name)
    points = run.returns
    csv_path = os.path.join(FLAGS.output_dir, f"{name}.csv")
    curves.write_csv(points, csv_path)
    budget, frames = config.total_environment_frames, run.frames()
    batch = runs.batch_frames(config, num_learners)
    target, reference = figure_marks(name)
    curves.draw(
        [run],
        os.path.join(FLAGS.output_dir, f"{name}.png"),
        title=f"{level_name}, {config.agent_name}, {frames:,} of {budget:,} frames",
        target=target,
        reference=reference,
    )
    return {
        "run": name,
        "level_name": level_name,
        "learners": num_learners,
        "frames": frames,
        "budget": budget,
        "batch_frames": batch,
        "complete": atari_curves.reaches(frames, budget, batch),
        "load_average": load_average,
        "wall_secs": wall_secs,
        "games": len(points),
        "final_mean_return_100": float(points[-1, 2]),
        "target": RUNS[name]["target"],
        "frames_to_target": curves.first_frames_at(points, RUNS[name]["target"]),
        "csv": csv_path,
        "logs": run_dir,
        "settings": settings,
        "defaults": config_lib.defaults_line(config),
    }, run


def benchmark_until_stopped(name):
    """benchmark(name, --curves_only) and None; if SIGTERM or SIGHUP stops its training: the
    stopped run's figures and curve as far as it got (as --curves_only writes them; None, None if
    no game had ended) and the local_cluster.TerminatedError to exit with."""
    try:
        return *benchmark(name, FLAGS.curves_only), None
    except local_cluster.TerminatedError as stopped:
        try:
            return *benchmark(name, as_it_is=True), stopped
        except curves.CurvesError as error:
            print(f"{name}: stopped before a game ended ({error})")
            return None, None, stopped


def keep_in_docs(result, run, provenance):
    """Writes the Atari game's curve of `result` (of benchmark()) and its curves.RunCurves `run`
    to --docs_dir/atari/<Game>.csv, its comment line led by `provenance`; then rebuilds the suite's
    table and figure from every game's curve there. Returns the table's rows. With --ab, writes
    the curve to the A/B's path instead, its settings in its comment line; returns None."""
    game = ATARI_RUNS[result["run"]]["game"]
    curve = atari_curves.of_run(run, game, result["budget"], result["batch_frames"])
    if FLAGS.ab:
        given = config_lib.given_flags(FLAGS)
        changes = " ".join(f"--{name}={value}" for name, value in given.items())
        path = atari_curves.ab_path(FLAGS.docs_dir, game, FLAGS.ab)
        atari_curves.write(curve, path, f"{provenance}, A/B {FLAGS.ab}: {changes}")
        print(f"A/B curve: {path}")
        return None
    atari_curves.write(curve, atari_curves.path(FLAGS.docs_dir, game), provenance)
    return atari_suite.rebuild(FLAGS.docs_dir)


def print_results(results):
    """Prints the table of the runs' `results` (of benchmark())."""
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


def main(argv):
    del argv
    unknown = sorted(set(FLAGS.runs) - set(RUNS) - {"atari"})
    if unknown:
        raise app.UsageError(f"--runs: unknown {', '.join(unknown)}; valid: {', '.join(RUNS)}")
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    local_cluster.exit_cleanly_on_termination()
    names = [n for name in FLAGS.runs for n in (ATARI_RUNS if name == "atari" else [name])]
    # --quick only checks the path: its curves are no results.
    keeps = not FLAGS.quick and any(name in ATARI_RUNS for name in names)
    # The code the runs train with, taken before a game's curve changes the tree.
    provenance = atari_curves.provenance(local_cluster.REPO) if keeps else None
    results, suite_rows, stopped = [], None, None
    for name in names:
        result, run, stopped = benchmark_until_stopped(name)
        if result is not None:
            results.append(result)
            if keeps and name in ATARI_RUNS:
                suite_rows = keep_in_docs(result, run, provenance)
        if stopped is not None:
            break
    print_results(results)
    if suite_rows:
        print("\nAtari suite: the mean return of the last 100 games at each budget\n")
        print(atari_suite.table(suite_rows))
        print(f"curves, table and figure: {FLAGS.docs_dir}/atari/, atari_results.csv, .png")
    print(json.dumps({"quick": FLAGS.quick, "results": results}))
    if stopped is not None:
        raise stopped


if __name__ == "__main__":
    app.run(main)
