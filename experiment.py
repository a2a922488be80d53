"""The one entry point of every role of one worker set.

  Learner (one per worker set; several learners are ranks of one mpirun job):
    python experiment.py --job_name=learner --task=0 \
        --learner_host=10.0.0.1:8000 --actor_hosts=10.0.0.2:8001,10.0.0.3:8002 [training flags]
  Actor j of that worker set:
    python experiment.py --job_name=actor --task=j --learner_host=... --actor_hosts=... [...]
  Evaluation of the latest checkpoint in --logdir:
    python experiment.py --mode=test --level_name=... --agent_name=... --logdir=...

Training flags (training_flags.py) keep the original IMPALA/Horovod scripts' names.
"""

import os
import sys

# TF's C++ INFO/WARNING lines (e.g. one per timed-out dequeue poll) drown the training log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # After the environment variable above, which TF reads once.
import tensorflow as tf
from absl import app, flags, logging

import agents
import checkpointing
import environments
import training_flags  # noqa: F401 - defines the training flags.
import transport
import unrolls
from actor import Actor, LearnerUnreachableError, actor_seed, create_env

FLAGS = flags.FLAGS
flags.DEFINE_enum("job_name", "learner", ["learner", "actor"], "Role of this process.")
flags.DEFINE_integer("task", 0, "Task index within the job (actor j of this worker set).")
flags.DEFINE_string("learner_host", "localhost:8000", "HOST:PORT of this worker set's learner.")
flags.DEFINE_list("actor_hosts", [], "HOST:PORT of each actor of this worker set.")
flags.DEFINE_enum("mode", "train", ["train", "test"], "Train, or evaluate the latest checkpoint.")


class UsageError(ValueError):
    """Bad flags: reported as one line naming the culprit."""


def build_agent(level_name, agent_name, config):
    """Creates the env's spec and the agent with its variables built.

    Returns:
      (agent, observation_spec (shape, dtype), num_actions, frames per agent step).
    """
    env = environments.create_environment(
        level_name, seed=0, width=config.width, height=config.height
    )
    observation_spec, num_actions = env.observation_spec, env.num_actions
    env.close()
    agent = agents.agent_factory(agent_name)(num_actions)
    shape, dtype = observation_spec
    dummy = environments.StepOutput(
        reward=tf.zeros([1], tf.float32),
        info=environments.StepOutputInfo(
            tf.zeros([1], tf.float32), tf.zeros([1], tf.int32), tf.zeros([1], tf.bool)
        ),
        done=tf.zeros([1], tf.bool),
        observation=tf.zeros([1, *shape], dtype),
    )
    agent(tf.zeros([1], tf.int32), dummy, agent.initial_state(1))  # creates the variables
    return agent, observation_spec, num_actions, environments.action_repeat(level_name)


def _cluster_transport(agent, observation_spec, num_actions):
    """Validates the cluster flags, starts this process's server and the shared transport."""
    if FLAGS.job_name == "actor" and not 0 <= FLAGS.task < len(FLAGS.actor_hosts):
        raise UsageError(
            f"--task={FLAGS.task}: no such actor in --actor_hosts ({len(FLAGS.actor_hosts)} given)"
        )
    if FLAGS.job_name == "learner" and FLAGS.task != 0:
        raise UsageError(f"--task={FLAGS.task}: a worker set has one learner, task 0")
    spec = transport.cluster_spec(FLAGS.learner_host, FLAGS.actor_hosts)
    server = transport.start_server(spec, FLAGS.job_name, FLAGS.task)
    unroll_spec = transport.UnrollSpec(
        unrolls.unroll_structure(agent, observation_spec, num_actions, FLAGS.unroll_length)
    )
    parameter_specs = [(v.shape, v.dtype) for v in agent.trainable_variables]
    return transport.Transport(
        server, FLAGS.job_name, FLAGS.task, parameter_specs, unroll_spec, FLAGS.queue_capacity
    )


def train_learner():
    import horovod.tensorflow as hvd  # Actors and evaluation never need MPI.

    from learner import Learner

    hvd.init()
    agent, observation_spec, num_actions, frames_per_step = build_agent(
        FLAGS.level_name, FLAGS.agent_name, FLAGS
    )
    tf.random.set_seed(FLAGS.seed + hvd.rank())
    link = _cluster_transport(agent, observation_spec, num_actions)
    return Learner(FLAGS, hvd, agent, link, frames_per_step).run()


def train_actor():
    own_address = FLAGS.actor_hosts[FLAGS.task] if FLAGS.task < len(FLAGS.actor_hosts) else ""
    tf.random.set_seed(actor_seed(FLAGS.seed, own_address))
    agent, observation_spec, num_actions, _ = build_agent(FLAGS.level_name, FLAGS.agent_name, FLAGS)
    link = _cluster_transport(agent, observation_spec, num_actions)
    env = create_env(FLAGS, own_address)
    name = f"actor {FLAGS.task} ({own_address})"
    try:
        return Actor(FLAGS, agent, link, env, name).run()
    finally:
        env.close()


def evaluate():
    """Plays --test_num_episodes full games with the latest checkpoint; prints the returns."""
    agent, _, _, _ = build_agent(FLAGS.level_name, FLAGS.agent_name, FLAGS)
    path = checkpointing.restore_for_evaluation(FLAGS.logdir, agent=agent)
    logging.info("evaluating %s (%s actions)", path, FLAGS.test_action_selection)
    env = environments.create_vector_environment(
        FLAGS.level_name,
        num_envs=1,
        seed=FLAGS.seed,
        is_test=True,
        width=FLAGS.width,
        height=FLAGS.height,
        sticky_actions=FLAGS.sticky_actions,
    )
    act = tf.function(agent.__call__)
    tf.random.set_seed(FLAGS.seed)
    returns = []
    env_output = env.initial()
    last_action = np.zeros([1], np.int32)
    core_state = agent.initial_state(1)
    while len(returns) < FLAGS.test_num_episodes:
        agent_output, core_state = act(last_action, env_output, core_state)
        if FLAGS.test_action_selection == "greedy":
            last_action = np.argmax(agent_output.policy_logits.numpy(), axis=-1).astype(np.int32)
        else:
            last_action = agent_output.action.numpy()
        env_output = env.step(last_action)
        if env_output.info.game_over[0]:
            returns.append(float(env_output.info.episode_return[0]))
            print(
                f"episode {len(returns)}: return {returns[-1]:.1f} "
                f"({int(env_output.info.episode_step[0])} steps)",
                flush=True,
            )
    env.close()
    print(f"mean return over {len(returns)} episodes: {np.mean(returns):.2f}", flush=True)
    return 0


def main(argv):
    del argv
    try:
        if FLAGS.mode == "test":
            return evaluate()
        if FLAGS.job_name == "learner":
            return train_learner()
        return train_actor()
    except (
        UsageError,
        transport.AddressError,
        agents.UnknownAgentError,
        environments.UnknownEnvironmentError,
        checkpointing.CheckpointError,
        LearnerUnreachableError,
    ) as e:
        print(f"experiment.py ({FLAGS.job_name} {FLAGS.task}): error: {e}", file=sys.stderr)
        return 2


def cli():
    app.run(main)


if __name__ == "__main__":
    cli()
