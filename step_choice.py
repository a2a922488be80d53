"""The learner's batch step compiled by XLA or run as plain TF: whichever this machine runs cheaper.

Which one is cheaper depends on the CPU: XLA on some, plain TF on others, such as CPUs with
AVX-512, where TF's plain kernels (oneDNN) are fast. With --xla=auto (the default) the learner
trains its batches with the two steps in turn (they compute the same update:
tests/train_step_test.py), times each call's CPU, and once each has TRIAL_BATCHES timed batches
keeps the cheaper for the rest of the run (for batches of that shape).

The choice is made per batch shape (unrolls, minibatches): each step compiles anew for a new
shape (a learner's batch grows once replay starts), and which is cheaper may differ. A change of
shape before the choice starts the trial over; a step's first call at a shape (its compilation)
is not timed. CPU is this process's (all its threads), as the benchmarks count it: what the
learner's cores cost on a machine whose cores are all busy. The ranks of several learners take
their steps in lock-step, so they all reach the choice at the same batch and take the one of
their average medians.
"""

import time

import numpy as np
import tensorflow as tf
from absl import logging

TRIAL_BATCHES = 8


class CheaperStep:
    """A batch step (see train_step.train_batch) that picks the cheaper of two, per batch shape.

    Args:
      steps: {"xla": step, "plain": step}, each called as step(unroll, unroll_weights, order,
        minibatches).
      hvd: Horovod (or train_step.SingleProcess): the ranks agree on the choice.
      trial_batches: timed calls of each step before choosing.
    """

    def __init__(self, steps, hvd, trial_batches=TRIAL_BATCHES):
        self._steps = steps
        self._hvd = hvd
        self._trial_batches = trial_batches
        self.chosen = {}  # batch shape (unrolls, minibatches) -> the name of the step kept
        self._shape = None
        self._calls = 0

    def _start_trial(self, shape):
        self._shape = shape
        self._compiled = set()
        self._cpu_secs = {name: [] for name in self._steps}

    def __call__(self, unroll, unroll_weights, order, minibatches):
        shape = (len(unroll_weights), minibatches)
        if shape in self.chosen:
            return self._steps[self.chosen[shape]](unroll, unroll_weights, order, minibatches)
        if shape != self._shape:
            self._start_trial(shape)
        names = list(self._steps)
        name = names[self._calls % len(names)]  # in turn: the machine's drift weighs on both
        self._calls += 1
        start = time.process_time()
        outputs = self._steps[name](unroll, unroll_weights, order, minibatches)
        cpu_secs = time.process_time() - start
        if name in self._compiled:
            self._cpu_secs[name].append(cpu_secs)
        self._compiled.add(name)
        if all(len(times) >= self._trial_batches for times in self._cpu_secs.values()):
            self._choose()
        return outputs

    def _choose(self):
        medians = np.array([np.median(self._cpu_secs[name]) for name in self._steps])
        if self._hvd.size() > 1:
            medians = self._hvd.allreduce(
                tf.constant(medians), op=self._hvd.Average, name="step_choice"
            ).numpy()
        costs = dict(zip(self._steps, medians, strict=True))
        self.chosen[self._shape] = min(costs, key=costs.get)
        logging.info(
            "rank %d/%d: batch step of %d unrolls in %d minibatches, median CPU s per batch of "
            "%d each in turn%s: %s; keeping the %s step",
            self._hvd.rank(),
            self._hvd.size(),
            *self._shape,
            self._trial_batches,
            ", averaged over the ranks" if self._hvd.size() > 1 else "",
            ", ".join(f"{name} {cost:.4f}" for name, cost in costs.items()),
            self.chosen[self._shape],
        )
        self._shape = None
