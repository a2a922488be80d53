"""The IMPALA paper's deep residual network, feed-forward or with an LSTM core (Fig. 3 right)."""

import sonnet as snt
import tensorflow as tf

from agents.base import Agent


class ResNetTorso(snt.Module):
    """Frames float32 [N, H, W, C] -> features [N, 256].

    Three sections of (16, 32, 32) channels, each: conv 3x3, max-pool 3x3 stride 2, two residual
    blocks (relu, conv 3x3, relu, conv 3x3, + skip). Then relu, flatten, Linear 256, relu.
    """

    def __init__(self, w_init=None, name="torso"):
        super().__init__(name=name)
        self._sections = []
        for i, channels in enumerate((16, 32, 32)):
            conv = snt.Conv2D(channels, 3, padding="SAME", w_init=w_init, name=f"section_{i}_conv")
            residual_blocks = [
                [
                    snt.Conv2D(
                        channels, 3, padding="SAME", w_init=w_init, name=f"section_{i}_res_{j}_{k}"
                    )
                    for k in range(2)
                ]
                for j in range(2)
            ]
            self._sections.append((conv, residual_blocks))
        self._linear = snt.Linear(256, w_init=w_init, name="linear")

    def __call__(self, frames):
        out = frames
        for conv, residual_blocks in self._sections:
            out = conv(out)
            out = tf.nn.max_pool2d(out, ksize=3, strides=2, padding="SAME")
            for block in residual_blocks:
                block_input = out
                for block_conv in block:
                    out = block_conv(tf.nn.relu(out))
                out += block_input
        out = snt.Flatten()(tf.nn.relu(out))
        return tf.nn.relu(self._linear(out))


class ResNetAgent(Agent):
    """Feed-forward: ResNetTorso -> policy and baseline."""

    OBSERVATION_DIMS = ("H", "W", "C")

    def __init__(self, num_actions, name="resnet_agent", **options):
        super().__init__(num_actions, name=name, **options)

    def _make_torso(self, name):
        return ResNetTorso(self._initializers.torso, name=name)


class ResNetLSTMAgent(ResNetAgent):
    """ResNetTorso -> LSTM 256 (reset where an episode starts) -> policy and baseline."""

    def __init__(self, num_actions, name="resnet_lstm_agent", **options):
        super().__init__(num_actions, name=name, **options)
        if self._value_torso is not None:
            # Its baseline would skip the core: a value without the memory the policy has.
            raise ValueError(
                "--separate_value_torso needs a feed-forward agent; ResNetLSTMAgent is recurrent"
            )
        self._core = snt.LSTM(256, name="lstm")
