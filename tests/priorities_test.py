"""priorities.py: the learner's real-time policy for the threads it starts, and its refusals; the
learners' shares of a host's cores.

Each case runs in a Python process of its own: a thread's scheduling policy cannot be undone
by an unprivileged thread, and the test process must keep its own."""

import json
import os
import subprocess
import sys

import pytest

import priorities

# Starts a thread (as hvd.init() starts Horovod's), makes {call}, starts another (as TF starts
# its pools), prints what the call returned and {inspect} of each thread (0: the main one).
_CHILD = """
import json, os, threading
from absl import logging as absl_logging
absl_logging.set_verbosity(absl_logging.INFO)
import priorities

def started_thread():
    ready, ids = threading.Event(), []
    threading.Thread(target=lambda: (ids.append(threading.get_native_id()), ready.set(),
                                     threading.Event().wait()), daemon=True).start()
    ready.wait(10)
    return ids[0]

before = started_thread()
result = {call}
after = started_thread()
inspect = {inspect}
print(json.dumps({{"result": result, "main": inspect(0), "before": inspect(before),
                  "after": inspect(after)}}))
"""

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(call, inspect, prefix=()):
    result = subprocess.run(
        [*prefix, sys.executable, "-c", _CHILD.format(call=call, inspect=inspect)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=_ROOT,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def run_raising_child(enabled, prefix=()):
    """raise_learner_priority(enabled) -> {"result", and each thread's scheduling policy}."""
    return run_child(
        f"priorities.raise_learner_priority({enabled})", "os.sched_getscheduler", prefix
    )


def test_threads_started_after_the_call_run_real_time_and_earlier_ones_stay_normal():
    # The tests run as root (README), with the kernel's default real-time throttling.
    policies, log = run_raising_child(True)
    assert policies == {
        "result": True,
        "main": os.SCHED_FIFO,
        "before": os.SCHED_OTHER,
        "after": os.SCHED_FIFO,
    }, log
    assert "learner: real-time scheduling, SCHED_FIFO priority 1" in log


def test_without_cap_sys_nice_the_learner_says_so_and_stays_normal():
    no_sys_nice = ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", "--"]
    policies, log = run_raising_child(True, no_sys_nice)
    assert policies == {
        "result": False,
        "main": os.SCHED_OTHER,
        "before": os.SCHED_OTHER,
        "after": os.SCHED_OTHER,
    }
    assert "keeps the normal scheduling policy: SCHED_FIFO needs CAP_SYS_NICE" in log


def test_disabled_changes_nothing():
    policies, log = run_raising_child(False)
    assert not policies["result"] and {policies["main"], policies["after"]} == {os.SCHED_OTHER}
    assert "learner:" not in log


@pytest.mark.parametrize("setting", ["-1\n", "0\n", "", "unreadable"])
def test_without_real_time_throttling_the_learner_stays_normal(
    tmp_path, monkeypatch, caplog, setting
):
    # Throttling off (-1), no real-time time at all (0) or unknown: a spinning real-time
    # thread could hold a core for good, or never run.
    path = tmp_path / "sched_rt_runtime_us"
    path.write_text(setting)
    monkeypatch.setattr(priorities, "_RT_RUNTIME_PATH", str(path))
    with caplog.at_level("INFO"):
        assert not priorities.raise_learner_priority(True)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
    assert "the kernel's real-time throttling is off" in caplog.text


@pytest.mark.parametrize(
    "cores, local_rank, learners, share",
    [
        ([0, 1], 0, 2, [0]),
        ([0, 1], 1, 2, [1]),
        ([0, 1, 2, 3], 1, 2, [2, 3]),
        ([0, 1, 2], 1, 2, [1]),  # the odd core is left to the actors
        ([4, 6], 1, 2, [6]),  # the host's usable cores, not 0..n-1
        ([0, 1], 0, 1, [0, 1]),
        ([0, 1], 2, 3, [0, 1]),  # more learners than cores: each keeps every core
    ],
)
def test_each_learner_on_a_host_gets_an_equal_share_of_its_cores(
    cores, local_rank, learners, share
):
    assert priorities.learner_cores(cores, local_rank, learners) == share


def run_pinning_child(enabled):
    """pin_learner(enabled) as the last of as many learners as the host has cores -> {"result",
    and each thread's cores}."""
    return run_child(
        f"priorities.pin_learner({enabled}, len(os.sched_getaffinity(0)) - 1, "
        "len(os.sched_getaffinity(0)))",
        "lambda thread: sorted(os.sched_getaffinity(thread))",
    )


def test_a_pinned_learner_runs_every_thread_on_its_share_of_the_cores():
    cores = sorted(os.sched_getaffinity(0))  # 2 in CI: the child takes the last one.
    share = priorities.learner_cores(cores, len(cores) - 1, len(cores))
    threads, log = run_pinning_child(True)
    # Horovod's thread (started before) included: its polling stays off the other learner's core.
    assert threads == {"result": share, "main": share, "before": share, "after": share}, log
    if share != cores:
        assert f"learner: runs on cores {share} of {cores}, its share with {len(cores)}" in log


def test_an_unpinned_learner_keeps_every_core():
    cores = sorted(os.sched_getaffinity(0))
    threads, log = run_pinning_child(False)
    assert threads == {"result": cores, "main": cores, "before": cores, "after": cores}, log
    assert "runs on cores" not in log
