"""A watchdog for a loop that must keep making progress: when the loop stops coming back in
time, the process logs why, prints every thread's stack and exits.

  watchdog = Watchdog("[learner rank 0/2] step", EXIT_STUCK)
  while training:
      watchdog.expect_within(seconds, "--step_timeout_secs")  # the flag(s) that set `seconds`
      ...
  watchdog.stop()

A daemon thread checks the deadline every CHECK_SECS. A loop stuck inside a C call (a TF
session run, a Horovod collective) can be neither interrupted nor diagnosed from its own
thread: the watchdog dumps the stacks with faulthandler (which writes them even while other
threads hold locks) and leaves with os._exit, so that a supervisor sees a failed worker and
restarts it (for a learner: from its last checkpoint) instead of waiting forever.
"""

import faulthandler
import os
import sys
import threading
import time

from absl import logging

CHECK_SECS = 1.0


class Watchdog:
    """Exits the process with `exit_code` when `expect_within`'s deadline passes.

    Args:
      what: names the loop in the error, e.g. "[learner rank 0/2] step".
      exit_code: the process's exit status when the deadline passes.
    """

    def __init__(self, what, exit_code):
        self._what, self._exit_code = what, exit_code
        self._deadline = None  # (monotonic time, seconds, the flags that set them) or None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self._thread.start()

    def expect_within(self, seconds, flags):
        """Arms (or re-arms) the watchdog: the next call must come within `seconds`, which
        `flags` (named in the error, e.g. "--step_timeout_secs") set."""
        self._deadline = (time.monotonic() + seconds, seconds, flags)

    def stop(self):
        """Disarms the watchdog for good."""
        self._stopped.set()
        self._thread.join()

    def _watch(self):
        while not self._stopped.wait(CHECK_SECS):
            deadline = self._deadline
            if deadline is not None and time.monotonic() > deadline[0]:
                self._exit(*deadline[1:])

    def _exit(self, seconds, flags):
        logging.error(
            "%s did not finish within %d s (%s): stuck. The stacks of all threads follow; "
            "exiting with status %d so that the run's supervisor restarts it.",
            self._what,
            seconds,
            flags,
            self._exit_code,
        )
        logging.flush()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        sys.stderr.flush()
        os._exit(self._exit_code)
