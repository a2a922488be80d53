"""The benchmarks as users run and stop them: the throughput and scaling benchmarks end to end;
SIGTERM or SIGHUP leaves no worker running and writes the stopped run's curve as far as it got."""

import contextlib
import dataclasses
import glob
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

import config as config_lib
from bench import learner_ranks
from tools import local_cluster, network_namespaces

pytestmark = pytest.mark.slow


def logged_a_return(output_dir):
    """Whether the learner of the run in `output_dir` has logged a progress line with a return
    (a game has ended)."""
    logs = glob.glob(os.path.join(output_dir, "cartpole_*", "learners.log"))
    return bool(logs) and re.search(r"\| return -?[0-9]", pathlib.Path(logs[0]).read_text())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stopped_benchmark_takes_its_workers_with_it_and_writes_its_curve(
    start, tmp_path, signum
):
    bench = start(
        [
            sys.executable,
            "-m",
            "bench.learning",
            "--runs=cartpole",
            f"--output_dir={tmp_path}",
            "--max_load=1000",  # measure at once, however loaded the machine
            "--log_secs=1",
        ],
        "bench",
    )
    deadline = time.monotonic() + 300
    while True:  # until its learner and two actors run, and a game has ended
        workers = local_cluster.experiment_processes(bench.popen.pid)
        if len(workers) == 3 and logged_a_return(tmp_path):
            break
        if bench.popen.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(workers) == 3 and logged_a_return(tmp_path), bench.log()[-3000:]

    bench.popen.send_signal(signum)  # to the benchmark alone, not its process group
    assert bench.wait(timeout=180) == 128 + signum, bench.log()[-3000:]
    _, alive = psutil.wait_procs(workers, timeout=60)
    assert alive == [], [p.cmdline() for p in alive]
    # The learners saved their summaries on the way out: the curve as far as the run got.
    curve = np.loadtxt(tmp_path / "cartpole.csv", delimiter=",", skiprows=1, ndmin=2)
    assert len(curve) >= 1 and (tmp_path / "cartpole.png").exists(), bench.log()[-3000:]
    result = json.loads([line for line in bench.log().splitlines() if line.startswith("{")][-1])
    assert result["results"][0]["games"] == len(curve)


def run_to_json(start, module, args, timeout=900):
    """Runs `python -m module *args` to its end (at most `timeout` s) -> its JSON line, parsed
    (the last line that is an object: workers may log after it)."""
    bench = start([sys.executable, "-m", module, *args], "bench")
    assert bench.wait(timeout=timeout) == 0, bench.log()[-3000:]
    return json.loads([line for line in bench.log().splitlines() if line.startswith("{")][-1])


@pytest.mark.timeout(1200)  # above the wait below, so that a stuck run's log is printed
def test_the_throughput_benchmark_measures_every_stage_and_the_replay_row(start, tmp_path):
    """bench.throughput's whole path (--smoke: --quick's rows with the shortest windows) on
    CartPole: each stage, the default row with its replay (ratio 3) and without, and the JSON
    line that carries them (figures positive, not judged: the machine may be loaded)."""
    result = run_to_json(
        start,
        "bench.throughput",
        ["--smoke", "--level_name=CartPole-v1", "--agent_name=MLPAgent", "--batch_size=4"]
        + ["--max_load=1000"],
        timeout=1100,
    )
    for stage in ("env", "inference", "learner", "env_raw", "inference_best", "learner_best"):
        assert result["stages"][stage]["rate"] > 0, stage
        # timed before and after the system: each keeps the cheaper of the two
        cpu_ms = [result[f"stages_{when}"][stage]["cpu_ms"] for when in ("before", "after")]
        assert result["stages"][stage]["cpu_ms"] == min(cpu_ms), stage
    # ... and the fastest learner variant the faster of the two
    rates = [result[f"stages_{when}"]["learner_fastest"]["rate"] for when in ("before", "after")]
    assert result["stages"]["learner_fastest"]["rate"] == max(rates), result["stages"]
    for when in ("before", "after"):
        # learner_best: the cheapest of the learner step's variants, the system's own among them
        # (the learner's pools beside its actors: one kernel thread fewer than the cores);
        # learner_fastest: the one with the most trained steps/s.
        measured = result[f"stages_{when}"]
        assert measured["learner_best"]["cpu_ms"] <= measured["learner"]["cpu_ms"], measured
        assert measured["learner_best"]["threads"] in (1, os.cpu_count()), measured
        for variant in ("learner", "learner_best"):
            assert measured["learner_fastest"]["rate"] >= measured[variant]["rate"], measured
    assert result["config"]["mode"] == "smoke"
    with_replay, without = result["system"]
    assert (with_replay["replay_size"], without["replay_size"]) == (64, 0)
    assert (with_replay["uses_per_agent_step"], without["uses_per_agent_step"]) == (4.0, 1.0)
    # Four trainings of each agent step cost more learner time than one.
    assert with_replay["limit"] < without["limit"], result["system"]
    for row in (with_replay, without):
        assert row["agent_steps_per_s"] > 0 and row["learner_steps_per_s"] > 0, row
        # One learner: no faster than its fastest step alone, trained on `uses` times.
        uses, fastest = row["uses_per_agent_step"], result["stages"]["learner_fastest"]["rate"]
        assert row["learner_ceiling"] == pytest.approx(fastest / uses), row
        # ... and with its actors on the same cores, no faster still.
        assert 0 < row["packing_bound"] <= row["learner_ceiling"], row
        for bound in ("learner_ceiling", "packing_bound"):
            assert row[f"{bound}_over_limit"] == pytest.approx(row[bound] / row["limit"]), row
        assert row["learner_peak_rss_mb"] > 0 and row["learner_pss_mb"] > 0, row
        assert row["total_pss_mb"] >= row["learner_pss_mb"] + row["actor_pss_mb"], row
        # Paired rounds: the limit's stages timed while the system was paused, then its window.
        assert len(row["paired_rounds"]) == 2, row
        for round_ in row["paired_rounds"]:
            stage_ms = [round_[stage] for stage in ("env_raw", "inference_best", "learner_best")]
            assert min(stage_ms) > 0 and round_["agent_steps_per_s"] > 0, round_
            cpu_ms = stage_ms[0] + stage_ms[1] + row["uses_per_agent_step"] * stage_ms[2]
            assert round_["limit"] == pytest.approx(1e3 * os.cpu_count() / cpu_ms), round_
            assert round_["over_limit"] == pytest.approx(
                round_["agent_steps_per_s"] / round_["limit"]
            )
        ratios = sorted(round_["over_limit"] for round_ in row["paired_rounds"])
        assert row["paired_over_limit"] == pytest.approx(sum(ratios) / 2), row


@pytest.mark.skipif(
    network_namespaces.skip_reason("tc", "mpirun") is not None,
    reason=str(network_namespaces.skip_reason("tc", "mpirun")),
)
@pytest.mark.timeout(1500)  # above the wait below, so that a stuck run's log is printed
def test_the_scaling_benchmark_measures_allreduces_across_namespaces(start):
    """bench.scaling with one agent, one rate and Horovod's defaults: two real mpirun jobs whose
    ranks live in network namespaces (2 and 4 "hosts"), then the projection from them; the
    namespaces it made are gone afterwards (others', e.g. a concurrent run's, are not judged)."""
    before = set(namespaces())
    bench = start(
        [
            sys.executable,
            "-m",
            "bench.scaling",
            "--agents=SimpleConvNetAgent",
            "--rates=1gbit",
            "--options=default",
            "--rtts_ms=0.2",
            "--repeats=3",
        ],
        "bench",
    )
    try:  # ~1 min; each of its runs fails after bench.scaling.RUN_TIMEOUT_SECS, with its stacks
        assert bench.wait(timeout=1200) == 0, bench.log()[-15000:]
    finally:  # a stuck benchmark removes its namespaces on SIGTERM (SIGKILL would leave them)
        bench.popen.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            bench.popen.wait(timeout=60)
    result = json.loads([line for line in bench.log().splitlines() if line.startswith("{")][-1])
    measured = {m["ranks"]: m["allreduce_ms"] for m in result["measured"]}
    assert sorted(measured) == [2, 4] and all(ms > 0 for ms in measured.values()), measured
    projection = {p["learners"]: p for p in result["projection"]}
    assert sorted(projection) == [1, 2, 4, 8, 16]
    assert projection[1]["efficiency"] == 1 and projection[1]["allreduce_ms"] == 0
    for k in (2, 4, 8, 16):
        assert 0 < projection[k]["efficiency"] < 1, projection[k]
    left = {name for name in set(namespaces()) - before if name.startswith("impb-")}
    assert not left, f"namespaces left behind: {sorted(left)}"


def namespaces():
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


def test_the_learner_ranks_benchmark_times_several_learners_alone(tmp_path):
    """bench.learner_ranks.measure from a Horovod process, as bench.throughput calls it: one
    mpirun of 2 ranks (CartPole), both variants of the step, the ranks' summed rate of the
    faster, each rank with a learner's share of the cores."""
    caller = (
        "import dataclasses, json, sys\n"
        "import horovod.tensorflow as hvd\n"
        "import config\n"
        "from bench import learner_ranks\n"
        "hvd.init()  # its MPI singleton must not reach the mpirun it starts\n"
        "settings = dataclasses.replace(config.Config(), level_name='CartPole-v1',\n"
        "                               agent_name='MLPAgent', batch_size=4)\n"
        "figures = learner_ranks.measure(settings, 2, sys.argv[1], repeats=1, calls=3)\n"
        "print(json.dumps(figures))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", caller, str(tmp_path / "learner_ranks.log")],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.splitlines()[-1])
    assert figures["ranks"] == 2, figures
    assert figures["threads"] == max(1, os.cpu_count() // 2 - 1), figures
    assert min(figures["plain_rate"], figures["xla_rate"]) > 0, figures
    assert figures["rate"] == max(figures["plain_rate"], figures["xla_rate"]), figures
    assert figures["xla"] == (figures["xla_rate"] > figures["plain_rate"]), figures


def test_learner_ranks_names_a_failed_run(tmp_path):
    """A configuration the learners cannot build fails with mpirun's output in the error."""
    config = dataclasses.replace(config_lib.Config(), level_name="NoSuchGame-v0")
    with pytest.raises(
        RuntimeError, match=r"(?s)bench.learner_ranks on 2 ranks exited.*NoSuchGame"
    ):
        learner_ranks.measure(config, 2, tmp_path / "learner_ranks.log", repeats=1, calls=1)
