"""The running moments behind --normalize_input and --normalize_value_loss: batches folded in
give the mean and variance of all their samples, and the learner folds the value targets'
moments of each trained batch, pooled as one batch of all its steps."""

import types

import numpy as np

import config as config_lib
import learner
from agents.running_moments import RunningMoments


def test_scalar_batches_folded_in_give_the_moments_of_all_their_samples():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=i, scale=1 + i, size=n) for i, n in enumerate((64, 128, 3))]
    moments = RunningMoments(name="targets")
    moments.create_variables([])
    for batch in batches:
        moments.fold(np.mean(batch), np.mean(np.square(batch)), len(batch))
    everything = np.concatenate(batches)
    np.testing.assert_allclose(moments.mean.numpy(), everything.mean(), rtol=1e-5)
    np.testing.assert_allclose(moments.variance.numpy(), everything.var(), rtol=1e-4)


def test_the_learner_folds_the_targets_of_every_step_of_the_trained_batch():
    """A batch of 4 unrolls of T steps counts 4 T targets: after a first batch of targets
    [0, 2] and a second of [4, 6], the moments are those of the four values."""
    training = learner.Learner.__new__(learner.Learner)
    training._config = config_lib.Config(unroll_length=8)
    training._hvd = types.SimpleNamespace(size=lambda: 1)
    training._agent = types.SimpleNamespace(popart_head=None)  # the plain value head
    training._target_moments = RunningMoments(name="value_target_moments")
    training._target_moments.create_variables([])
    for targets in ([0.0, 2.0], [4.0, 6.0]):
        outputs = {
            "target_mean": np.mean(targets),
            "target_mean_square": np.mean(np.square(targets)),
        }
        training._update_target_statistics(outputs, num_unrolls=4)
    assert float(training._target_moments.mean.numpy()) == 3.0
    np.testing.assert_allclose(training._target_moments.variance.numpy(), 5.0, rtol=1e-6)
