"""What each role of experiment.py does once its flags have been parsed and checked: builds the
agent, joins its worker set's cluster and runs the learner, an actor, the evaluator, or the
evaluation of a checkpoint (--mode=test).

Apart from experiment.py so that the entry point imports TensorFlow only after its flags are
found good: a bad flag is refused in a fraction of a second, not after TF's import (seconds, and
more on a loaded host).
"""

import numpy as np
import tensorflow as tf
from absl import logging

import agents
import checkpointing
import config as config_lib
import environments
import evaluation
import host_tuning
import logdir_lock
import replay
import transport
import unrolls
import video
from actor import Actor, actor_seed, create_env
from learner import DivergedError, Learner
from learner_link import AgentMismatchError, LearnerLink, LearnerUnreachableError

# As in experiment.py's workers (where it is done already): an importer of the roles (tests,
# benchmarks) keeps glibc's freed memory for reuse.
host_tuning.use_allocator(reexecute=False)

# The errors of bad input (flags, files, hosts, peers that do not fit) and of training that
# diverged: one line each, and exit_codes.EXIT_BAD_INPUT.
BAD_INPUT_ERRORS = (
    config_lib.ConfigError,
    transport.AddressError,
    agents.UnknownAgentError,
    environments.UnknownEnvironmentError,
    checkpointing.CheckpointError,
    AgentMismatchError,
    replay.ReplayTooLargeError,
    DivergedError,
    logdir_lock.LogdirLockedError,
)
# An actor or the evaluator that gave up on its learner: one line, and
# exit_codes.EXIT_LEARNER_LOST, for the supervisor to restart it (the learner may be back).
LEARNER_LOST_ERRORS = (LearnerUnreachableError,)


def build_agent(config):
    """Creates the env's spec and the agent of `config` (config.Config) with its variables.

    Returns:
      (agent, observation_spec (shape, dtype), num_actions, frames per agent step).
    """
    env = environments.create_environment(
        config.level_name, seed=0, width=config.width, height=config.height
    )
    observation_spec, num_actions = env.observation_spec, env.num_actions
    env.close()
    dtype, _ = host_tuning.torso_dtype(config.torso_dtype)
    agent = agents.agent_factory(config.agent_name)(
        num_actions,
        initialization=config.initialization,
        torso_dtype=dtype,
        normalize_input=config.normalize_input,
        normalize_input_prior=config.normalize_input_prior,
        separate_value_torso=config.separate_value_torso,
        popart=config.popart,
    )
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
    return agent, observation_spec, num_actions, environments.action_repeat(config.level_name)


def unroll_spec(config, agent, observation_spec, num_actions):
    return unrolls.UnrollSpec(
        unrolls.unroll_structure(agent, observation_spec, num_actions, config.unroll_length)
    )


def _cluster_transport(config, agent, observation_spec, num_actions, cluster, job_name, task):
    """Starts this process's server in the worker set's `cluster` (cluster_file.Cluster; the
    same for all its processes: learner, actors and evaluator) and the shared transport."""
    spec = transport.cluster_spec(*cluster)
    server = transport.start_server(spec, job_name, task)
    return transport.Transport(
        server,
        job_name,
        task,
        [(v.shape, v.dtype) for v in agent.variables],
        unroll_spec(config, agent, observation_spec, num_actions),
        config.queue_capacity,
        agent.describe(),
        # A client's calls to its learner: none waits longer than it waits for the learner.
        call_timeout_secs=None if job_name == "learner" else config.learner_wait_secs,
    )


def train_learner(config, cluster):
    """This worker set's learner, one Horovod rank; returns the exit code."""
    import horovod.tensorflow as hvd  # Actors and evaluation never need MPI.

    hvd.init()
    try:
        return _train_learner_rank(config, cluster, hvd)
    finally:
        hvd.shutdown()  # MPI_Finalize, which mpirun expects of a rank before it exits


def _train_learner_rank(config, cluster, hvd):
    """This learner's part of training, once Horovod is initialised; returns the exit code.

    Rank 0, which writes checkpoints and summaries, holds --logdir's lock while it trains:
    another learner given the same --logdir is refused before it serves anything."""
    if hvd.rank() != 0:
        return _train(config, cluster, hvd)
    config_lib.check_logdir(config.logdir)
    with logdir_lock.hold(config.logdir):
        return _train(config, cluster, hvd)


def _train(config, cluster, hvd):
    actors_on_host = host_tuning.actors_share_host(cluster.learner, cluster.actors)
    host_tuning.tune_learner(config, hvd.local_rank(), hvd.local_size(), actors_on_host)
    agent, observation_spec, num_actions, frames_per_step = build_agent(config)
    # Refused before this learner serves anything: a replay memory the host cannot hold.
    replay.check_fits(config.replay_size, unroll_spec(config, agent, observation_spec, num_actions))
    tf.random.set_seed(config.seed + hvd.rank())
    link = _cluster_transport(config, agent, observation_spec, num_actions, cluster, "learner", 0)
    return Learner(
        config, hvd, agent, link, frames_per_step, cluster.actors, cluster.evaluator
    ).run()


def train_actor(config, cluster, task):
    """Actor `task` of this worker set; returns the exit code."""
    host_tuning.tune_actor(config)
    own_address = cluster.actors[task]
    tf.random.set_seed(actor_seed(config.seed, own_address))
    agent, observation_spec, num_actions, _ = build_agent(config)
    link = _cluster_transport(config, agent, observation_spec, num_actions, cluster, "actor", task)
    env = create_env(config, own_address)
    name = f"actor {task} ({own_address})"
    try:
        learner = LearnerLink(link, cluster.learner, config.learner_wait_secs, name)
        return Actor(config, agent, learner, env, name).run()
    finally:
        env.close()
        link.close()


def evaluate_during_training(config, cluster):
    """The evaluator of this worker set (evaluation.Evaluator): games with the learner's newest
    parameters, on one TF kernel thread on CPU nothing else wants; returns the exit code."""
    config_lib.check_logdir(config.logdir)
    host_tuning.tune_evaluator(config)
    tf.random.set_seed(config.seed)
    agent, observation_spec, num_actions, frames_per_step = build_agent(config)
    link = _cluster_transport(config, agent, observation_spec, num_actions, cluster, "evaluator", 0)
    env = evaluation.create_env(config, screens=config.eval_video_every > 0)
    name = f"evaluator ({cluster.evaluator})"
    try:
        player = evaluation.GamePlayer(agent, env, config.test_action_selection)
        learner = LearnerLink(link, cluster.learner, config.learner_wait_secs, name)
        return evaluation.Evaluator(config, agent, learner, player, frames_per_step, name).run()
    finally:
        env.close()
        link.close()


def evaluate(config, record_video):
    """Plays --test_num_episodes full games with the latest checkpoint; prints the returns.

    With `record_video` (--record_video's DIR), each game's native screens go to a video
    (video.GameRecorder); an Atari game is then played by environments.AtariEnvironment, not
    the C++ vector env. Reads --logdir only: needs no lock on it, so it runs beside training."""
    config_lib.check_logdir(config.logdir, writable=False)
    agent, _, _, _ = build_agent(config)
    path = checkpointing.restore_for_evaluation(config.logdir, agent=agent)
    logging.info("evaluating %s (%s actions)", path, config.test_action_selection)
    env = evaluation.create_env(config, screens=bool(record_video))
    recorder = None
    if record_video:
        frames = tf.train.load_variable(path, "environment_frames/.ATTRIBUTES/VARIABLE_VALUE")
        try:
            recorder = video.GameRecorder(
                record_video,
                config.level_name,
                int(frames),
                config.test_num_episodes,
                env.screen_fps,
            )
        except video.VideoError as e:
            raise config_lib.ConfigError(f"--record_video: {e}") from e
    tf.random.set_seed(config.seed)
    player = evaluation.GamePlayer(agent, env, config.test_action_selection)
    returns = []
    for episode_return, steps in player.games(config.test_num_episodes, recorder):
        returns.append(episode_return)
        print(f"episode {len(returns)}: return {episode_return:.1f} ({steps} steps)", flush=True)
        if recorder:
            logging.info("video of episode %d: %s", len(returns), recorder.end_game())
    env.close()
    print(f"mean return over {len(returns)} episodes: {np.mean(returns):.2f}", flush=True)
    return 0
