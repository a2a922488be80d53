"""This project's learner, on-policy in one process: a fast proxy and a bisection tool.

  .venv/bin/python -m bench.inprocess [--pipeline=ours|gymnasium] [--frames=2000000] \\
      [--num_envs=16] [training flags, e.g. --optimizer=adam --entropy_cost=0.0006]

One process steps --num_envs environments for T (--unroll_length) steps with the agent, builds
the unroll exactly as an actor does, and trains on it at once with the learner's own step
(train_step.make_train_step, the learning rate decayed as the learner does): IMPALA with no policy
lag, no transport and no Horovod. What it leaves out is what a learning failure cannot be
blamed on if this learns; what it keeps (agent, loss, optimizer, environment) is what to look
at if it does not. With --epochs and --minibatches it reuses each batch as PPO does (with
--policy_clip: PPO's clipped surrogate on V-trace targets), to compare with
bench/reference_ppo.py on equal terms.

--pipeline picks the environments:
  ours       environments.create_vector_environment (ale-py's C++ AtariVectorEnv), as actors;
  gymnasium  Gymnasium's own Atari pipeline for the same game (AtariPreprocessing: no-op reset,
             frame skip 4 with max-pooling, 84x84 grey; FrameStackObservation of 4), so that
             our learner can be fed from a reference's environments (bench/reference_ppo.py
             runs a reference learner on ours).

Prints a line every ~50K frames (frames/s, mean return of the last 100 games, policy entropy
as a fraction of its maximum, loss parts) and writes `frames,episode_return` per game to
--output, the columns bench.learning reads.
"""

import dataclasses
import functools

import gymnasium as gym
import numpy as np
import tensorflow as tf
from absl import app, flags

import agents
import config as config_lib
import environments
import train_step
import unrolls
from bench.curves import GameLog

flags.DEFINE_enum("pipeline", "ours", ["ours", "gymnasium"], "Which environments feed it.")
flags.DEFINE_integer("frames", 2_000_000, "Environment frames to train for.")
flags.DEFINE_integer("num_envs", 16, "Environments stepped together (the batch size B).")
flags.DEFINE_integer(
    "epochs", 1, "Passes over each batch (PPO's sample reuse; >1 wants --policy_clip)."
)
flags.DEFINE_string("output", "/tmp/impala_bench_learning/inprocess.csv", "Per-game CSV.")
config_lib.define_flags()
FLAGS = flags.FLAGS
REFERENCE_NAMESPACE = "GymnasiumPipeline"


def gymnasium_atari(game_id):
    """Gymnasium's standard Atari preprocessing of `game_id` (e.g. ALE/Pong-v5), frames
    [84, 84, 4] uint8, oldest first, like ours."""
    env = gym.make(game_id, frameskip=1, repeat_action_probability=0.0, full_action_space=False)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84)
    env = gym.wrappers.FrameStackObservation(env, 4)
    return gym.wrappers.TransformObservation(
        env,
        lambda frames: np.ascontiguousarray(np.transpose(frames, (1, 2, 0))),
        gym.spaces.Box(0, 255, (84, 84, 4), np.uint8),
    )


def make_environment(config):
    if FLAGS.pipeline == "ours":
        return environments.create_vector_environment(
            config.level_name, FLAGS.num_envs, seed=config.seed
        )
    game_id = environments.atari_id(config.level_name)
    name = f"{REFERENCE_NAMESPACE}/{game_id.split('/')[-1]}"  # e.g. GymnasiumPipeline/Pong-v5
    if name not in gym.registry:
        gym.register(name, entry_point=functools.partial(gymnasium_atari, game_id))
    # Our Gymnasium adapter: its episodes are whole games (no episodic life), its rewards raw.
    return environments.create_vector_environment(name, FLAGS.num_envs, seed=config.seed)


def train_on_batch(step, batch, epochs, unrolls_per_minibatch, rng):
    """PPO-style reuse of a batch-major Unroll [B, T+1, ...]: `epochs` passes, each over the B
    unrolls shuffled and split in minibatches of `unrolls_per_minibatch` whole unrolls
    (train_step.train_in_minibatches). -> the last pass's outputs."""
    weights = np.ones(len(batch.parameter_version), np.float32)
    for _ in range(epochs):
        outputs, _ = train_step.train_in_minibatches(
            step, batch, weights, unrolls_per_minibatch, rng
        )
    return outputs


def main(argv):
    del argv
    if FLAGS.num_envs % FLAGS.minibatches:
        raise app.UsageError(
            f"--num_envs={FLAGS.num_envs} does not split into --minibatches={FLAGS.minibatches}"
        )
    minibatch_size = FLAGS.num_envs // FLAGS.minibatches
    config = dataclasses.replace(
        config_lib.from_flags(), batch_size=minibatch_size, total_environment_frames=FLAGS.frames
    )
    tf.random.set_seed(config.seed)
    env = make_environment(config)
    frames_per_step = environments.action_repeat(config.level_name)
    agent = agents.agent_factory(config.agent_name)(env.num_actions, config.initialization)
    act = tf.function(agent.__call__)
    env_output = env.initial()
    agent_output = agents.AgentOutput(
        action=np.zeros(FLAGS.num_envs, np.int32),
        policy_logits=np.zeros([FLAGS.num_envs, env.num_actions], np.float32),
        baseline=np.zeros(FLAGS.num_envs, np.float32),
    )
    core_state = agent.initial_state(FLAGS.num_envs)
    act(agent_output.action, env_output, core_state)  # creates the variables
    step, learning_rate = train_step.single_process_step(agent, config)
    rng = np.random.default_rng(config.seed)

    frames, games = 0, GameLog(FLAGS.output)
    while frames < FLAGS.frames:
        learning_rate.assign(config.learning_rate * (1 - frames / FLAGS.frames))
        initial_state = tf.nest.map_structure(np.asarray, core_state)
        env_steps, agent_steps = [env_output], [agent_output]
        for _ in range(config.unroll_length):
            agent_output, core_state = act(agent_output.action, env_output, core_state)
            agent_output = tf.nest.map_structure(lambda t: t.numpy(), agent_output)
            env_output = env.step(agent_output.action)
            env_steps.append(env_output)
            agent_steps.append(agent_output)
            frames += FLAGS.num_envs * frames_per_step
            games.add(frames, env_output.info.episode_return[env_output.info.game_over])
        batch = unrolls.Unroll(
            agent_state=initial_state,
            env_outputs=unrolls.stack_steps(env_steps),
            agent_outputs=unrolls.stack_steps(agent_steps),
            parameter_version=np.zeros(FLAGS.num_envs, np.int64),
        )
        outputs = train_on_batch(step, batch, FLAGS.epochs, minibatch_size, rng)
        games.report(
            frames,
            f"entropy {float(outputs['entropy_fraction']):.3f} of max | loss: pg "
            f"{float(outputs['policy_gradient']):.2f}, baseline {float(outputs['baseline']):.2f}"
            f" | grad norm {float(outputs['gradient_norm']):.1f}",
        )
    env.close()


if __name__ == "__main__":
    app.run(main)
