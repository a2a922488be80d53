"""Running mean and variance of a stream of batches, each folded in by its moments.

The statistics behind --normalize_input (per element of a frame, input_normalization.py)
and --normalize_value_loss (of the value targets, one scalar; learner.py). The mean over all
batches so far, as Sample Factory's and rl_games' RunningMeanStd: no forgetting.
"""

import sonnet as snt
import tensorflow as tf


class RunningMoments(snt.Module):
    """Running per-element mean and variance [*D] of the batches folded in, and their count.

    Its variables are not trainable; `create_variables` makes them, zero mean and unit variance,
    counted as `prior_count` samples: the first batches then move the statistics from that
    start in proportion to their size, instead of replacing it (0: the first batch replaces it).
    """

    def __init__(self, name, prior_count=0):
        super().__init__(name=name)
        self._prior_count = float(prior_count)
        self._mean = self._variance = self._count = None

    @snt.once
    def create_variables(self, element_shape):
        self._mean = tf.Variable(tf.zeros(element_shape), trainable=False, name="mean")
        self._variance = tf.Variable(tf.ones(element_shape), trainable=False, name="variance")
        self._count = tf.Variable(self._prior_count, trainable=False, name="count")

    @property
    def mean(self):
        return self._mean

    @property
    def variance(self):
        return self._variance

    def fold(self, mean, mean_square, count):
        """Folds in a batch's moments (Chan et al.'s parallel update of mean and variance).

        Args:
          mean, mean_square: float32 [*D], the batch's mean of x and of x**2 per element.
          count: the number of samples they are the moments of.
        """
        mean, mean_square = (tf.cast(m, tf.float32) for m in (mean, mean_square))
        total = self._count + count
        batch_weight = count / total
        delta = mean - self._mean
        batch_variance = tf.maximum(mean_square - tf.square(mean), 0.0)
        # Pooled second moment about the new mean: both parts' variances plus their spread.
        variance = (1.0 - batch_weight) * self._variance + batch_weight * batch_variance
        variance += batch_weight * (1.0 - batch_weight) * tf.square(delta)
        self._mean.assign_add(batch_weight * delta)
        self._variance.assign(variance)
        self._count.assign(total)
