"""The learner's side of a real transport: prefetch.BatchPrefetcher's batches arrive, and the end
of training and a failure are told apart, wherever the prefetch thread happens to be when they
come; published parameters are the values of the moment, whatever updates follow."""

import threading
import types

import numpy as np
import pytest
import tensorflow as tf

import learner
import prefetch
import train_step
from tests.loopback_transport import (
    PARAMETER_SPECS,
    UNROLL_SPEC,
    start_learner_and_actor,
    unrolls,
)


@pytest.fixture
def learner_and_actor():
    learner_side, actor_side = start_learner_and_actor()
    learner_side.initialize()
    yield learner_side, actor_side
    learner_side.session.close()
    actor_side.session.close()


class _Gate:
    """Wraps the learner's transport: its next dequeue blocks until the test opens the gate,
    then fails with `error` (if given). Tells the test when the thread is waiting at it."""

    def __init__(self, transport, error=None):
        self._transport = transport
        self._error = error
        self.waiting = threading.Event()
        self.open = threading.Event()

    def dequeue(self, batch_size, timeout_ms):
        self.waiting.set()
        self.open.wait()
        if self._error is not None:
            raise self._error
        return self._transport.dequeue(batch_size, timeout_ms)


def never():
    return False


def test_prefetcher_delivers_a_batch_then_returns_none_once_the_queue_is_closed(
    learner_and_actor,
):
    learner_side, actor_side = learner_and_actor
    prefetcher = prefetch.BatchPrefetcher(learner_side, batch_size=2)
    try:
        actor_side.enqueue(tf.nest.flatten(unrolls(2, 0)))
        batch = UNROLL_SPEC.pack(prefetcher.get(timeout_secs=60, should_stop=never))
        np.testing.assert_array_equal(batch.reward, unrolls(2, 0).reward)
        learner_side.finish()  # closes the queue: training is over, not a failure
        assert prefetcher.get(timeout_secs=600, should_stop=never) is None
    finally:
        prefetcher.stop()


@pytest.mark.parametrize(
    "error",
    [
        # The session closed under a running dequeue (what closing it mid-call raises)...
        tf.errors.CancelledError(None, None, "Run call was cancelled"),
        # ...or before the next one.
        RuntimeError("Attempted to use a closed Session."),
    ],
    ids=["cancelled", "closed"],
)
def test_prefetcher_raises_when_the_session_fails_under_it(learner_and_actor, error):
    learner_side, _ = learner_and_actor
    gate = _Gate(learner_side, error)
    prefetcher = prefetch.BatchPrefetcher(gate, batch_size=2)
    try:
        assert gate.waiting.wait(timeout=60)
        gate.open.set()
        with pytest.raises(prefetch.PrefetchError, match=type(error).__name__):
            prefetcher.get(timeout_secs=600, should_stop=never)
    finally:
        prefetcher.stop()


def test_a_real_closed_session_is_a_failure(learner_and_actor):
    """The real thing: the learner's session is closed while the thread waits to dequeue."""
    learner_side, _ = learner_and_actor
    gate = _Gate(learner_side)
    prefetcher = prefetch.BatchPrefetcher(gate, batch_size=2)
    try:
        assert gate.waiting.wait(timeout=60)
        learner_side.session.close()
        gate.open.set()
        with pytest.raises(prefetch.PrefetchError, match="closed Session"):
            prefetcher.get(timeout_secs=600, should_stop=never)
    finally:
        prefetcher.stop()


def test_published_parameters_are_not_changed_by_later_updates(learner_and_actor):
    """parameter_snapshot gives views of the variables' tensors, not copies: the learner's next
    updates (Adam's fused kernel compiled by XLA, as train_step applies them, and an assign)
    must not reach what was published."""
    learner_side, actor_side = learner_and_actor
    variables = [
        tf.Variable(tf.random.normal(shape, dtype=dtype)) for shape, dtype in PARAMETER_SPECS
    ]
    optimizer = train_step.FusedAdam(learning_rate=0.1)
    optimizer.apply([tf.zeros_like(v) for v in variables], variables)  # Its slots, eagerly.
    update = tf.function(
        lambda: optimizer.apply([tf.ones_like(v) for v in variables], variables), jit_compile=True
    )
    before = [v.numpy() for v in variables]

    snapshot = learner.parameter_snapshot(variables)
    assert learner_side.publish(snapshot, frames=0) == 1
    update()
    variables[0].assign_add(tf.ones_like(variables[0]))

    pulled, version, _ = actor_side.pull_parameters()
    assert version == 1
    for value, old, new, snapshot_value in zip(pulled, before, variables, snapshot, strict=True):
        np.testing.assert_array_equal(value, old)
        np.testing.assert_array_equal(snapshot_value, old)
        assert not np.any(new.numpy() == old)  # The updates did move every element.


def test_a_finished_learner_serves_until_its_evaluator_takes_the_final_parameters(
    learner_and_actor,
):
    """serve_final_parameters returns once a client (the evaluator) says it holds them."""
    learner_side, client_side = learner_and_actor
    served = []
    thread = threading.Thread(
        target=lambda: served.append(
            learner.serve_final_parameters(learner_side, "127.0.0.1:1", 600, "[learner]")
        )
    )
    thread.start()
    client_side.take_final_parameters()
    thread.join(timeout=120)
    assert served == [True]


def test_a_finished_learner_stops_serving_an_evaluator_that_never_takes_them(
    learner_and_actor, caplog
):
    learner_side, _ = learner_and_actor
    assert not learner.serve_final_parameters(learner_side, "127.0.0.1:1", 0, "[learner]")
    assert "evaluator 127.0.0.1:1 did not take the final parameters in 0 s" in caplog.text


class _Prefetcher:
    """A prefetcher whose waits all time out; each wait runs `during_wait` (the test's freeze)."""

    def __init__(self, during_wait):
        self.waits = 0
        self._during_wait = during_wait

    def get(self, _timeout_secs, _should_stop):
        self.waits += 1
        self._during_wait(self.waits)
        return None


class _Heart:
    def __init__(self):
        self.frozen = 0.0

    def restart(self):
        self.frozen = 0.0

    def frozen_secs(self):
        return self.frozen


class _Watchdog:
    def __init__(self):
        self.armed = []

    def expect_within(self, seconds, flags):
        self.armed.append((seconds, flags))


def _waiting_learner():
    """A Learner with only what its batch wait needs: a step timeout of 900 s, no stop."""
    waiting = learner.Learner.__new__(learner.Learner)
    waiting._config = types.SimpleNamespace(step_timeout_secs=900)
    waiting._stop_signal = None
    waiting._log_prefix = "[learner rank 0/1]"
    return waiting


def test_a_batch_wait_the_learner_spent_frozen_blames_no_actor_and_starts_again(caplog):
    heart, watchdog = _Heart(), _Watchdog()

    def frozen_during_the_first_wait(wait):
        heart.frozen = 75.0 if wait == 1 else 0.0

    prefetcher = _Prefetcher(frozen_during_the_first_wait)
    batch = _waiting_learner()._next_batch(prefetcher, watchdog, heart, 60, "batch_timeout_secs")
    assert batch is None and prefetcher.waits == 2  # The second wait: the actors' silence.
    assert watchdog.armed == [(960, "--batch_timeout_secs + --step_timeout_secs")] * 2
    assert (
        "no batch in 60 s (--batch_timeout_secs), but this learner itself was stopped or frozen "
        "for 75 s meanwhile (SIGSTOP? a suspended host?): not blaming its actors; waiting again"
    ) in caplog.text


def test_a_batch_wait_without_a_freeze_is_the_actors_silence():
    prefetcher = _Prefetcher(lambda _wait: None)
    batch = _waiting_learner()._next_batch(
        prefetcher, _Watchdog(), _Heart(), 60, "batch_timeout_secs"
    )
    assert batch is None and prefetcher.waits == 1
