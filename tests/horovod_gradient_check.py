"""Shared by horovod_test and its mpirun worker: the agent, a random batch, the loss config."""

import numpy as np

import agents
import config
import unrolls
from tools import random_unrolls

NUM_ACTIONS, OBSERVATION_SPEC, BATCH_SIZE, UNROLL_LENGTH = 2, ((4,), np.float32), 4, 5
LOSS_CONFIG = config.Config()  # the default loss settings


def build_agent():
    """MLPAgent for CartPole shapes with its variables created."""
    agent = agents.MLPAgent(NUM_ACTIONS)
    batch = unrolls.to_time_major(random_unroll(agent, seed=0))
    agent.unroll(batch.agent_outputs.action, batch.env_outputs, batch.agent_state)
    return agent


def random_unroll(agent, seed):
    """Batch-major [B, T+1, ...] random batch with episode ends inside, fixed by `seed`."""
    rng = np.random.default_rng(seed)
    return random_unrolls.random_unroll(
        agent, OBSERVATION_SPEC, NUM_ACTIONS, BATCH_SIZE, UNROLL_LENGTH, rng
    )
