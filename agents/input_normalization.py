"""Input normalisation: each observation element scaled by its running mean and deviation.

As Sample Factory's `--normalize_input` (rl_games' RunningMeanStd): per element of a frame,
`clip((x - mean) / sqrt(var + 1e-5), -5, 5)`. On Atari the background's constant pixels go to
0 and the few that move (a ball, a paddle) to a few units, where a division by 255 alone
leaves them faint. The learner folds in the moments of each batch's fresh frames; the
statistics travel to the actors with the parameters and are checkpointed with them.
"""

import sonnet as snt
import tensorflow as tf

_EPSILON = 1e-5  # added to the variance: constant elements are not divided by zero
_CLIP = 5.0


class InputNormalizer(snt.Module):
    """Running per-element mean and variance of frames [N, *D], and the frames they normalise.

    Its variables (mean and variance [*D], the count of frames folded in) are not trainable;
    they are created on the first call, from zero mean and unit variance.
    """

    def __init__(self, name="input_normalizer"):
        super().__init__(name=name)
        self._mean = self._variance = self._count = None

    @snt.once
    def _create_variables(self, element_shape):
        self._mean = tf.Variable(tf.zeros(element_shape), trainable=False, name="mean")
        self._variance = tf.Variable(tf.ones(element_shape), trainable=False, name="variance")
        self._count = tf.Variable(0.0, trainable=False, name="count")

    def __call__(self, frames):
        """float32 frames [N, *D] -> float32 [N, *D] in [-5, 5]."""
        self._create_variables(frames.shape[1:])
        normalized = (frames - self._mean) * tf.math.rsqrt(self._variance + _EPSILON)
        return tf.clip_by_value(normalized, -_CLIP, _CLIP)

    def fold(self, mean, mean_square, count):
        """Folds in a batch's moments (Chan et al.'s parallel update of mean and variance).

        Args:
          mean, mean_square: float32 [*D], the batch's mean of x and of x**2 per element.
          count: the number of frames they are the moments of.
        """
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


@tf.function
def moments(frames):
    """Per-element mean of x and of x**2 over frames [N, *D] (uint8 scaled to [0, 1], as the
    agent sees them): two float32 [*D]."""
    frames = scaled_frames(frames)
    return tf.reduce_mean(frames, axis=0), tf.reduce_mean(tf.square(frames), axis=0)


def scaled_frames(observation):
    """float32 frames: uint8 ones scaled to [0, 1], float ones as they are."""
    if observation.dtype == tf.uint8:
        return tf.cast(observation, tf.float32) / 255.0
    return tf.cast(observation, tf.float32)
