"""heartbeat.Heartbeat on a fake clock: a gap much longer than its tick is the process's own
freeze; the beats of a running process, even late ones, are not."""

import time

import pytest

from heartbeat import FROZEN_GAP_SECS, Heartbeat


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def beats(heart, clock, gaps):
    for gap in gaps:
        clock.now += gap
        heart.beat()


def test_late_beats_of_a_running_process_are_no_freeze():
    clock = Clock()
    heart = Heartbeat(clock=clock)
    beats(heart, clock, [1.0, 1.2, 3.0, 1.0])
    assert heart.longest_gap() == pytest.approx(3.0)
    assert heart.frozen_secs() == 0


def test_a_stopped_process_shows_one_long_gap_even_before_its_thread_beats_again():
    clock = Clock()
    heart = Heartbeat(clock=clock)
    beats(heart, clock, [1.0, 1.0])
    clock.now += 75  # SIGSTOP ... SIGCONT: the main thread looks before the heartbeat's thread.
    assert heart.frozen_secs() == pytest.approx(75)
    heart.beat()
    beats(heart, clock, [1.0] * 10)
    assert heart.frozen_secs() == pytest.approx(75)


def test_restart_forgets_the_gaps_before_it():
    clock = Clock()
    heart = Heartbeat(clock=clock)
    beats(heart, clock, [FROZEN_GAP_SECS + 1])
    heart.restart()
    beats(heart, clock, [1.0, 1.0])
    assert heart.longest_gap() == pytest.approx(1.0) and heart.frozen_secs() == 0


def test_its_thread_beats_every_tick():
    heart = Heartbeat(tick_secs=0.01)
    heart.start()
    time.sleep(0.2)
    heart.stop()
    assert heart.longest_gap() < FROZEN_GAP_SECS
