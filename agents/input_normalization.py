"""Input normalisation: each observation element scaled by its running mean and deviation.

As Sample Factory's `--normalize_input` (rl_games' RunningMeanStd): per element of a frame,
`clip((x - mean) / sqrt(var + 1e-5), -5, 5)`. On Atari the background's constant pixels go to
0 and the few that move (a ball, a paddle) to a few units, where a division by 255 alone
leaves them faint. The learner folds in the moments of each batch's fresh frames; the
statistics travel to the actors with the parameters and are checkpointed with them.

The first batch alone would set the statistics: its elements that do not change within it (most
of the screen at the start of a game) get a variance near 0, so that anything later moving there
is scaled to +-5 at once. With a prior (`prior_count` > 0) the statistics start as that many
frames of mean 0 and variance 1, i.e. the frames as scaled, and the normalisation grows in as
the frames folded in outnumber them.
"""

import tensorflow as tf

from agents.running_moments import RunningMoments

_EPSILON = 1e-5  # added to the variance: constant elements are not divided by zero
_CLIP = 5.0


class InputNormalizer(RunningMoments):
    """Frames [N, *D] normalised by the running per-element mean and variance of the frames
    folded in (`fold`), which start as `prior_count` frames of mean 0 and variance 1; the
    variables are created on the first call."""

    def __init__(self, prior_count=0, name="input_normalizer"):
        super().__init__(name=name, prior_count=prior_count)

    def __call__(self, frames):
        """float32 frames [N, *D] -> float32 [N, *D] in [-5, 5]."""
        self.create_variables(frames.shape[1:])
        normalized = (frames - self.mean) * tf.math.rsqrt(self.variance + _EPSILON)
        return tf.clip_by_value(normalized, -_CLIP, _CLIP)


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
