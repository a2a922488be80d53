"""step_choice.CheaperStep: both steps in turn, compilations untimed, the cheaper kept."""

import numpy as np
import pytest

import train_step
from step_choice import CheaperStep


def burning_step(name, iterations, calls):
    """A batch step that records its name and burns CPU in proportion to `iterations`."""

    def step(unroll, unroll_weights, order, minibatches):
        calls.append(name)
        total = 0
        for i in range(iterations):
            total += i * i
        return name, total

    return step


def weights(unrolls):
    return np.ones(unrolls, np.float32)


@pytest.mark.parametrize("cheap_first", [True, False])
def test_the_steps_run_in_turn_and_the_cheaper_is_kept(cheap_first):
    calls = []
    steps = {"cheap": burning_step("cheap", 20_000, calls)}
    steps["costly"] = burning_step("costly", 400_000, calls)  # 20x the CPU of the cheap one
    if not cheap_first:
        steps = dict(reversed(steps.items()))
    first, second = list(steps)
    choice = CheaperStep(steps, train_step.SingleProcess, trial_batches=3)
    for _ in range(7):  # each step's first call (its compilation) and 2 timed ones
        choice(None, weights(8), None, 2)
        assert choice.chosen == {}
    assert calls == [first, second] * 3 + [first]
    choice(None, weights(8), None, 2)  # the second step's third timed call: time to choose
    assert choice.chosen == {(8, 2): "cheap"}
    for _ in range(3):
        assert choice(None, weights(8), None, 2)[0] == "cheap"
    assert calls[8:] == ["cheap"] * 3


def test_each_batch_shape_has_its_own_trial():
    """A step compiles anew for each shape (a learner's batch grows once replay starts): a new
    shape drops the times taken at the old one before a choice, and gets a trial of its own
    after one; each step's first call at a shape is not timed."""
    calls = []
    steps = {name: burning_step(name, 1000, calls) for name in ("a", "b")}
    choice = CheaperStep(steps, train_step.SingleProcess, trial_batches=2)
    for _ in range(5):  # a, b untimed; a, b, a timed: b lacks one
        choice(None, weights(2), None, 8)
    for _ in range(5):  # the batch grows: b, a untimed (in turn from where it was); b, a, b timed
        choice(None, weights(8), None, 8)
        assert choice.chosen == {}
    choice(None, weights(8), None, 8)  # a's second timed call at the new shape
    assert list(choice.chosen) == [(8, 8)]
    assert calls == ["a", "b"] * 5 + ["a"]
    kept = choice.chosen[(8, 8)]
    for _ in range(6):  # back to the first shape: a trial of its own (2 untimed, 4 timed)
        choice(None, weights(2), None, 8)
    assert list(choice.chosen) == [(8, 8), (2, 8)]
    assert calls[11:] == ["b", "a"] * 3
    choice(None, weights(8), None, 8)
    assert calls[-1] == kept
