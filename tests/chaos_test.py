"""bench/chaos.py end to end on CartPole: the run under --follow heals from every fault kind
(SIGKILL, SIGSTOP past --learner_wait_secs, a network cut, a learner's SIGTERM) and still
learns."""

import contextlib
import json
import os
import signal
import sys

import pytest

from tools import network_namespaces

pytestmark = pytest.mark.slow

KINDS = ("kill", "stop", "cut", "preempt")
# The chaos's own bound, with room for the slowest machines beside the rest of the suite
# (docs/history.md); the test waits longer.
TIMEOUT_SECS = 1500


@pytest.mark.timeout(TIMEOUT_SECS + 420)  # above the waits below, so that the log is printed
def test_chaos_on_cartpole_recovers_from_every_fault(start, tmp_path):
    reason = network_namespaces.skip_reason()  # The cut's namespace.
    if reason and os.environ.get("CI"):
        pytest.fail(f"CI runs as root and must run the chaos: {reason}")
    if reason:
        pytest.skip(reason)
    chaos = start(
        [
            sys.executable,
            "-m",
            "bench.chaos",
            "--level_name=CartPole-v1",
            f"--output_dir={tmp_path / 'runs'}",
            f"--timeout_secs={TIMEOUT_SECS}",
            "--kill_interval_secs=10",
            "--max_faults=4",  # One of each kind: the random kills after them take minutes.
            "--recovery_timeout_secs=300",
        ],
        "chaos",
    )
    try:
        assert chaos.wait(timeout=TIMEOUT_SECS + 120) == 0, chaos.log()[-5000:]
    finally:
        # SIGTERM first: the benchmark then stops its run and deletes its namespace, which the
        # fixture's SIGKILL of its process group would leave behind.
        chaos.signal(signal.SIGTERM)
        with contextlib.suppress(AssertionError):
            chaos.wait(timeout=120)
    result = json.loads(chaos.log().splitlines()[-1])
    assert result["passed"], chaos.log()[-5000:]
    assert {fault["kind"] for fault in result["faults"]} == set(KINDS), result["faults"]
    timeline = chaos.log()[chaos.log().index("fault   target") :]
    for kind in KINDS:
        assert f"  {kind} " in timeline, timeline
