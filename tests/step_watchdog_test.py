"""step_watchdog.py in real processes: a loop that stops coming back is reported and exits the
process; a stopped watchdog never fires."""

import subprocess
import sys
import textwrap

from learner import EXIT_STUCK
from tools import local_cluster


def run_python(code):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_loop_stuck_past_its_deadline_exits_the_process_with_every_stack():
    result = run_python(
        f"""
        import threading
        from step_watchdog import Watchdog

        def stuck_in_a_blocking_call():
            threading.Event().wait()  # never set

        watchdog = Watchdog("[learner rank 0/1] step", {EXIT_STUCK})
        watchdog.expect_within(1, "--batch_timeout_secs + --step_timeout_secs")
        stuck_in_a_blocking_call()
        """
    )
    assert result.returncode == EXIT_STUCK, result.stderr
    assert (
        "[learner rank 0/1] step did not finish within 1 s (--batch_timeout_secs + "
        f"--step_timeout_secs): stuck. The stacks of all threads follow; exiting with status "
        f"{EXIT_STUCK}" in result.stderr
    )
    assert "in stuck_in_a_blocking_call" in result.stderr  # the main thread's stack
    assert "in _watch" in result.stderr  # and the watchdog's own


def test_a_stopped_watchdog_never_fires():
    result = run_python(
        """
        import time
        from step_watchdog import Watchdog

        watchdog = Watchdog("loop", 4)
        watchdog.expect_within(1, "--step_timeout_secs")
        watchdog.stop()
        time.sleep(3)
        print("still running")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "still running\n"
