"""The Nature DQN convnet (Mnih et al. 2015) as an IMPALA agent: the paper's shallow network."""

import sonnet as snt
import tensorflow as tf

from agents.base import Agent


class SimpleConvNetAgent(Agent):
    """Feed-forward: frames [N, 84, 84, 4] -> 3 VALID convs -> Linear 512 -> policy and baseline.

    With 84x84 frames the conv stack ends at [N, 7, 7, 64].
    """

    OBSERVATION_DIMS = ("H", "W", "C")

    def __init__(self, num_actions, name="simple_conv_net_agent", **options):
        super().__init__(num_actions, name=name, **options)

    def _make_torso(self, name):
        w_init = self._initializers.torso
        # Sequential enters no name scope as its layers are made: this one names their variables.
        with tf.name_scope(name):
            layers = [
                snt.Conv2D(32, 8, stride=4, padding="VALID", w_init=w_init, name="conv_0"),
                tf.nn.relu,
                snt.Conv2D(64, 4, stride=2, padding="VALID", w_init=w_init, name="conv_1"),
                tf.nn.relu,
                snt.Conv2D(64, 3, stride=1, padding="VALID", w_init=w_init, name="conv_2"),
                tf.nn.relu,
                snt.Flatten(),
                snt.Linear(512, w_init=w_init, name="linear"),
                tf.nn.relu,
            ]
        return snt.Sequential(layers, name=name)
