"""A small MLP agent for vector observations (CartPole-v1 and other classic-control tasks)."""

import sonnet as snt
import tensorflow as tf

from agents.base import Agent


class MLPAgent(Agent):
    """Feed-forward: observations float32 [N, D] -> MLP 64, 64 (ReLU) -> policy and baseline.

    ReLU rather than tanh: with the IMPALA loss and default flags it learns CartPole-v1 faster.
    """

    OBSERVATION_DIMS = ("D",)

    def __init__(
        self,
        num_actions,
        initialization="sonnet",
        torso_dtype="float32",
        normalize_input=False,
        name="mlp_agent",
    ):
        super().__init__(num_actions, initialization, torso_dtype, normalize_input, name=name)
        self._torso = snt.nets.MLP(
            [64, 64],
            w_init=self._initializers.torso,
            activation=tf.nn.relu,
            activate_final=True,
            name="torso",
        )
