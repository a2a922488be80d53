"""The unroll: what an actor sends the learner for one environment, T agent steps at a time.

Layout (as in the IMPALA paper and scalable_agent), time-major inside an unroll:

  env_outputs[t]    StepOutput of step t, t = 0..T; [T+1, ...]
  agent_outputs[t]  AgentOutput whose action produced env_outputs[t], so agent_outputs[t].action
                    is the *last action* the agent saw together with env_outputs[t]; [T+1, ...]
  agent_state       the agent's core state before processing env_outputs[0] (LSTM), [...]
  parameter_version version of the parameters the actor acted with (their mean over the steps,
                    rounded, with --parameter_refresh_steps), int64 [] (for policy lag)

Element 0 repeats the last element of the previous unroll, so every transition
(env_outputs[t], agent_outputs[t+1].action -> env_outputs[t+1]) lies inside one unroll.
"""

import collections

import numpy as np
import tensorflow as tf

from agents import AgentOutput
from environments import StepOutput, StepOutputInfo

Unroll = collections.namedtuple("Unroll", "agent_state env_outputs agent_outputs parameter_version")


class UnrollSpec:
    """Names, dtypes and per-unroll shapes of the tensors of one unroll, flattened.

    `structure` is a nest (namedtuples) of tf.TensorSpec with per-unroll shapes (no batch dim).
    The queue carries `tf.nest.flatten(unroll)`; `pack` turns such a flat list back into the nest.
    """

    def __init__(self, structure):
        self.structure = structure
        self.specs = tf.nest.flatten(structure)

    def pack(self, flat):
        return tf.nest.pack_sequence_as(self.structure, list(flat))


def unroll_structure(agent, observation_spec, num_actions, unroll_length):
    """Nest of tf.TensorSpec with per-unroll shapes (no batch dim) of one Unroll.

    Args:
      agent: the agent (its initial_state gives the core-state shapes).
      observation_spec: (shape, numpy dtype) of one observation, e.g. ((84, 84, 4), uint8).
      num_actions: A.
      unroll_length: T.
    """
    shape, dtype = observation_spec
    steps = unroll_length + 1

    def spec(step_shape, step_dtype):
        return tf.TensorSpec([steps, *step_shape], tf.as_dtype(step_dtype))

    env_outputs = StepOutput(
        reward=spec([], np.float32),
        info=StepOutputInfo(
            episode_return=spec([], np.float32),
            episode_step=spec([], np.int32),
            game_over=spec([], np.bool_),
        ),
        done=spec([], np.bool_),
        observation=spec(shape, dtype),
    )
    agent_outputs = AgentOutput(
        action=spec([], np.int32),
        policy_logits=spec([num_actions], np.float32),
        baseline=spec([], np.float32),
    )
    agent_state = tf.nest.map_structure(
        lambda s: tf.TensorSpec(s.shape[1:], s.dtype), agent.initial_state(1)
    )
    return Unroll(
        agent_state=agent_state,
        env_outputs=env_outputs,
        agent_outputs=agent_outputs,
        parameter_version=tf.TensorSpec([], tf.int64),
    )


def stack_steps(steps):
    """List (length T+1) of nests of [N, ...] arrays -> one nest of [N, T+1, ...] arrays."""
    return tf.nest.map_structure(lambda *xs: np.stack(xs, axis=1), *steps)


def to_time_major(unroll):
    """Unroll of batch-major [B, T+1, ...] arrays -> the same with env/agent outputs [T+1, B, ...].

    agent_state ([B, ...]) and parameter_version ([B]) keep their batch-major shapes.
    """

    def transpose(x):
        x = tf.convert_to_tensor(x)
        return tf.transpose(x, [1, 0, *range(2, x.shape.rank)])

    return unroll._replace(
        env_outputs=tf.nest.map_structure(transpose, unroll.env_outputs),
        agent_outputs=tf.nest.map_structure(transpose, unroll.agent_outputs),
    )
