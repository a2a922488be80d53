"""Batches of random data in the unroll layout, for tests and benchmarks of the learner's step."""

import numpy as np
import tensorflow as tf

from agents import AgentOutput
from environments import StepOutput, StepOutputInfo
from unrolls import Unroll


def random_unroll(agent, observation_spec, num_actions, batch_size, unroll_length, rng):
    """A batch-major Unroll [B, T+1, ...] of random numpy data.

    Args:
      agent: gives the core-state shapes (its initial state is used).
      observation_spec: (shape, numpy dtype) of one observation.
      num_actions: A.
      batch_size: B.
      unroll_length: T.
      rng: a numpy Generator.
    """
    shape = (batch_size, unroll_length + 1)
    observation_shape, observation_dtype = observation_spec
    if np.issubdtype(observation_dtype, np.integer):
        observation = rng.integers(0, 256, (*shape, *observation_shape)).astype(observation_dtype)
    else:
        observation = rng.normal(size=(*shape, *observation_shape)).astype(observation_dtype)
    done = rng.random(shape) < 0.1
    return Unroll(
        agent_state=tf.nest.map_structure(np.asarray, agent.initial_state(batch_size)),
        env_outputs=StepOutput(
            reward=rng.normal(size=shape).astype(np.float32),
            info=StepOutputInfo(
                episode_return=rng.normal(size=shape).astype(np.float32),
                episode_step=rng.integers(1, 100, shape).astype(np.int32),
                game_over=done,
            ),
            done=done,
            observation=observation,
        ),
        agent_outputs=AgentOutput(
            action=rng.integers(0, num_actions, shape).astype(np.int32),
            policy_logits=rng.normal(size=(*shape, num_actions)).astype(np.float32),
            baseline=rng.normal(size=shape).astype(np.float32),
        ),
        parameter_version=np.zeros([batch_size], np.int64),
    )
