"""learner_link.StallWatch on a fake clock: a learner whose parameters stay at one version for
--learner_wait_secs while the actor's unrolls wait is given up on, as a lost learner."""

import pytest

from learner_link import LearnerUnreachableError, StallWatch

WAIT_SECS = 30


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def watch_and_clock():
    clock = Clock()
    return StallWatch(WAIT_SECS, "actor 0 (127.0.0.1:2)", "127.0.0.1:1", clock), clock


def test_a_learner_whose_version_moves_is_never_stalled(watch_and_clock):
    watch, clock = watch_and_clock
    for version in range(1, 100):
        watch.saw(version)
        clock.now += WAIT_SECS - 1
        watch.check()


def test_a_version_still_for_the_wait_gives_up_naming_the_learner_and_the_flag(watch_and_clock):
    watch, clock = watch_and_clock
    watch.saw(41)
    clock.now += 10
    watch.saw(42)
    clock.now += 20
    watch.saw(42)  # The same version pulled again: no progress.
    assert watch.call_timeout_secs() == pytest.approx(11)  # 10 s left, and a second beyond.
    clock.now += 9.5
    watch.check()
    clock.now += 1.5  # The call timed out: the version has been still for 31 s.
    with pytest.raises(LearnerUnreachableError) as gave_up:
        watch.check()
    assert str(gave_up.value) == (
        "actor 0 (127.0.0.1:2): learner 127.0.0.1:1's parameters stayed at version 42 for 31 s "
        "(--learner_wait_secs=30) while this actor's unrolls waited: the learner is stopped, "
        "frozen or stuck"
    )
    assert watch.call_timeout_secs() == pytest.approx(1)


def test_a_reconnection_starts_the_count_again(watch_and_clock):
    watch, clock = watch_and_clock
    watch.saw(7)
    clock.now += WAIT_SECS + 5
    watch.restart()  # A restarted learner, reached again.
    watch.check()
    watch.saw(1)
    clock.now += WAIT_SECS - 1
    watch.check()


def test_a_learner_not_seen_training_since_the_connection_is_waited_for(watch_and_clock):
    """Its first step (every rank's first batch, the compilation) may outlast the wait; the
    learner's own timeouts end one that is stuck there."""
    watch, clock = watch_and_clock
    watch.saw(5)
    clock.now += 3 * WAIT_SECS
    watch.saw(5)
    watch.check()
    assert watch.call_timeout_secs() == pytest.approx(WAIT_SECS + 1)
    watch.saw(6)  # It trained: from now on its stillness counts.
    clock.now += WAIT_SECS
    with pytest.raises(LearnerUnreachableError):
        watch.check()
