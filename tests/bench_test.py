"""The benchmarks as users stop them: SIGTERM or SIGHUP leaves no worker running."""

import signal
import sys
import time

import psutil
import pytest

import local_cluster

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stopped_benchmark_takes_its_workers_with_it(start, tmp_path, signum):
    bench = start(
        [
            sys.executable,
            "-m",
            "bench.learning",
            "--runs=cartpole",
            f"--output_dir={tmp_path}",
            "--max_load=1000",  # measure at once, however loaded the machine
        ],
        "bench",
    )
    deadline = time.monotonic() + 300
    while True:  # until its learner and two actors run
        workers = local_cluster.experiment_processes(bench.popen.pid)
        if len(workers) == 3 or bench.popen.poll() is not None or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(workers) == 3, bench.log()[-3000:]

    bench.popen.send_signal(signum)  # to the benchmark alone, not its process group
    assert bench.wait(timeout=120) == 128 + signum, bench.log()[-3000:]
    _, alive = psutil.wait_procs(workers, timeout=60)
    assert alive == [], [p.cmdline() for p in alive]
