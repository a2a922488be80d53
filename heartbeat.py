"""A process's own freezes, told from others' silence: a thread that wakes every `tick_secs`
and records the longest gap between its wake-ups.

A learner that waited too long for a batch may have been stopped itself (SIGSTOP, a suspended
VM or container, heavy swapping): then its clock ran on while none of its threads did, and its
actors are not to blame. A gap much longer than the tick is such a freeze.
"""

import threading
import time

FROZEN_GAP_SECS = 5.0  # A gap this long, against a tick of 1 s, is no scheduling delay.


class Heartbeat:
    """The longest gap between beats since `restart()`, on `clock` (time.monotonic, which runs
    on while the process is stopped). `start()` beats every `tick_secs` on a daemon thread; a
    test calls `beat()` itself."""

    def __init__(self, tick_secs=1.0, clock=time.monotonic):
        self._tick_secs = tick_secs
        self._clock = clock
        self._stopping = threading.Event()
        self._thread = None
        self.restart()

    def restart(self):
        """Forgets the gaps so far: the next `longest_gap()` covers from now on."""
        self._last = self._clock()
        self._longest = 0.0

    def beat(self):
        now = self._clock()
        self._longest = max(self._longest, now - self._last)
        self._last = now

    def longest_gap(self):
        """Seconds of the longest gap since `restart()`, the one still open included (the
        thread may not have run yet since the process was let go on)."""
        return max(self._longest, self._clock() - self._last)

    def frozen_secs(self):
        """The longest gap if it was a freeze of this process (FROZEN_GAP_SECS or more), else 0."""
        gap = self.longest_gap()
        return gap if gap >= FROZEN_GAP_SECS else 0.0

    def start(self):
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def stop(self):
        self._stopping.set()

    def _run(self):
        while not self._stopping.wait(self._tick_secs):
            self.beat()
