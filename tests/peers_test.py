"""bench/peers on fakes, without Sample Factory's virtualenv: SF's summaries and log read into the
curve and frames/s, the stop at the target, the speed windows' schedule and figures, the report
from committed files, the flags; --part=step's protocol with the torch process, its windows,
figures and table, and our update's network and batch. (The real SF runs: bench/README.md's
smoke command.)"""

import os
import subprocess
import sys
import types

import numpy as np
import pytest
import tensorflow as tf

import config as config_lib
import roles
from bench import cluster, stages
from bench.peers import frames, report, sf_train, speed, systems
from bench.peers import step as peers_step
from tools import curves, local_cluster

LEVEL = "PongNoFrameskip-v4"


class SimpleValueWriter:
    """tensorboardX's SummaryWriter.add_scalar, as SF's runner writes: TF 1 Summary protos with a
    simple_value, here through TF's own writer."""

    def __init__(self, logdir):
        self.writer = tf.summary.create_file_writer(str(logdir))

    def add_scalar(self, tag, value, step):
        value = tf.compat.v1.Summary.Value(tag=tag, simple_value=value)
        with self.writer.as_default():
            summary = tf.compat.v1.Summary(value=[value]).SerializeToString()
            tf.summary.experimental.write_raw_pb(summary, step=step)

    def close(self):
        self.writer.close()


class FakeRun:
    """What frames.train_to_target uses of a systems.Run: SF's summary directory, an exit code."""

    def __init__(self, run_dir, exit_code=None):
        self.system, self.run_dir, self._exit_code = "sf", str(run_dir), exit_code
        self.process = types.SimpleNamespace(log=lambda: "Traceback: out of memory")
        self.stopped = False

    def logdir(self):
        return systems.Run.logdir(self)

    def exit_code(self):
        return self._exit_code

    def stop(self):
        self.stopped = True


def sf_summaries(run_dir, reports):
    """Writes SF's summaries of `reports` [(frames, episodic stats)] to run_dir's SF logdir: each
    report through sf_train's handler, as SF's runner calls it, beside SF's own mean tags."""
    logdir = FakeRun(run_dir).logdir()
    writer = SimpleValueWriter(logdir)
    runner = types.SimpleNamespace(env_steps={}, writers={0: writer})
    record = sf_train.game_recorder(LEVEL, "episodic")
    for step, stats in reports:
        runner.env_steps[0] = step
        record(runner, {"episodic": stats, "policy_id": 0}, 0)
        writer.add_scalar("reward/reward", 1.0, step)  # clipped, per life: not a game's return
        writer.add_scalar("policy_stats/avg_RecordEpisodeStatistics_reward", 99.0, step)
        writer.add_scalar("perf/_fps", 1234.0, step)
    writer.close()


def test_sf_games_are_its_unclipped_whole_game_returns_at_its_frames(tmp_path):
    sf_summaries(
        tmp_path,
        [
            # Non-batched sampling: one env's report, RecordEpisodeStatistics' return an array
            # of one; a life lost mid-game reports without it.
            (
                4_000,
                {"reward": 1.0, "len": 400, "RecordEpisodeStatistics_reward": np.array([-20.0])},
            ),
            (6_000, {"reward": 3.0, "len": 800}),
            # Batched sampling: the games of a vector of envs that ended on one step.
            (8_000, {"reward": np.ones(2), "RecordEpisodeStatistics_reward": np.array([-21, 5])}),
        ],
    )

    points = frames.games(FakeRun(tmp_path), LEVEL)

    np.testing.assert_array_equal(points, [[4_000, -20, -20], [8_000, -21, -20.5], [8_000, 5, -12]])
    curves.write_csv(points, tmp_path / "sf-throughput-Pong.csv")
    np.testing.assert_array_equal(curves.read_csv(tmp_path / "sf-throughput-Pong.csv"), points)


def test_no_sf_summaries_yet_are_no_games(tmp_path):
    assert frames.games(FakeRun(tmp_path), LEVEL).shape == (0, 3)


def test_sf_frames_over_time_from_its_log():
    log = (
        "[2026-11-27 15:20:01,250][01234] Heartbeat connected on Batcher_0\n"
        "[2026-11-27 15:20:01,500][01234] Fps is (10 sec: nan, 60 sec: nan, 300 sec: nan). "
        "Total num frames: 0. Throughput: 0: nan. Samples: 0. Policy #0 lag: (min: -1.0)\n"
        "[2026-11-27 15:20:06,500][01234] Fps is (10 sec: 4000.0, 60 sec: 4000.0, 300 sec: "
        "4000.0). Total num frames: 20480. Throughput: 0: 1000.0. Samples: 20480.\n"
        "[2026-11-27 15:20:11,750][01234] Avg episode reward: [(0, '-20.500')]\n"
    )

    points = systems.sf_frame_points(log)

    assert [frames for _, frames in points] == [0, 20480]
    assert points[1][0] - points[0][0] == pytest.approx(5.0)
    assert cluster.rate_of(points, points[0][0], points[1][0]) == pytest.approx(4096.0)
    assert cluster.rate_of(points, points[1][0], points[1][0] + 60) is None  # one point


def test_our_run_is_read_where_bench_learning_keeps_it(tmp_path):
    # bench.learning's run directory in --output_dir: <run>_<8 characters>, with its logdir and
    # the learners' log (rank 0's progress lines).
    (tmp_path / "pong_abcd1234" / "logdir").mkdir(parents=True)
    (tmp_path / "pong_abcd1234" / "learners.log").write_text(
        "I1127 15:20:01.000000 140 progress.py:90] frames 12800 (0.1%) | 640 frames/s\n"
        "I1127 15:20:03.000000 140 progress.py:90] frames 14080 (0.1%) | 640 frames/s\n"
    )
    run = object.__new__(systems.Run)  # its process not started
    run.system, run.run_dir = "ours", str(tmp_path)

    assert run.logdir() == str(tmp_path / "pong_abcd1234" / "logdir")
    points = run.frame_points()
    assert [frames for _, frames in points] == [12800, 14080]
    assert cluster.rate_of(points, points[0][0], points[1][0]) == pytest.approx(640.0)


def games_reaching(target, count=150, frames_per_game=20_000):
    """[count, 3] games, the first 20 at -21 and the others at `target` + 1: the mean of the last
    100 first reaches `target` at game 118 (two of -21 left in its window: target + 0.2)."""
    returns = np.where(np.arange(count) < 20, -21.0, target + 1)
    game_frames = frames_per_game * np.arange(1, count + 1)
    return np.column_stack([game_frames, returns, curves.running_mean(returns)])


def test_finished_at_a_full_window_at_the_target_or_at_the_budget():
    points = games_reaching(18.0)
    assert curves.first_frames_at(points, 18.0) == 118 * 20_000
    assert frames.finished(points, 18.0, 15_000_000)
    assert not frames.finished(points[:110], 18.0, 15_000_000)
    assert frames.finished(points[:110], 18.0, 110 * 20_000)
    assert not frames.finished(np.zeros([0, 3]), 18.0, 15_000_000)


def test_a_run_is_stopped_once_its_games_reached_the_target(tmp_path):
    points = games_reaching(18.0)
    sf_summaries(tmp_path, [(f, {"RecordEpisodeStatistics_reward": r}) for f, r, _ in points])
    run = FakeRun(tmp_path)

    frames.train_to_target(run, LEVEL, 18.0, 15_000_000, poll_secs=0.01)

    assert run.stopped
    np.testing.assert_array_equal(frames.games(run, LEVEL), points)


def test_a_run_that_failed_is_an_error_naming_its_exit_code_and_stopped(tmp_path):
    run = FakeRun(tmp_path, exit_code=1)
    with pytest.raises(RuntimeError, match="sf exited with 1; log tail:\nTraceback"):
        frames.train_to_target(run, LEVEL, 18.0, 15_000_000, poll_secs=0.01)
    assert run.stopped


def test_the_configurations_command_lines():
    ours = systems.ours_argv("Pong", "throughput", "/tmp/runs", 15_000_000)
    assert ours[1:] == [
        "-m",
        "bench.learning",
        "--runs=pong",
        "--output_dir=/tmp/runs",
        "--total_environment_frames=15000000",
        "--load_wait_secs=0",
        "--docs_dir=/tmp/runs/docs",
        "--replay_size=0",
        "--normalize_input",
    ]
    assert "--replay_size=0" not in systems.ours_argv("Pong", "defaults", "/tmp/runs", 1)
    assert systems.ours_argv("Pong", "replay3", "/tmp/runs", 1)[-1] == "--replay_ratio=3"
    sf = systems.sf_argv("/venv/bin/python", "SpaceInvaders", "defaults", "/tmp/runs", 1000)
    assert sf[:3] == ["/venv/bin/python", str(systems.SF_TRAIN), "--env=atari_spaceinvaders"]
    # The defaults are SF's Atari recipe: nothing of THROUGHPUT overrides it.
    assert not set(systems.THROUGHPUT) & set(sf)
    sf = systems.sf_argv("/venv/bin/python", "Pong", "throughput", "/tmp/runs", 1000)
    assert sf[-len(systems.THROUGHPUT) :] == list(systems.THROUGHPUT)
    assert {"--train_for_env_steps=1000", "--summaries_use_frameskip=True"} <= set(sf)


def test_the_speed_windows_alternate_and_the_second_round_runs_backwards():
    assert speed.schedule(["ours-defaults", "sf-defaults", "ours-throughput"], 2) == [
        (0, "ours-defaults"),
        (0, "sf-defaults"),
        (0, "ours-throughput"),
        (1, "ours-throughput"),
        (1, "sf-defaults"),
        (1, "ours-defaults"),
    ]


def test_cpu_of_processes_gone_is_not_counted_and_new_ones_count_whole():
    before = {"learner": 100.0, "actor": 50.0, "gone": 10.0}
    after = {"learner": 160.0, "actor": 80.0, "new": 5.0}
    assert speed.cpu_used(before, after) == 95.0


def test_a_configurations_speed_is_the_mean_of_its_windows_and_its_highest_pss():
    windows = [
        {"configuration": "sf-defaults", "frames_per_second": 3000.0,
         "cpu_secs_per_1m_frames": 600.0, "peak_pss_mb": 900},
        {"configuration": "ours-defaults", "frames_per_second": 800.0,
         "cpu_secs_per_1m_frames": 2500.0, "peak_pss_mb": 2100},
        {"configuration": "sf-defaults", "frames_per_second": 2000.0,
         "cpu_secs_per_1m_frames": 1000.0, "peak_pss_mb": 1000},
        {"configuration": "ours-defaults", "frames_per_second": None,
         "cpu_secs_per_1m_frames": None, "peak_pss_mb": 2000},
    ]  # fmt: skip

    figures = speed.summarize(windows)

    assert figures["sf-defaults"] == {
        "frames_per_second": 2500.0,
        "cpu_secs_per_1m_frames": 800.0,
        "peak_pss_mb": 1000,
        "windows": 2,
    }
    # A window that measured nothing leaves the configuration without a figure, not a half one.
    assert figures["ours-defaults"]["frames_per_second"] is None


def committed(peers_dir):
    """docs/peers as after the runs: ours-defaults reached 18 at 2.36M frames, sf-throughput
    stopped at 3M without reaching it; no run of ours-throughput nor of SF's defaults."""
    peers_dir.mkdir()
    curves.write_csv(games_reaching(18.0), frames.curve_path(peers_dir, "ours", "defaults", "Pong"))
    below = games_reaching(10.0)
    curves.write_csv(below, frames.curve_path(peers_dir, "sf", "throughput", "Pong"))
    speeds = {
        "ours-defaults": (800.0, 2500.0, 2100),
        "sf-defaults": (2000.0, 1000.0, 1000),
        "sf-throughput": (4000.0, 500.0, 1200),
    }
    configurations = {
        name: dict(
            zip(["frames_per_second", "cpu_secs_per_1m_frames", "peak_pss_mb"], values, strict=True)
        )
        for name, values in speeds.items()
    }
    path = speed.result_path(peers_dir, "Pong", "intel-xeon")
    speed.write_result(path, {"configurations": configurations})


def test_the_report_is_built_from_the_committed_files_alone(tmp_path):
    committed(tmp_path / "peers")

    rows = {r.name: r for r in report.rows(tmp_path / "peers", "Pong", 18.0, "intel-xeon")}

    ours = rows["ours-defaults"]
    assert (ours.source, ours.frames, ours.frames_per_second) == ("run", 2_360_000, 800.0)
    assert ours.hours == pytest.approx(2_360_000 / 800 / 3600)
    # SF's defaults are PPO's recipe: its frames are PPO's published ones, and it says so.
    sf = rows["sf-defaults"]
    assert (sf.source, sf.frames, sf.hours) == (
        report.PPO_SOURCE,
        10_000_000,
        10_000_000 / 2000 / 3600,
    )
    assert rows["sf-throughput"].source == "not reached by 3,000,000"
    assert rows["sf-throughput"].hours is None
    assert (rows["ours-throughput"].source, rows["ours-throughput"].hours) == ("no run", None)
    ratios = report.ratios(list(rows.values()))
    assert ratios["defaults"]["hours"] == pytest.approx(ours.hours / sf.hours)
    assert ratios["defaults"]["peak_pss_mb"] == 2.1
    assert ratios["throughput"]["frames_per_second"] is None
    assert set(ratios) == {"defaults", "throughput"}  # the levers are ours alone
    # The target compares ours with SF's faster configuration that reached it: its defaults here.
    assert report.against_faster_sf(list(rows.values())) == (
        "sf-defaults",
        {"ours-defaults": pytest.approx(ours.hours / sf.hours)},
    )
    table = report.table(list(rows.values())).splitlines()
    assert table[1].split() == [
        "ours-defaults",
        "2,360,000",
        "800",
        "0.82",
        "2,500",
        "2,100",
        "run",
    ]
    assert "PPO's published curve" in table[2]
    configurations = len(systems.CONFIGURATIONS)
    assert [line.split()[0] for line in table[1 : 1 + configurations]] == list(
        systems.CONFIGURATIONS
    )
    assert table[-2:] == [
        "hours to the target, ours / sf-defaults (SF's faster)",
        f"{'ours-defaults':<20}{ours.hours / sf.hours:>10.2f}",
    ]

    report.draw(list(rows.values()), "Pong", 18.0, "intel-xeon", tmp_path / "Pong.png")
    assert (tmp_path / "Pong.png").stat().st_size > 10_000


def test_a_configuration_with_several_runs_takes_their_mean_frames_and_lists_each(tmp_path):
    assert frames.next_curve_path(tmp_path, "ours", "throughput", "Pong") == str(
        tmp_path / "ours-throughput-Pong.csv"
    )
    runs = [
        games_reaching(18.0),
        games_reaching(18.0, frames_per_game=40_000),
        games_reaching(10.0),
    ]
    for points in runs:
        curves.write_csv(points, frames.next_curve_path(tmp_path, "ours", "throughput", "Pong"))
    # Another configuration's curves are not its runs.
    curves.write_csv(runs[0], frames.curve_path(tmp_path, "ours", "throughput_bf16", "Pong"))
    assert [
        os.path.basename(p) for p in frames.curve_paths(tmp_path, "ours", "throughput", "Pong")
    ] == [
        "ours-throughput-Pong.csv",
        "ours-throughput-Pong-run2.csv",
        "ours-throughput-Pong-run3.csv",
    ]

    speeds = {"ours-throughput": {"frames_per_second": 1000.0}}
    r = report.row(tmp_path, "Pong", 18.0, "ours", "throughput", speeds)

    assert r.frames == (118 * 20_000 + 118 * 40_000) / 2
    assert r.source == "runs: 2,360,000, 4,720,000, not reached by 3,000,000"
    assert len(r.runs) == 3
    assert r.hours == pytest.approx(r.frames / 1000 / 3600)


def refusal(*flags):
    """The last line bench.peers prints to stderr when it refuses `flags` (it must refuse)."""
    result = subprocess.run(
        [sys.executable, "-m", "bench.peers", *flags],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    return result.stderr.strip().splitlines()[-1]


def test_a_missing_flag_is_one_line_naming_it():
    # (absl refuses a bad value, e.g. --speed_configs=ours-fast, by the flag's validator.)
    last_line = refusal("--part=frames", "--system=sf")
    assert last_line == "--part=frames needs --system and --config"
    last_line = refusal("--part=frames", "--system=sf", "--config=replay3")
    assert last_line == "--config=replay3: --system=sf has defaults, throughput"


def test_a_speed_run_of_some_configurations_keeps_the_earlier_windows_of_the_others():
    def window(name, fps, commit):
        figures = {"frames_per_second": fps, "cpu_secs_per_1m_frames": 1e6 / fps}
        return {"configuration": name, "provenance": commit, "peak_pss_mb": 1000, **figures}

    earlier = speed.merged(
        None, [window("sf-throughput", 3000.0, "a"), window("ours-defaults", 1000.0, "a")], "Pong"
    )
    latest = [window("ours-defaults", 2000.0, "b"), window("ours-defaults", 2200.0, "b")]

    result = speed.merged(earlier, latest, "Pong")

    assert [(w["configuration"], w["provenance"]) for w in result["windows"]] == [
        ("sf-throughput", "a"),
        ("ours-defaults", "b"),
        ("ours-defaults", "b"),
    ]
    assert result["game"] == "Pong"
    assert result["configurations"]["ours-defaults"]["frames_per_second"] == 2100.0
    assert result["configurations"]["ours-defaults"]["windows"] == 2
    assert result["configurations"]["sf-throughput"]["frames_per_second"] == 3000.0


def test_the_speed_result_reads_back(tmp_path):
    path = speed.result_path(tmp_path, "Pong", "amd-epyc")
    assert speed.read_result(path) is None
    speed.write_result(path, {"configurations": {}})
    assert speed.read_result(path) == {"configurations": {}}


def test_each_kind_of_machine_files_its_own_speed_result(tmp_path):
    assert speed.machine("Intel(R) Xeon(R) Processor") == "intel-xeon"
    assert speed.machine("AMD EPYC 7763 64-Core Processor") == "amd-epyc-7763-64-core"
    assert speed.machine("") == "unknown"
    assert speed.machines(tmp_path, "Pong") == []
    for kind in ("intel-xeon", "amd-epyc"):
        speed.write_result(speed.result_path(tmp_path, "Pong", kind), {"configurations": {}})
    speed.write_result(speed.result_path(tmp_path, "Breakout", "arm"), {"configurations": {}})
    assert speed.machines(tmp_path, "Pong") == ["amd-epyc", "intel-xeon"]


# --part=step: the torch side's protocol on a fake torch_step.py process (torch_step.serve with
# a no-op update: torch is only in the peers' virtualenv), ours on the real agent.
FAKE_TORCH_STEP = (
    "import sys; from bench.peers import torch_step; "
    "torch_step.serve({'parameters': 7, 'torch': 'fake', 'threads': [1, 1]}, "
    "lambda n: torch_step.timed(lambda: None, n), sys.stdin, sys.stdout)"
)


def test_the_torch_process_says_hello_then_times_each_window_asked(monkeypatch):
    monkeypatch.chdir(local_cluster.REPO)  # where `bench` imports from
    torch_updates = peers_step.TorchUpdates([sys.executable, "-c", FAKE_TORCH_STEP])
    try:
        assert torch_updates.hello == {"parameters": 7, "torch": "fake", "threads": [1, 1]}
        figures = torch_updates.window(3)
        assert figures["updates"] == 3
        assert figures["cpu_secs"] >= 0 and figures["wall_secs"] >= 0
        assert torch_updates.window(1)["updates"] == 1
    finally:
        torch_updates.close()


def test_a_torch_process_that_dies_or_prints_no_json_is_an_error():
    with pytest.raises(RuntimeError, match="torch_step.py exited with 3"):
        peers_step.TorchUpdates([sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(RuntimeError, match="not a JSON object: 'Traceback'"):
        peers_step.parse_reply("Traceback\n")
    with pytest.raises(RuntimeError, match=r"not a JSON object: '\[1\]'"):
        peers_step.parse_reply("[1]\n")
    assert peers_step.parse_reply('{"updates": 2}\n') == {"updates": 2}


def test_the_forms_are_warmed_up_then_timed_in_turn_every_second_round_reversed(capsys):
    calls = []

    def window(form):
        def run(updates):
            calls.append(form)
            return {"updates": updates, "cpu_secs": 0.1, "wall_secs": 0.2}

        return run

    results = peers_step.measure({form: window(form) for form in peers_step.FORMS}, 5, 2)

    forms = ["ours-plain", "ours-xla", "ours-bf16", "torch"]
    assert calls == [*forms, *forms, *reversed(forms)]  # the warm-up, then two rounds
    assert [r["form"] for r in results] == calls[4:]
    assert [r["round"] for r in results] == [0] * 4 + [1] * 4
    assert len(capsys.readouterr().out.splitlines()) == 8  # one JSON line a timed window


def test_cpu_ms_per_sample_is_the_best_window_and_the_ratios_are_ours_over_torch():
    def result(form, cpu_secs):
        return {"form": form, "updates": 10, "cpu_secs": cpu_secs, "wall_secs": 2 * cpu_secs}

    results = [
        result("ours-plain", 0.64), result("ours-xla", 0.32), result("torch", 1.28),
        result("torch", 0.96), result("ours-xla", 0.48), result("ours-plain", 0.32),
        result("ours-plain", 1.28),
    ]  # fmt: skip

    summary = peers_step.summarize(results, 64)  # 640 samples a window

    assert summary["ours-plain"] == {
        "cpu_ms_per_sample": 0.5,
        "median_cpu_ms_per_sample": 1.0,
        "cores": 0.5,
        "windows": 3,
    }
    assert summary["torch"]["cpu_ms_per_sample"] == 1.5
    ratios = peers_step.ratios(summary)
    assert ratios == {"plain": pytest.approx(1 / 3), "xla": pytest.approx(0.5 / 1.5)}
    rows = peers_step.table(summary, ratios).splitlines()
    assert rows[0].split() == ["form", "CPU", "ms/sample", "median", "cores", "ours/torch"]
    assert rows[1].split() == ["ours-plain", "0.500", "1.000", "0.50", "0.33"]
    assert rows[3].split() == ["torch", "1.500", "1.750", "0.50"]  # no ratio of its own


def test_our_update_is_one_minibatch_of_the_nature_cnn_with_its_parameter_count():
    config = peers_step.update_config(config_lib.Config())
    agent, observation_spec, num_actions, _ = roles.build_agent(config)
    # Nature CNN on 84x84x4 frames, its heads on 512 features + the reward + 6 one-hot actions.
    layers = [8 * 8 * 4 * 32 + 32, 4 * 4 * 32 * 64 + 64, 3 * 3 * 64 * 64 + 64]
    layers += [7 * 7 * 64 * 512 + 512, 519 * 6 + 6, 519 * 1 + 1]
    assert peers_step.parameter_count(agent.trainable_variables) == sum(layers) == 1_687_768

    spec = peers_step.torch_spec(config, observation_spec, num_actions)

    assert (spec["unrolls"], spec["unroll_length"], spec["frame"]) == (2, 32, [4, 84, 84])
    assert spec["num_actions"] == 6 and spec["epsilon"] == config.epsilon
    # The learner batch is one minibatch: one update per call of the learner peers_step.
    batch = stages.learner_batch(
        agent, config, observation_spec, num_actions, np.random.default_rng()
    )
    assert batch.env_outputs.observation.shape == (2, 33, 84, 84, 4)
    assert config_lib.learner_minibatch_unrolls(config.minibatch_unrolls, 1) == 2
    assert peers_step.samples_per_update(config) == 64


def test_the_step_part_needs_the_peers_virtualenv(tmp_path):
    last = refusal("--part=step", f"--sf_venv={tmp_path}")
    assert last == f"--sf_venv: no {tmp_path}/bin/python; run bash bench/peers/setup_sf.sh"
