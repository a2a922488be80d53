"""The learner's batch prefetcher: dequeues and prepares the next batch while one trains.

TF's dequeue releases the GIL, so it overlaps the train step; so does most of preparing the
batch (the learner's replay_mixing.ReplayMixer: replayed unrolls, with the forward passes that
choose them, numpy and TF kernels). One prepared batch is held ready (queue.Queue(maxsize=1)).
The thread ends in one of three ways, which `get()` tells apart:
  - stop() was called: nothing more is wanted;
  - the unroll queue was closed (OutOfRangeError): training is over, `get()` returns None at once;
  - anything else failed, including the session being closed under a running dequeue
    (CancelledError) or before one (RuntimeError): `get()` raises PrefetchError, so that the
    learner stops at once (with its final checkpoint) instead of starving for
    --batch_timeout_secs as if its actors had gone quiet.
"""

import queue
import threading
import time

import tensorflow as tf

_POLL_MS = 500


class PrefetchError(RuntimeError):
    """The thread that dequeues batches for the learner failed."""


def _as_dequeued(batch):
    return batch


class BatchPrefetcher:
    """Keeps one batch of `batch_size` unrolls dequeued from `transport` ready for `get()`, as
    `prepare` (called in the prefetch thread on the flat list of [B, ...] arrays) makes it."""

    def __init__(self, transport, batch_size, prepare=_as_dequeued):
        self._transport = transport
        self._batch_size = batch_size
        self._prepare = prepare
        self._ready = queue.Queue(maxsize=1)
        self._stopping = threading.Event()
        self._queue_closed = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="batch-prefetch", daemon=True)
        self._thread.start()

    def _run(self):
        try:
            self._prefetch()
        except tf.errors.OutOfRangeError:
            self._queue_closed.set()  # the learner closed the queue: training is over.
        except Exception as e:  # noqa: BLE001 - handed to the main thread by get().
            if not self._stopping.is_set():
                self._error = e

    def _prefetch(self):
        while not self._stopping.is_set():
            try:
                batch = self._transport.dequeue(self._batch_size, _POLL_MS)
            except tf.errors.DeadlineExceededError:
                continue
            batch = self._prepare(batch)
            while not self._stopping.is_set():
                try:
                    self._ready.put(batch, timeout=_POLL_MS / 1000)
                    break
                except queue.Full:
                    continue

    def get(self, timeout_secs, should_stop):
        """The next batch; None after `timeout_secs`, once should_stop() is true or once the
        queue is closed. Raises PrefetchError if the prefetch thread failed."""
        deadline = time.monotonic() + timeout_secs
        while not should_stop():
            try:
                return self._ready.get(timeout=min(max(deadline - time.monotonic(), 0), 0.1))
            except queue.Empty:
                pass
            if self._error is not None:
                raise PrefetchError(
                    f"dequeuing or preparing batches failed: {self._error!r}"
                ) from self._error
            if self._queue_closed.is_set() or time.monotonic() >= deadline:
                return None
        return None

    def stop(self):
        self._stopping.set()
        self._thread.join(timeout=5)
