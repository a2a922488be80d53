"""PopArt's value head (van Hasselt et al. 2016, "Learning values across many orders of
magnitude"; in IMPALA: Hessel et al. 2019): the value in units of its targets' running moments.

The head's linear layer outputs the value normalised, n; the baseline is std x n + mean. The
learner moves (mean, std) to its targets' running moments after each batch, and rescales the
layer so that every baseline stays what it was ("preserving outputs precisely"). So the layer's
steps are in the targets' units whatever their scale: a game whose values grow (Qbert's
targets' variance ~18 by 5M frames, BeamRider's ~0.1) moves its values as fast as any other.
(mean, std) are variables of the agent, not trained: they travel to the actors with the
parameters, whose stored values (PPO's advantages) are then the learner's.
"""

import sonnet as snt
import tensorflow as tf


class PopArtValueHead(snt.Module):
    """features [N, F] -> baseline [N, 1] = std x Linear(features) + mean."""

    def __init__(self, w_init=None, name="baseline"):
        super().__init__(name=name)
        self._normalized = snt.Linear(1, w_init=w_init, name="normalized")
        self._mean = tf.Variable(0.0, trainable=False, name="target_mean")
        self._std = tf.Variable(1.0, trainable=False, name="target_std")

    @property
    def mean(self):
        return self._mean

    @property
    def std(self):
        return self._std

    def __call__(self, features):
        return self._std * self._normalized(features) + self._mean

    def preserve_outputs(self, mean, std):
        """Moves the statistics to `mean`, `std` (float32 scalars, std > 0) and rescales the
        layer so that std' x n' + mean' equals std x n + mean for every input."""
        layer = self._normalized
        layer.w.assign(layer.w * (self._std / std))
        layer.b.assign((self._std * layer.b + self._mean - mean) / std)
        self._mean.assign(mean)
        self._std.assign(std)
