"""bench.lockstep's conversion of a PyTorch PPO rollout into our Unroll (the time alignment that
decides whether both learners see the same transitions)."""

import numpy as np

import agents
import environments
import unrolls
from bench import lockstep


def test_a_reference_rollout_becomes_the_unroll_an_actor_would_have_sent():
    rng = np.random.default_rng(0)
    n, t, num_actions = lockstep.NUM_ENVS, 5, 6
    zeros = np.zeros(n, np.float32)
    info = environments.StepOutputInfo(zeros, zeros.astype(np.int32), zeros.astype(bool))
    env_steps = [
        environments.StepOutput(
            rng.choice([-1.0, 0.0, 1.0], n).astype(np.float32),
            info,
            rng.random(n) < 0.3,
            rng.integers(0, 256, (n, 84, 84, 4), np.uint8),
        )
        for _ in range(t + 1)
    ]
    agent_steps = [
        agents.AgentOutput(
            rng.integers(0, num_actions, n).astype(np.int32),
            rng.normal(size=(n, num_actions)).astype(np.float32),
            rng.normal(size=n).astype(np.float32),
        )
        for _ in range(t + 1)
    ]
    # reference_ppo.py's layout: step k holds observation k, the action chosen on it, its log
    # probabilities and value, the reward that followed, and whether observation k began a game.
    rollout = {
        "obs": np.stack([s.observation for s in env_steps[:t]]),
        "next_obs": env_steps[t].observation,
        "done": np.stack([s.done for s in env_steps[:t]]).astype(np.float32),
        "next_done": env_steps[t].done.astype(np.float32),
        "reward": np.stack([s.reward for s in env_steps[1:]]),
        "action": np.stack([a.action for a in agent_steps[1:]]).astype(np.int64),
        "logits": np.stack([a.policy_logits for a in agent_steps[1:]]),
        "value": np.stack([a.baseline for a in agent_steps[1:]]),
    }
    converted = lockstep.rollout_unroll(rollout, agent_steps[0].action)
    expected = unrolls.stack_steps(env_steps), unrolls.stack_steps(agent_steps)

    for field in ("observation", "done"):
        np.testing.assert_array_equal(
            getattr(converted.env_outputs, field), getattr(expected[0], field)
        )
    # Step 0's reward came before the rollout: only an agent input, 0 here.
    np.testing.assert_array_equal(converted.env_outputs.reward[:, 1:], expected[0].reward[:, 1:])
    np.testing.assert_array_equal(converted.agent_outputs.action, expected[1].action)
    # Step 0's logits and baseline belong to the previous rollout and are never read.
    for field in ("policy_logits", "baseline"):
        np.testing.assert_array_equal(
            getattr(converted.agent_outputs, field)[:, 1:], getattr(expected[1], field)[:, 1:]
        )
    assert converted.env_outputs.done.dtype == bool
    assert converted.agent_outputs.action.dtype == np.int32
