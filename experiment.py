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
Config to the role (roles.py). It imports no TensorFlow until the flags and the cluster's
addresses are found good: bad input is refused at once, in one line naming the flag, with
exit_codes.EXIT_BAD_INPUT (as every error of bad input the roles raise).
"""

import os
import sys
import traceback

import host_tuning

# Before TF is imported: a worker re-executes itself onto tcmalloc; an importer (benchmarks,
# tests) keeps glibc's freed memory for reuse, and the benchmarks that time the workers' stages
# re-execute themselves.
host_tuning.use_allocator(reexecute=__name__ == "__main__")

# TF's C++ INFO/WARNING lines (e.g. one per timed-out dequeue) drown the training log; TF reads
# this once, when roles.py imports it.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app, flags, logging

import cluster_file
import config as config_lib
import exit_codes

# No TensorFlow before the flags are parsed and checked (`main` imports roles.py, which does).
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


def _cluster_addresses():
    """This worker set's cluster_file.Cluster: from --cluster_file if given, else from
    --learner_host, --actor_hosts and --evaluator_host; checked against --job_name and --task."""
    if not FLAGS.cluster_file:
        cluster = cluster_file.Cluster(
            FLAGS.learner_host, FLAGS.actor_hosts, FLAGS.evaluator_host or None
        )
        source, evaluator_source = "--actor_hosts", "--evaluator_host"
    elif any(FLAGS[name].present for name in ("learner_host", "actor_hosts", "evaluator_host")):
        raise config_lib.ConfigError(
            "--cluster_file and --learner_host/--actor_hosts/--evaluator_host: give one or the "
            "other"
        )
    else:
        try:
            cluster = cluster_file.read(FLAGS.cluster_file)
        except (OSError, cluster_file.ClusterFileError) as e:
            raise config_lib.ConfigError(f"--cluster_file: {e}") from e
        source = f"--cluster_file={FLAGS.cluster_file}"
        evaluator_source = f"an 'evaluator HOST:PORT' line in {source}"
    if FLAGS.job_name == "actor" and not 0 <= FLAGS.task < len(cluster.actors):
        raise config_lib.ConfigError(
            f"--task={FLAGS.task}: no such actor in {source} ({len(cluster.actors)} given)"
        )
    if FLAGS.job_name in ("learner", "evaluator") and FLAGS.task != 0:
        raise config_lib.ConfigError(
            f"--task={FLAGS.task}: a worker set has one {FLAGS.job_name}, task 0"
        )
    if FLAGS.job_name == "evaluator" and cluster.evaluator is None:
        raise config_lib.ConfigError(
            f"--job_name=evaluator: no evaluator address; give {evaluator_source}"
        )
    return cluster


def main(argv):
    del argv
    config = config_lib.from_flags(FLAGS)
    logging.info("%s", config_lib.defaults_line(config))
    try:
        cluster = None if FLAGS.mode == "test" else _cluster_addresses()
    except config_lib.ConfigError as e:
        return _refuse(e)
    import roles  # TensorFlow: only now that the flags are found good.

    try:
        if FLAGS.mode == "test":
            return roles.evaluate(config, FLAGS.record_video)
        if FLAGS.job_name == "learner":
            return roles.train_learner(config, cluster)
        if FLAGS.job_name == "evaluator":
            return roles.evaluate_during_training(config, cluster)
        return roles.train_actor(config, cluster, FLAGS.task)
    except roles.BAD_INPUT_ERRORS as e:
        return _refuse(e)
    except roles.LEARNER_LOST_ERRORS as e:
        return _refuse(e, exit_codes.EXIT_LEARNER_LOST)


def _refuse(error, status=exit_codes.EXIT_BAD_INPUT):
    """One line for bad input (or a learner given up on), naming this process ('learner 0',
    'actor 2', '--mode=test'); returns the exit status."""
    role = "--mode=test" if FLAGS.mode == "test" else f"{FLAGS.job_name} {FLAGS.task}"
    print(f"experiment.py ({role}): error: {error}", file=sys.stderr)
    return status


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
        app.run(main, flags_parser=exit_codes.parse_flags)
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
