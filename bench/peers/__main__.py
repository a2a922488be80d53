"""Time to a target score beside Sample Factory 2.1.1, and our update beside PyTorch's
(bench/peers/__init__.py).

  .venv/bin/python -m bench.peers --part=frames --system=ours|sf --config=defaults|throughput
  .venv/bin/python -m bench.peers --part=frames --system=ours --config=replay1|replay3
  .venv/bin/python -m bench.peers --part=speed
  .venv/bin/python -m bench.peers --part=report
  .venv/bin/python -m bench.peers --part=step [--step_updates=200 --rounds=2]

(--game=Pong --target=18 by default.) Printed: what it found and, last, one JSON line.
"""

import dataclasses
import json
import os
import sys
import tempfile

from absl import app, flags

import config as config_lib
from bench import atari_curves, atari_suite, cluster
from bench.peers import frames, report, speed, step, systems
from tools import curves, local_cluster

PARTS = ("frames", "speed", "report", "step")

flags.DEFINE_enum("part", None, PARTS, "What to do (bench/peers/__init__.py).")
flags.DEFINE_enum("system", None, systems.SYSTEMS, "--part=frames: the system to train.")
flags.DEFINE_enum("config", None, systems.CONFIG_NAMES, "--part=frames: its configuration.")
flags.DEFINE_enum("game", "Pong", list(atari_suite.PPO), "The game (its NoFrameskip-v4 id).")
flags.DEFINE_float("target", 18.0, "The mean return of the last 100 games to reach.")
flags.DEFINE_integer(
    "max_frames", 15_000_000, "--part=frames: frames at most; speed: each run's budget.", 1
)
flags.DEFINE_integer("poll_secs", 60, "--part=frames: how often the run's games are read.", 1)
flags.DEFINE_list(
    "speed_configs", list(systems.CONFIGURATIONS), "--part=speed: the configurations, in order."
)
flags.DEFINE_integer(
    "rounds", 2, "--part=speed: windows of each configuration; step: of each form.", 1, 10
)
flags.DEFINE_integer("window_secs", 300, "--part=speed: each window, from the start.", 10)
flags.DEFINE_integer("skip_secs", 60, "--part=speed: start of a window not measured.", 0)
flags.DEFINE_integer("sample_secs", 10, "--part=speed: how often PSS is sampled.", 1)
flags.DEFINE_integer(
    "step_updates", 200, "--part=step: updates per window (64 trained samples each).", 1, 10_000
)
flags.DEFINE_string("runs_dir", "/tmp/impala_bench_peers", "The runs' directories and logs.")
flags.DEFINE_string(
    "sf_venv",
    str(local_cluster.REPO / ".venv-peers"),
    "The peers' virtualenv (bench/peers/setup_sf.sh makes it).",
)
FLAGS = flags.FLAGS

flags.register_validator(
    "speed_configs",
    lambda names: set(names) <= set(systems.CONFIGURATIONS) and len(set(names)) == len(names),
    f"each of {', '.join(systems.CONFIGURATIONS)} at most once",
)
flags.register_multi_flags_validator(
    ["skip_secs", "window_secs"],
    lambda f: f["skip_secs"] < f["window_secs"],
    "--skip_secs must be shorter than --window_secs",
)


def peers_dir():
    """Where the committed results go: the docs directory's peers/."""
    return os.path.join(FLAGS.docs_dir, "peers")


def this_machine():
    """This machine's kind, as speed results are filed (speed.machine)."""
    return speed.machine(atari_curves.cpu_model())


def sf_python():
    return os.path.join(FLAGS.sf_venv, "bin", "python")


def check_flags():
    """Raises app.UsageError (one line naming the flag) for what the validators cannot see."""
    if FLAGS.part is None:
        raise app.UsageError(f"--part: give one of {', '.join(PARTS)}")
    if FLAGS.part == "frames" and (FLAGS.system is None or FLAGS.config is None):
        raise app.UsageError("--part=frames needs --system and --config")
    if FLAGS.part == "frames" and FLAGS.config not in systems.CONFIGS[FLAGS.system]:
        known = ", ".join(systems.CONFIGS[FLAGS.system])
        raise app.UsageError(f"--config={FLAGS.config}: --system={FLAGS.system} has {known}")
    # The systems each part runs (step: PyTorch, in SF's virtualenv).
    training = {
        "frames": [FLAGS.system],
        "speed": [n.split("-")[0] for n in FLAGS.speed_configs],
        "step": ["sf"],
    }
    if "sf" in training.get(FLAGS.part, []) and not os.access(sf_python(), os.X_OK):
        raise app.UsageError(f"--sf_venv: no {sf_python()}; run bash bench/peers/setup_sf.sh")


def new_run_dir(name):
    os.makedirs(FLAGS.runs_dir, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{name}_", dir=FLAGS.runs_dir)


def train_frames():
    """--part=frames: trains the configuration to the target or --max_frames, writes its curve."""
    name = f"{FLAGS.system}-{FLAGS.config}"
    run = systems.start(
        FLAGS.system, FLAGS.config, FLAGS.game, new_run_dir(name), FLAGS.max_frames, sf_python()
    )
    print(f"{name}: training in {run.run_dir}")
    level_name = atari_suite.level_name(FLAGS.game)
    path = frames.next_curve_path(peers_dir(), FLAGS.system, FLAGS.config, FLAGS.game)
    try:
        frames.train_to_target(run, level_name, FLAGS.target, FLAGS.max_frames, FLAGS.poll_secs)
    finally:
        # Read after the stop: every game it wrote. Interrupted (a sitting's end), the curve so
        # far is kept too; the report says where it got without reaching the target.
        points = frames.games(run, level_name)
        curves.write_csv(points, path)
    reached = curves.first_frames_at(points, FLAGS.target)
    last = int(points[-1, 0]) if len(points) else 0
    outcome = f"reached at {reached:,}" if reached else f"not reached by {last:,}"
    print(f"{name}: {len(points)} games, mean of the last 100 >= {FLAGS.target:g} {outcome} frames")
    print(f"curve: {path}")
    return {"configuration": name, "games": len(points), "frames_to_target": reached, "csv": path}


def measure_speed():
    """--part=speed: the windows of speed.schedule, each configuration started afresh, merged
    into this machine's result (speed.merged)."""
    # Each window says how it was measured: a later run of other configurations keeps it.
    # Provenance is read before the result changes the tree.
    settings = {
        "provenance": atari_curves.provenance(local_cluster.REPO),
        "window_secs": FLAGS.window_secs,
        "skip_secs": FLAGS.skip_secs,
    }
    windows = []
    for round_, name in speed.schedule(FLAGS.speed_configs, FLAGS.rounds):
        system, config = name.split("-")
        load = cluster.wait_for_quiet_machine()
        run_dir = new_run_dir(f"{name}_round{round_}")
        run = systems.start(system, config, FLAGS.game, run_dir, FLAGS.max_frames, sf_python())
        try:
            figures = speed.measure(run, FLAGS.skip_secs, FLAGS.window_secs, FLAGS.sample_secs)
        finally:
            run.stop()
        window = {"configuration": name, "round": round_, "load_average": load, **figures}
        windows.append(window | settings)
        print(json.dumps(window), flush=True)
    path = speed.result_path(peers_dir(), FLAGS.game, this_machine())
    result = speed.merged(speed.read_result(path), windows, FLAGS.game)
    speed.write_result(path, result)
    for name, figures in result["configurations"].items():
        print(f"{name:<20}{json.dumps(figures)}")
    return result


def build_report():
    """--part=report: a table and a PNG per kind of machine with speeds, from docs/peers alone
    (this machine's kind, its speeds not yet measured, when none has any)."""
    kinds = speed.machines(peers_dir(), FLAGS.game) or [this_machine()]
    return {"machines": {kind: report_of_machine(kind) for kind in kinds}}


def report_of_machine(machine_kind):
    """The table, printed, and the PNG of the speeds measured on `machine_kind`."""
    table_rows = report.rows(peers_dir(), FLAGS.game, FLAGS.target, machine_kind)
    print(f"speeds measured on {machine_kind}\n{report.table(table_rows)}\n")
    png = os.path.join(peers_dir(), f"{FLAGS.game}-{machine_kind}.png")
    report.draw(table_rows, FLAGS.game, FLAGS.target, machine_kind, png)
    print(f"figure: {png}")
    faster_sf, hours_over_faster_sf = report.against_faster_sf(table_rows)
    return {
        "rows": [
            {"configuration": r.name, "source": r.source}
            | {column: getattr(r, column) for column in report.COLUMNS}
            for r in table_rows
        ],
        "ours_over_sf": report.ratios(table_rows),
        "faster_sf": faster_sf,
        "hours_over_faster_sf": hours_over_faster_sf,
    }


def time_step():
    """--part=step: our update (plain, XLA) beside PyTorch's, CPU ms per trained sample on one
    thread (step.py), the default configuration's on --game."""
    config = dataclasses.replace(config_lib.Config(), level_name=atari_suite.level_name(FLAGS.game))
    load = cluster.wait_for_quiet_machine()
    provenance = atari_curves.provenance(local_cluster.REPO)
    return {"provenance": provenance, "load_average": load} | step.compare(
        step.update_config(config), sf_python(), FLAGS.step_updates, FLAGS.rounds
    )


def main(argv):
    del argv
    check_flags()
    local_cluster.exit_cleanly_on_termination()
    part = {
        "frames": train_frames,
        "speed": measure_speed,
        "report": build_report,
        "step": time_step,
    }[FLAGS.part]
    try:
        result = part()
    except (curves.CurvesError, RuntimeError) as e:
        print(f"bench.peers: error: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"part": FLAGS.part, "game": FLAGS.game, "target": FLAGS.target, **result}))
    return 0


if __name__ == "__main__":
    app.run(main)
