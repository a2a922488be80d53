"""The one entry point of every role of one worker set.

  Learner (one per worker set; several learners are ranks of one mpirun job):
    python experiment.py --job_name=learner --task=0 \
        --learner_host=10.0.0.1:8000 --actor_hosts=10.0.0.2:8001,10.0.0.3:8002 [training flags]
  Actor j of that worker set:
    python experiment.py --job_name=actor --task=j --learner_host=... --actor_hosts=... [...]
  Its evaluator (optional; every process of the set is then also given --evaluator_host):
    python experiment.py --job_name=evaluator --evaluator_host=10.0.0.4:8003 --learner_host=...
  (or --cluster_file=PATH in place of the address flags, as the frontend does)
  Evaluation of the latest checkpoint in --logdir:
    python experiment.py --mode=test --level_name=... --agent_name=... --logdir=...

The training flags are the fields of config.Config (defined there, documented once); they keep
the original IMPALA/Horovod scripts' names. This module parses them once, over the defaults of
--level_name's environment family (logged in one line as the worker starts), and passes the
Config.
"""

import os
import sys
import traceback

import host_tuning

# Before TF is imported: a worker re-executes itself onto tcmalloc; an importer (benchmarks,
# tests) keeps glibc's freed memory for reuse, and the benchmarks that time the workers' stages
# re-execute themselves.
host_tuning.use_allocator(reexecute=__name__ == "__main__")

# TF's C++ INFO/WARNING lines (e.g. one per timed-out dequeue) drown the training log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # After the environment variable above, which TF reads once.
import tensorflow as tf
from absl import app, flags, logging

import agents
import checkpointing
import cluster_file
import config as config_lib
import environments
import evaluation
import replay
import transport
import unrolls
import video
from actor import Actor, actor_seed, create_env
from learner import DivergedError, Learner
from learner_link import LearnerLink, LearnerUnreachableError

FLAGS = flags.FLAGS
config_lib.define_flags(FLAGS)
flags.DEFINE_enum("job_name", "learner", ["learner", "actor", "evaluator"], "Role of this process.")
flags.DEFINE_integer("task", 0, "Task index within the job: actor j of this worker set; 0 else.")
flags.DEFINE_string("learner_host", "localhost:8000", "HOST:PORT of this worker set's learner.")
flags.DEFINE_list("actor_hosts", [], "HOST:PORT of each actor of this worker set.")
flags.DEFINE_string(
    "evaluator_host", "", "HOST:PORT of this worker set's evaluator, if it has one."
)
flags.DEFINE_string(
    "cluster_file",
    "",
    "File of the worker set's addresses (cluster_file.py): replaces --learner_host, "
    "--actor_hosts and --evaluator_host.",
)
flags.DEFINE_enum("mode", "train", ["train", "test"], "Train, or evaluate the latest checkpoint.")
flags.DEFINE_string(
    "record_video",
    "",
    "--mode=test: a video of every test game, as DIR/<level>-<frames>[-game<k>].mp4.",
)


class UsageError(ValueError):
    """Bad flags: reported as one line naming the culprit."""


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
    agent = agents.agent_factory(config.agent_name)(num_actions, config.initialization)
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


def _unroll_spec(config, agent, observation_spec, num_actions):
    return unrolls.UnrollSpec(
        unrolls.unroll_structure(agent, observation_spec, num_actions, config.unroll_length)
    )


def _cluster_addresses():
    """This worker set's (learner HOST:PORT, actor HOST:PORTs, evaluator HOST:PORT or None):
    from --cluster_file if given, else from --learner_host, --actor_hosts and --evaluator_host;
    checked against --job_name and --task."""
    if not FLAGS.cluster_file:
        learner_host, actor_hosts, source = FLAGS.learner_host, FLAGS.actor_hosts, "--actor_hosts"
        evaluator_host, evaluator_source = FLAGS.evaluator_host or None, "--evaluator_host"
    elif any(FLAGS[name].present for name in ("learner_host", "actor_hosts", "evaluator_host")):
        raise UsageError(
            "--cluster_file and --learner_host/--actor_hosts/--evaluator_host: give one or the "
            "other"
        )
    else:
        try:
            learner_host, actor_hosts, evaluator_host = cluster_file.read(FLAGS.cluster_file)
        except (OSError, cluster_file.ClusterFileError) as e:
            raise UsageError(f"--cluster_file: {e}") from e
        source = f"--cluster_file={FLAGS.cluster_file}"
        evaluator_source = f"an 'evaluator HOST:PORT' line in {source}"
    if FLAGS.job_name == "actor" and not 0 <= FLAGS.task < len(actor_hosts):
        raise UsageError(
            f"--task={FLAGS.task}: no such actor in {source} ({len(actor_hosts)} given)"
        )
    if FLAGS.job_name in ("learner", "evaluator") and FLAGS.task != 0:
        raise UsageError(f"--task={FLAGS.task}: a worker set has one {FLAGS.job_name}, task 0")
    if FLAGS.job_name == "evaluator" and evaluator_host is None:
        raise UsageError(f"--job_name=evaluator: no evaluator address; give {evaluator_source}")
    return learner_host, actor_hosts, evaluator_host


def _cluster_transport(
    config, agent, observation_spec, num_actions, learner_host, actor_hosts, evaluator_host
):
    """Starts this process's server in the worker set's cluster (the same for all its processes:
    learner, actors and evaluator) and the shared transport."""
    spec = transport.cluster_spec(learner_host, actor_hosts, evaluator_host)
    server = transport.start_server(spec, FLAGS.job_name, FLAGS.task)
    unroll_spec = _unroll_spec(config, agent, observation_spec, num_actions)
    parameter_specs = [(v.shape, v.dtype) for v in agent.trainable_variables]
    return transport.Transport(
        server, FLAGS.job_name, FLAGS.task, parameter_specs, unroll_spec, config.queue_capacity
    )


def train_learner(config):
    import horovod.tensorflow as hvd  # Actors and evaluation never need MPI.

    hvd.init()
    try:
        return _train_learner_rank(config, hvd)
    finally:
        hvd.shutdown()  # MPI_Finalize, which mpirun expects of a rank before it exits


def _train_learner_rank(config, hvd):
    """This learner's part of training, once Horovod is initialised; returns the exit code."""
    if hvd.rank() == 0:  # the learner that writes checkpoints and summaries
        config_lib.check_logdir(config.logdir)
    learner_host, actor_hosts, evaluator_host = _cluster_addresses()
    actors_on_host = host_tuning.actors_share_host(learner_host, actor_hosts)
    host_tuning.tune_learner(config, hvd.local_rank(), hvd.local_size(), actors_on_host)
    agent, observation_spec, num_actions, frames_per_step = build_agent(config)
    # Refused before this learner serves anything: a replay memory the host cannot hold.
    replay.check_fits(
        config.replay_size, _unroll_spec(config, agent, observation_spec, num_actions)
    )
    tf.random.set_seed(config.seed + hvd.rank())
    link = _cluster_transport(
        config, agent, observation_spec, num_actions, learner_host, actor_hosts, evaluator_host
    )
    return Learner(config, hvd, agent, link, frames_per_step, actor_hosts).run()


def train_actor(config):
    learner_host, actor_hosts, evaluator_host = _cluster_addresses()
    host_tuning.tune_actor(config)
    own_address = actor_hosts[FLAGS.task]
    tf.random.set_seed(actor_seed(config.seed, own_address))
    agent, observation_spec, num_actions, _ = build_agent(config)
    link = _cluster_transport(
        config, agent, observation_spec, num_actions, learner_host, actor_hosts, evaluator_host
    )
    env = create_env(config, own_address)
    name = f"actor {FLAGS.task} ({own_address})"
    try:
        learner = LearnerLink(link, learner_host, config.learner_wait_secs, name)
        return Actor(config, agent, learner, env, name).run()
    finally:
        env.close()
        link.close()


def evaluate_during_training(config):
    """The evaluator of this worker set (evaluation.Evaluator): games with the learner's newest
    parameters, on one TF kernel thread on CPU nothing else wants; returns the exit code."""
    learner_host, actor_hosts, evaluator_host = _cluster_addresses()
    config_lib.check_logdir(config.logdir)
    host_tuning.tune_evaluator(config)
    tf.random.set_seed(config.seed)
    agent, observation_spec, num_actions, frames_per_step = build_agent(config)
    link = _cluster_transport(
        config, agent, observation_spec, num_actions, learner_host, actor_hosts, evaluator_host
    )
    env = evaluation.create_env(config, screens=config.eval_video_every > 0)
    name = f"evaluator ({evaluator_host})"
    try:
        player = evaluation.GamePlayer(agent, env, config.test_action_selection)
        learner = LearnerLink(link, learner_host, config.learner_wait_secs, name)
        return evaluation.Evaluator(config, agent, learner, player, frames_per_step, name).run()
    finally:
        env.close()
        link.close()


def evaluate(config):
    """Plays --test_num_episodes full games with the latest checkpoint; prints the returns.

    With --record_video, each game's native screens go to a video (video.GameRecorder); an
    Atari game is then played by environments.AtariEnvironment, not the C++ vector env."""
    config_lib.check_logdir(config.logdir, writable=False)
    agent, _, _, _ = build_agent(config)
    path = checkpointing.restore_for_evaluation(config.logdir, agent=agent)
    logging.info("evaluating %s (%s actions)", path, config.test_action_selection)
    env = evaluation.create_env(config, screens=bool(FLAGS.record_video))
    recorder = None
    if FLAGS.record_video:
        frames = tf.train.load_variable(path, "environment_frames/.ATTRIBUTES/VARIABLE_VALUE")
        try:
            recorder = video.GameRecorder(
                FLAGS.record_video,
                config.level_name,
                int(frames),
                config.test_num_episodes,
                env.screen_fps,
            )
        except video.VideoError as e:
            raise UsageError(f"--record_video: {e}") from e
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


def main(argv):
    del argv
    config = config_lib.from_flags(FLAGS)
    logging.info("%s", config_lib.defaults_line(config))
    try:
        if FLAGS.mode == "test":
            return evaluate(config)
        if FLAGS.job_name == "learner":
            return train_learner(config)
        if FLAGS.job_name == "evaluator":
            return evaluate_during_training(config)
        return train_actor(config)
    except (
        UsageError,
        config_lib.ConfigError,
        transport.AddressError,
        agents.UnknownAgentError,
        environments.UnknownEnvironmentError,
        checkpointing.CheckpointError,
        LearnerUnreachableError,
        replay.ReplayTooLargeError,
        DivergedError,
    ) as e:
        print(f"experiment.py ({FLAGS.job_name} {FLAGS.task}): error: {e}", file=sys.stderr)
        return 2


def exit_status(system_exit):
    """The process exit status of a SystemExit (sys.exit's argument: None, a number or a
    message, which is printed)."""
    if system_exit.code is None or isinstance(system_exit.code, int):
        return system_exit.code or 0
    print(system_exit.code, file=sys.stderr)
    return 1


def cli():
    """Runs `main` and ends the process with its status at once, skipping Python's teardown:
    there, closing a TF session whose learner is gone blocks for minutes or forever, and a
    worker that does not end cannot be restarted by the supervisor."""
    try:
        app.run(main)
        status = 0
    except SystemExit as e:
        status = exit_status(e)
    except BaseException:  # as the interpreter reports an uncaught one, including Ctrl-C
        traceback.print_exc()
        status = 1
    logging.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    cli()
