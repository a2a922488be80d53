"""A small MLP agent for vector observations (CartPole-v1 and other classic-control tasks)."""

import sonnet as snt
import tensorflow as tf

from agents.base import Agent


class MLPAgent(Agent):
    """Feed-forward: observations float32 [N, D] -> MLP 64, 64 (ReLU) -> policy and baseline.

    ReLU rather than tanh: with the IMPALA loss and default flags it learns CartPole-v1 faster.
    """

    OBSERVATION_DIMS = ("D",)

    def __init__(self, num_actions, name="mlp_agent", **options):
        super().__init__(num_actions, name=name, **options)

    def _make_torso(self, name):
        return snt.nets.MLP(
            [64, 64],
            w_init=self._initializers.torso,
            activation=tf.nn.relu,
            activate_final=True,
            name=name,
        )
