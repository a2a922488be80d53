"""Our learner fed the reference's batches, from the same weights: is the learner at fault?

  bash bench/reference_setup.sh        # the PyTorch reference's virtualenv, once
  .venv/bin/python -m bench.lockstep [--updates=60] [--level_name=PongNoFrameskip-v4]

Three steps in one command (~15 min for 60 updates here):
1. our SimpleConvNetAgent is initialised (orthogonal) and its weights saved, with the head rows
   that read the last reward and the one-hot last action set to 0, so that it computes exactly
   what the reference's Nature CNN computes with the same weights;
2. bench/reference_ppo.py (PyTorch PPO, its defaults: 8 envs x 128 steps, 4 epochs x 4
   minibatches of 256 random transitions) starts from those weights, acts, learns for --updates
   rollouts and saves each rollout and, at the end, its policy on the last one;
3. our learner (train_step.make_train_step with --policy_clip, the same PPO settings: Adam 2.5e-4
   annealed as the reference anneals, gradients clipped at 0.5 x 256 on our summed loss,
   epsilon 1e-5 x 256; 4 epochs x 4 minibatches of 2 whole unrolls of 128 steps) learns from the
   very same rollouts in the same order, from the same weights.

Then both trained policies are compared on the last rollout's observations: the KL between them
against how far the reference moved from the start, KL(reference || initial). A small ratio says
our learner does what the reference's does with the same data, so a difference in learning
lies in the data (the acting side) or in chance; a ratio near 1 points at the learner.
Printed: a table and, last, one JSON line.
"""

import dataclasses
import glob
import json
import os
import subprocess

import numpy as np
import tensorflow as tf
from absl import app, flags

import agents
import config as config_lib
import environments
import train_step
import unrolls
from bench import inprocess

flags.DEFINE_integer("updates", 60, "Rollouts of 8 x 128 agent steps, learned from by both.")
flags.DEFINE_string("reference_python", "/tmp/impala_reference_venv/bin/python", "Its Python.")
flags.DEFINE_string("workdir", "/tmp/impala_bench_lockstep", "Weights, rollouts, logits.")
config_lib.define_flags()
FLAGS = flags.FLAGS

NUM_ENVS, NUM_STEPS, EPOCHS, MINIBATCHES = 8, 128, 4, 4  # reference_ppo.py's defaults
STEPS_PER_MINIBATCH = NUM_ENVS * NUM_STEPS // MINIBATCHES
HEAD_FEATURES = 512  # SimpleConvNetAgent's torso output; head rows past it read extra inputs


def ppo_config():
    """Our flags with reference_ppo.py's PPO settings, scaled to our summed losses."""
    return dataclasses.replace(
        config_lib.from_flags(),
        agent_name="SimpleConvNetAgent",
        initialization="orthogonal",
        optimizer="adam",
        learning_rate=2.5e-4,
        epsilon=1e-5 * STEPS_PER_MINIBATCH,  # its epsilon, relative to gradients 256x larger
        gradients_clipping=0.5 * STEPS_PER_MINIBATCH,
        policy_clip=0.1,
        vtrace_lambda=0.95,
        normalize_advantages=True,
        entropy_cost=0.01,
        baseline_cost=0.5,  # x our 0.5 x squared error: its 0.5 x 0.5 x MSE
        batch_size=NUM_ENVS // MINIBATCHES,
        unroll_length=NUM_STEPS,
    )


def rollout_unroll(rollout, last_action):
    """A saved rollout (time-major [T, N, ...], see reference_ppo.py) -> batch-major Unroll
    [N, T+1, ...]; `last_action` int32 [N] is the action before its first observation."""
    observations = [*rollout["obs"], rollout["next_obs"]]
    done = [*rollout["done"].astype(bool), rollout["next_done"].astype(bool)]
    zeros = np.zeros(NUM_ENVS, np.float32)
    # reward[t] of the rollout followed the action on observation t: our reward at t + 1.
    rewards = [zeros, *rollout["reward"].astype(np.float32)]
    info = environments.StepOutputInfo(zeros, zeros.astype(np.int32), zeros.astype(bool))
    env_steps = [
        environments.StepOutput(r, info, d, o)
        for r, d, o in zip(rewards, done, observations, strict=True)
    ]
    agent_steps = [agents.AgentOutput(last_action, np.zeros_like(rollout["logits"][0]), zeros)] + [
        agents.AgentOutput(a.astype(np.int32), logits, value)
        for a, logits, value in zip(
            rollout["action"], rollout["logits"], rollout["value"], strict=True
        )
    ]
    return unrolls.Unroll(
        agent_state=(),
        env_outputs=unrolls.stack_steps(env_steps),
        agent_outputs=unrolls.stack_steps(agent_steps),
        parameter_version=np.zeros(NUM_ENVS, np.int64),
    )


def policy_logits(agent, unroll):
    """The agent's logits [T, N, A] on the unroll's observations 0..T-1."""
    time_major = unrolls.to_time_major(unroll)
    outputs, _ = agent.unroll(time_major.agent_outputs.action, time_major.env_outputs, ())
    return outputs.policy_logits.numpy()[:-1]


def entropy_fraction(logits):
    log_policy = tf.nn.log_softmax(logits).numpy()
    entropy = -(np.exp(log_policy) * log_policy).sum(-1).mean()
    return float(entropy / np.log(logits.shape[-1]))


def kl(p_logits, q_logits):
    """Mean KL(p || q) over the steps, logits [..., A]."""
    log_p, log_q = tf.nn.log_softmax(p_logits).numpy(), tf.nn.log_softmax(q_logits).numpy()
    return float((np.exp(log_p) * (log_p - log_q)).sum(-1).mean())


def main(argv):
    del argv
    config = ppo_config()
    if not os.path.exists(FLAGS.reference_python):
        raise app.UsageError(
            f"--reference_python={FLAGS.reference_python} does not exist: run "
            "bash bench/reference_setup.sh first"
        )
    if environments.atari_id(config.level_name) is None:
        raise app.UsageError(f"--level_name={config.level_name}: the reference is for Atari")
    os.makedirs(FLAGS.workdir, exist_ok=True)
    for stale in glob.glob(os.path.join(FLAGS.workdir, "*.np[yz]")):
        os.remove(stale)
    tf.random.set_seed(config.seed)
    env = environments.create_vector_environment(config.level_name, NUM_ENVS, seed=config.seed)
    first = env.initial()
    env.close()
    agent = agents.agent_factory(config.agent_name)(env.num_actions, config.initialization)

    # 1. Initial weights, the heads' extra-input rows zeroed.
    agent(np.zeros(NUM_ENVS, np.int32), first, ())  # creates the variables
    for variable in agent.trainable_variables:
        if variable.name.endswith(("policy_logits/w:0", "baseline/w:0")):  # the heads' [F+1+A, .]
            variable.assign(np.concatenate(
                [variable.numpy()[:HEAD_FEATURES], np.zeros_like(variable.numpy()[HEAD_FEATURES:])]
            ))  # fmt: skip
    initial_weights = os.path.join(FLAGS.workdir, "initial_weights.npz")
    np.savez(initial_weights, **{v.name: v.numpy() for v in agent.trainable_variables})

    # 2. The reference acts and learns, saving its rollouts.
    frames = FLAGS.updates * NUM_ENVS * NUM_STEPS * environments.action_repeat(config.level_name)
    reference = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_ppo.py")
    print(f"reference: {FLAGS.updates} updates ({frames} frames)...", flush=True)
    subprocess.run(
        [
            FLAGS.reference_python, reference, f"--level_name={config.level_name}",
            f"--frames={frames}", f"--seed={config.seed}", f"--initial_weights={initial_weights}",
            f"--save_batches={FLAGS.workdir}",
            f"--output={os.path.join(FLAGS.workdir, 'reference_games.csv')}",
        ],
        check=True,
    )  # fmt: skip

    # 3. Our learner on the same rollouts, in the same order.
    step, learning_rate = train_step.single_process_step(agent, config)
    rng = np.random.default_rng(config.seed)
    rollouts = sorted(glob.glob(os.path.join(FLAGS.workdir, "batch_*.npz")))
    last_action = np.zeros(NUM_ENVS, np.int32)
    for update, path in enumerate(rollouts):
        learning_rate.assign(config.learning_rate * (1 - update / len(rollouts)))  # as it anneals
        rollout = dict(np.load(path))
        batch = rollout_unroll(rollout, last_action)
        last_action = rollout["action"][-1].astype(np.int32)
        outputs = inprocess.train_on_batch(step, batch, EPOCHS, MINIBATCHES, rng)
        if (update + 1) % 10 == 0 or update + 1 == len(rollouts):
            print(
                f"ours: update {update + 1}/{len(rollouts)} | entropy "
                f"{float(outputs['entropy_fraction']):.3f} of max | |log rho| "
                f"{float(outputs['mean_abs_log_rho']):.3f}",
                flush=True,
            )

    # Both policies on the last rollout's observations.
    reference_logits = np.load(os.path.join(FLAGS.workdir, "final_logits.npy"))
    ours = policy_logits(agent, batch)
    start = np.load(initial_weights)
    for variable in agent.trainable_variables:  # back to the start for the initial policy
        variable.assign(start[variable.name])
    initial = policy_logits(agent, batch)
    result = {
        "updates": len(rollouts),
        "frames": frames,
        "entropy_fraction": {
            "initial": entropy_fraction(initial),
            "reference": entropy_fraction(reference_logits),
            "ours": entropy_fraction(ours),
        },
        "kl_reference_initial": kl(reference_logits, initial),
        "kl_ours_initial": kl(ours, initial),
        "kl_reference_ours": kl(reference_logits, ours),
        "kl_ours_reference": kl(ours, reference_logits),
    }
    result["ratio"] = result["kl_reference_ours"] / result["kl_reference_initial"]
    print(f"\nafter {len(rollouts)} updates, on the last rollout's {NUM_ENVS * NUM_STEPS} steps:")
    for name in ("initial", "reference", "ours"):
        print(f"  {name:<10} policy entropy {result['entropy_fraction'][name]:.4f} of max")
    print(f"  KL(reference || initial) {result['kl_reference_initial']:.4f}  (how far it moved)")
    print(f"  KL(ours || initial)      {result['kl_ours_initial']:.4f}")
    print(f"  KL(reference || ours)    {result['kl_reference_ours']:.4f}  "
          f"(x{result['ratio']:.3f} of how far it moved)")  # fmt: skip
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    app.run(main)
