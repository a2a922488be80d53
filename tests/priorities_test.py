"""priorities.py: the learner's real-time policy for the threads it starts, and its refusals.

Each case runs in a Python process of its own: a thread's scheduling policy cannot be undone
by an unprivileged thread, and the test process must keep its own."""

import json
import os
import subprocess
import sys

import pytest

import priorities

# Starts a thread (as hvd.init() starts Horovod's), calls raise_learner_priority, starts another
# (as TF starts its pools), prints the result and each thread's policy.
_CHILD = """
import json, logging, os, threading
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
raised = priorities.raise_learner_priority({enabled})
after = started_thread()
print(json.dumps({{"raised": raised, "main": os.sched_getscheduler(0),
                  "before": os.sched_getscheduler(before), "after": os.sched_getscheduler(after)}}))
"""

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(enabled, prefix=()):
    result = subprocess.run(
        [*prefix, sys.executable, "-c", _CHILD.format(enabled=enabled)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=_ROOT,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_threads_started_after_the_call_run_real_time_and_earlier_ones_stay_normal():
    # The tests run as root (README), with the kernel's default real-time throttling.
    policies, log = run_child(True)
    assert policies == {
        "raised": True,
        "main": os.SCHED_FIFO,
        "before": os.SCHED_OTHER,
        "after": os.SCHED_FIFO,
    }, log
    assert "learner: real-time scheduling, SCHED_FIFO priority 1" in log


def test_without_cap_sys_nice_the_learner_says_so_and_stays_normal():
    no_sys_nice = ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", "--"]
    policies, log = run_child(True, no_sys_nice)
    assert policies == {
        "raised": False,
        "main": os.SCHED_OTHER,
        "before": os.SCHED_OTHER,
        "after": os.SCHED_OTHER,
    }
    assert "keeps the normal scheduling policy: SCHED_FIFO needs CAP_SYS_NICE" in log


def test_disabled_changes_nothing():
    policies, log = run_child(False)
    assert not policies["raised"] and {policies["main"], policies["after"]} == {os.SCHED_OTHER}
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
