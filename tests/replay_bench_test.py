"""bench.replay (issue 51): the replay samplings' curves and timing figures in docs/replay/, the
table rebuilt from those files alone, and the runner's --curves_only path, which never touches
docs/atari/."""

import dataclasses
import datetime
import json
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

import config as config_lib
import replay
from bench import atari_curves, atari_suite, replay_results, replay_timing
from tests.atari_suite_test import PROVENANCE, run_curves
from tests.learning_curves_test import write_games
from tools import local_cluster

BATCH = 2 * 32 * 4  # frames of a batch of the default Atari run: 2 unrolls x 32 steps x 4
TIMING = {
    "frames_per_sec": 812.345,
    "learner_cpu_ms_per_trained_sample": 1.234,
    "load_average": 3.456,
    "load_before": 1.2,
    "window_secs": 2000.0,
}


def test_a_run_is_named_by_its_sampling_and_elite_by_its_strategy_too(tmp_path):
    assert replay_results.label("elite", 2) == "elite2"
    assert replay_results.label("attentive", 2) == "attentive"
    path = replay_results.curve_path(str(tmp_path), "Breakout", "elite2")
    assert path == str(tmp_path / "replay" / "Breakout-elite2.csv")
    assert replay_results.timing_path(path) == str(tmp_path / "replay" / "Breakout-elite2.json")


def test_each_on_policy_step_is_trained_on_once_and_replay_ratio_times_more():
    breakout = config_lib.configure(atari_suite.settings("Breakout"))
    assert replay.uses_per_agent_step(breakout) == 3.0  # B = 2 on-policy + 4 replayed unrolls
    assert replay.uses_per_agent_step(dataclasses.replace(breakout, replay_ratio=3.0)) == 4.0
    assert replay.uses_per_agent_step(dataclasses.replace(breakout, replay_size=0)) == 1.0


def keep(docs_dir, game, method_label, game_frames, budget, timing):
    """Writes the curve of games ending at `game_frames` (each returning its index / 10) to the
    docs as the runner does, with `timing`; returns the GameCurve."""
    run = run_curves(game, game_frames, np.arange(len(game_frames)) / 10)
    curve = atari_curves.of_run(run, game, budget, BATCH)
    path = replay_results.curve_path(str(docs_dir), game, method_label)
    replay_results.write(path, curve, PROVENANCE, timing)
    return curve


def test_the_table_is_rebuilt_from_the_curves_and_timing_files_alone(tmp_path):
    # Breakout: attentive and elite2 complete to 2M, prioritized cut at 1.5M; Seaquest's uniform
    # with no timing file. Written out of order: the table is in the methods' order.
    to_2m = 10_000 * np.arange(1, 201)
    keep(tmp_path, "Breakout", "attentive", to_2m, 2_000_000, TIMING)
    keep(tmp_path, "Breakout", "elite2", to_2m, 2_000_000, {**TIMING, "frames_per_sec": 700.0})
    keep(tmp_path, "Breakout", "prioritized", to_2m[:150], 2_000_000, TIMING)
    curve = keep(tmp_path, "Seaquest", "uniform", to_2m, 2_000_000, {})
    (tmp_path / "replay" / "Seaquest-uniform.json").unlink()

    rows = replay_results.rebuild(str(tmp_path))

    lines = (tmp_path / "replay_results.csv").read_text().splitlines()
    assert lines[0] == (
        "game,method,frames,complete,return_1M,return_2M,frames_per_sec,"
        "learner_cpu_ms_per_trained_sample,load_average,load_before"
    )
    # By 1M frames games 0..99 ended (mean index 49.5, / 10); by 2M, 100..199.
    assert lines[1:] == [
        "Breakout,prioritized,1500000,false,4.95,,812.35,1.23,3.46,1.20",
        "Breakout,elite2,2000000,true,4.95,14.95,700.00,1.23,3.46,1.20",
        "Breakout,attentive,2000000,true,4.95,14.95,812.35,1.23,3.46,1.20",
        "Seaquest,uniform,2000000,true,4.95,14.95,,,,",
    ]
    assert curve.return_at(2_000_000) == pytest.approx(14.95)
    table = replay_results.table(rows).splitlines()
    assert table[1].split() == [
        "Breakout",
        "prioritized",
        "partial",
        "1,500,000",
        "4.95",
        "-",
        "812.35",
        "1.23",
        "3.46",
    ]
    assert not (tmp_path / "atari").exists()


def progress_log(start, seconds, frames_per_sec):
    """A learner log with rank 0's progress lines every 2 s from `start` (unix time) for
    `seconds`, `frames_per_sec` frames a second."""
    lines = []
    for offset in range(0, seconds, 2):
        clock = datetime.datetime.fromtimestamp(start + offset).strftime("%m%d %H:%M:%S.%f")
        frames = frames_per_sec * offset
        lines.append(f"I{clock} 140 progress.py:90] frames {frames} (1.0%) | 800 frames/s")
    return "\n".join(["I1127 learner starting", *lines]) + "\n"


def test_the_timing_figures_of_the_steady_window(tmp_path):
    # Progress lines for 200 s at 800 frames/s; a sample every 10 s of a learner using 1.5 cores,
    # the load 2.0 for the first 100 s, then 3.0.
    start = round(time.time()) - 1000
    (tmp_path / "learners.log").write_text(progress_log(start, 200, 800))
    replay_timing.Sampler(str(tmp_path), 1.25)  # the file and its comment line
    with open(tmp_path / "samples.csv", "a") as f:
        for offset in range(0, 201, 10):
            f.write(f"{start + offset},{1.5 * offset},{2.0 if offset < 100 else 3.0}\n")

    figures = replay_timing.figures(str(tmp_path), frames_per_step=4, uses=4.0, skip_secs=60)

    # The window: the samples from 60 s to the last progress line's (198 s): 60..190 s.
    assert figures["window_secs"] == 130
    assert figures["frames_per_sec"] == pytest.approx(800)
    # 130 s x 800 frames/s / 4 frames a step x 4 uses; 130 s x 1.5 CPU s.
    assert figures["learner_cpu_ms_per_trained_sample"] == pytest.approx(
        1e3 * 130 * 1.5 / (130 * 800 / 4 * 4)
    )
    assert figures["load_average"] == pytest.approx(np.mean([2.0] * 4 + [3.0] * 10))
    assert figures["load_before"] == 1.25


def test_a_run_without_a_steady_window_has_no_timing_figures(tmp_path):
    (tmp_path / "learners.log").write_text(progress_log(time.time() - 100, 30, 800))
    replay_timing.Sampler(str(tmp_path), 0.5)

    figures = replay_timing.figures(str(tmp_path), frames_per_step=4, uses=4.0, skip_secs=10)

    assert figures == {
        "frames_per_sec": None,
        "learner_cpu_ms_per_trained_sample": None,
        "load_average": None,
        "load_before": 0.5,
        "window_secs": None,
    }


class Workers:
    """local_cluster.WorkerSets as the sampler sees it: this process is the learner."""

    def learner_processes(self):
        return [psutil.Process()]


def test_the_sampler_appends_the_learners_cpu_time_and_the_load(tmp_path):
    sampler = replay_timing.Sampler(str(tmp_path), 0.75)
    sampler(Workers())
    sum(range(3_000_000))  # some CPU between the samples
    sampler(Workers())

    load_before, samples = replay_timing.read_samples(str(tmp_path))

    assert load_before == 0.75
    assert samples.shape == (2, 3)
    assert samples[1, 0] >= samples[0, 0] and samples[1, 1] > samples[0, 1] > 0
    assert samples[0, 2] >= 0


def replay_bench(docs_dir, output_dir, *flags):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.replay",
            "--game=Breakout",
            f"--output_dir={output_dir}",
            f"--docs_dir={docs_dir}",
            *flags,
        ],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_curves_only_keeps_a_stopped_run_in_docs_replay_and_never_in_docs_atari(tmp_path):
    # A uniform run stopped at 800K of 2M frames: 200 games, its log and samples; an elite run
    # of another strategy, that must be left alone.
    run_dir = tmp_path / "runs" / "breakout_uniform_abcd1234"
    frames = 4000 * np.arange(1, 201)
    write_games(run_dir / "logdir", "BreakoutNoFrameskip-v4", frames, np.arange(200) / 10)
    start = round(time.time()) - 1000
    (run_dir / "learners.log").write_text(progress_log(start, 200, 800))
    replay_timing.Sampler(str(run_dir), 1.0)
    with open(run_dir / "samples.csv", "a") as f:
        f.writelines(f"{start + offset},{offset},2.0\n" for offset in range(0, 201, 10))
    (tmp_path / "runs" / "breakout_elite3_abcd1234" / "logdir").mkdir(parents=True)

    finished = replay_bench(
        tmp_path / "docs", tmp_path / "runs", "--methods=uniform", "--curves_only"
    )

    assert finished.returncode == 0, finished.stderr[-3000:]
    result = json.loads(finished.stdout.strip().splitlines()[-1])
    (uniform,) = result["results"]
    assert uniform["method"] == "uniform" and not uniform["complete"]
    assert uniform["frames_per_sec"] == pytest.approx(800)
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["replay", "replay_results.csv"]
    curve = atari_curves.read(tmp_path / "docs" / "replay" / "Breakout-uniform.csv")
    assert not curve.complete and curve.budget == 2_000_000
    np.testing.assert_array_equal(curve.rows[:, 0], 100_000 * np.arange(1, 9))
    timing = json.loads((tmp_path / "docs" / "replay" / "Breakout-uniform.json").read_text())
    assert timing["load_before"] == 1.0 and timing["flags"] == {}
    table = (tmp_path / "docs" / "replay_results.csv").read_text().splitlines()
    assert table[1].startswith("Breakout,uniform,800000,false,,,800.00,")


def test_a_training_flag_the_runner_sets_is_refused(tmp_path):
    finished = replay_bench(tmp_path / "docs", tmp_path / "runs", "--replay_sampling=elite")

    assert finished.returncode == 1
    assert "--replay_sampling: set by --game, --frames, --methods" in finished.stderr
    assert not (tmp_path / "docs").exists() and not (tmp_path / "runs").exists()
