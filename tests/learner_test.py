"""learner.BatchPrefetcher on a real transport: batches arrive, and a failure reaches the caller."""

import time

import numpy as np
import pytest

import learner
from tests.transport_test import UNROLL_SPEC, start_learner_and_actor, unrolls


@pytest.fixture
def learner_and_actor():
    learner_side, actor_side = start_learner_and_actor()
    learner_side.initialize()
    yield learner_side, actor_side
    learner_side.session.close()
    actor_side.session.close()


def test_prefetcher_delivers_batches_then_raises_the_threads_failure(learner_and_actor):
    learner_side, actor_side = learner_and_actor
    prefetcher = learner.BatchPrefetcher(learner_side, batch_size=2)
    try:
        actor_side.enqueue(UNROLL_SPEC.flatten(unrolls(2, 0)))
        batch = UNROLL_SPEC.pack(prefetcher.get(timeout_secs=30, should_stop=lambda: False))
        np.testing.assert_array_equal(batch.reward, unrolls(2, 0).reward)

        # The thread's next dequeue fails (its session is gone): the next get() says so at
        # once instead of waiting out its timeout as if the actors had stopped sending.
        learner_side.session.close()
        start = time.monotonic()
        with pytest.raises(learner.PrefetchError, match="closed Session"):
            prefetcher.get(timeout_secs=60, should_stop=lambda: False)
        assert time.monotonic() - start < 20
    finally:
        prefetcher.stop()
