"""experiment.py end to end: a learner and actors as real processes on loopback, free ports."""

import re
import signal
import socket
import sys

import numpy as np
import pytest
import tensorflow as tf

import config
import pixel_games
from exit_codes import EXIT_BAD_INPUT, EXIT_LEARNER_LOST, EXIT_STOPPED_BY_SIGNAL
from tests.training_settings import CARTPOLE
from tools import local_cluster, summary_reader
from tools.local_cluster import cluster_flags, free_ports

pytestmark = pytest.mark.slow


def train_one_learner_two_actors(spawn, logdir, flags, timeout):
    """A learner and two actors with `flags` until the learner's frame budget; all exit 0.

    Returns the learner's Process and the returns of every game, in frame order."""
    flags = [*cluster_flags(2), f"--logdir={logdir}", *flags]
    learner = spawn([*flags, "--job_name=learner"], "learner")
    actors = [spawn([*flags, "--job_name=actor", f"--task={j}"], f"actor{j}") for j in range(2)]
    assert learner.wait(timeout=timeout) == 0, learner.log()[-3000:]
    for actor in actors:
        assert actor.wait(timeout=60) == 0, actor.log()[-3000:]
        assert "learner finished training; exiting" in actor.log()
    level_name = [f for f in flags if f.startswith("--level_name=")][-1].split("=", 1)[1]
    return learner, [r for _, r in summary_reader.episode_returns(logdir, level_name)]


def test_the_conv_agent_learns_from_pixels(spawn, tmp_path):
    """Through a real learner and two actors, the Atari defaults (config.Config: Adam, orthogonal
    initialisation, normalised advantages under the clipped surrogate, minibatches of two
    unrolls, 64 steps) teach SimpleConvNetAgent PixelBandit-v0 (pixel_games.py): pick the third
    of an 84x84x4 frame that holds a 4x4 square; chance 1/3, bar 0.9. The IMPALA paper's settings
    (RMSProp with epsilon 0.01 inside the square root, Sonnet's initialisation) stay at chance
    here, as they stayed at -20 on Pong. Batches of 8 on-policy unrolls and no replay: one use of
    each frame (replay would take 4x the learner's time). The budget leaves room beyond where a
    run on a shorter one had learnt the task (docs/history.md)."""
    logdir = tmp_path / "logdir"
    settings = {
        "level_name": pixel_games.ID,
        "agent_name": "SimpleConvNetAgent",
        "total_environment_frames": 70_000,
        "batch_size": 8,
        "replay_size": 0,
        "log_secs": 0,  # a progress line and summaries after every step
        "learner_wait_secs": 120,
        "batch_timeout_secs": 120,
    }
    _, returns = train_one_learner_two_actors(
        spawn, logdir, config.flag_args(settings), timeout=1500
    )
    assert pixel_games.accuracy(returns[:300]) < 0.45, returns[:300]  # it starts near chance
    assert pixel_games.accuracy(returns[-300:]) >= 0.9, returns[-300:]


PONG = [
    "--level_name=PongNoFrameskip-v4",
    "--agent_name=SimpleConvNetAgent",
    "--batch_size=2",
    "--unroll_length=10",
    "--num_envs_per_actor=2",
    "--queue_capacity=4",
    "--minibatch_unrolls=0",  # the first step is on the parameters the actors acted with (below)
    # ... and on their input statistics: with normalisation the learner folds the batch in first.
    "--nonormalize_input",
    "--normalize_value_loss",  # its statistics are checkpointed and restored with the rest
    "--separate_value_torso",  # the actor's network is the learner's, value torso too
    "--log_secs=0",
    "--checkpoint_secs=1",
    "--learner_wait_secs=120",
    "--batch_timeout_secs=120",
]


def checkpointed_frames(logdir):
    """The environment frame count stored in the latest checkpoint of `logdir`."""
    path = tf.train.latest_checkpoint(str(logdir / "checkpoints"))
    return int(tf.train.load_variable(path, "environment_frames/.ATTRIBUTES/VARIABLE_VALUE"))


def test_pong_checkpoints_survives_learner_kill_and_evaluates(spawn, tmp_path):
    logdir = tmp_path / "logdir"
    flags = [*cluster_flags(1), *PONG, f"--logdir={logdir}", "--total_environment_frames=10000000"]
    learner = spawn([*flags, "--job_name=learner"], "learner")
    actor = spawn([*flags, "--job_name=actor", "--task=0"], "actor")
    learner.wait_for_log("saved checkpoint", timeout=300, count=2)  # periodic, mid-training
    assert list(logdir.glob("events.out.tfevents.*")), "no TensorBoard summaries written"
    # The actor's agent, loaded from the published parameters, is the learner's network: on the
    # first step (every unroll acted with the parameters the learner still has, as the actor
    # waits for the first publish) the importance weights pi/mu are 1.
    first_log_rho = summary_reader.scalars(logdir, "policy/mean_abs_log_rho")[0][1]
    assert first_log_rho < 1e-4, first_log_rho

    learner.signal(signal.SIGKILL)
    learner.wait(timeout=30)
    actor.wait_for_log("lost learner", timeout=120)
    saved_frames = checkpointed_frames(logdir)
    assert saved_frames > 0

    restarted = spawn([*flags, "--job_name=learner"], "learner_restarted")
    restarted.wait_for_log("restored checkpoint", timeout=300)
    restarted.wait_for_log("training from", timeout=60)
    assert int(restarted.log().split("training from ")[1].split()[0]) == saved_frames
    actor.wait_for_log("reconnected to learner", timeout=300)
    restarted.wait_for_log("] frames", timeout=300)  # trains on the reconnected actor's data

    # SIGTERM (a preemption): a final checkpoint, and the status of a learner stopped before
    # its budget. Its actor's side (it waits for the learner's return, then gives up) is
    # tests/learner_stop_test.py's.
    restarted.signal(signal.SIGTERM)
    assert restarted.wait(timeout=120) == EXIT_STOPPED_BY_SIGNAL, restarted.log()[-3000:]
    log = restarted.log()
    assert "SIGTERM received" in log
    assert log.rindex("saved checkpoint") > log.index("SIGTERM received")
    assert checkpointed_frames(logdir) > saved_frames
    actor.kill()

    for selection in ("greedy", "sample"):
        evaluation = spawn(
            [
                *PONG,
                f"--logdir={logdir}",
                "--mode=test",
                "--test_num_episodes=1",
                f"--test_action_selection={selection}",
            ],
            f"test_{selection}",
        )
        assert evaluation.wait(timeout=600) == 0, evaluation.log()[-3000:]
        assert "mean return over 1 episodes" in evaluation.log()


def test_test_mode_without_checkpoint_fails_clearly(spawn, tmp_path):
    evaluation = spawn(
        [*CARTPOLE, f"--logdir={tmp_path / 'empty'}", "--mode=test"], "test_without_checkpoint"
    )
    assert evaluation.wait(timeout=120) != 0
    assert f"no checkpoint in {tmp_path / 'empty' / 'checkpoints'}" in evaluation.log()


def test_corrupt_checkpoint_fails_clearly_in_test_mode(spawn, tmp_path):
    logdir = tmp_path / "logdir"
    checkpoints = logdir / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
    (checkpoints / "ckpt-1.index").write_bytes(b"not a checkpoint")
    (checkpoints / "ckpt-1.data-00000-of-00001").write_bytes(b"garbage")
    evaluation = spawn([*CARTPOLE, f"--logdir={logdir}", "--mode=test"], "test_corrupt")
    assert evaluation.wait(timeout=120) != 0
    assert f"checkpoint {checkpoints / 'ckpt-1'} is unusable" in evaluation.log()


@pytest.mark.parametrize(
    "bad_flags, message",
    [
        (["--level_name=NoSuchGame-v9"], "NoSuchGame-v9"),
        (["--agent_name=NoSuchAgent"], "NoSuchAgent"),
        (["--learner_host=localhost"], "--learner_host: 'localhost' is not HOST:PORT"),
        (["--job_name=actor", "--task=5"], "--task=5: no such actor in --actor_hosts"),
    ],
)
def test_bad_flags_give_one_line_errors(spawn, bad_flags, message):
    process = spawn([*cluster_flags(1), *CARTPOLE, *bad_flags], "bad")
    assert process.wait(timeout=120) == 2
    assert message in process.log()


@pytest.mark.parametrize(
    "bad_flag, message",
    [
        ("--minibatch_unrolls=-1", "flag --minibatch_unrolls=-1: -1 is not a non-negative"),
        ("--step_timeout_secs=-1", "flag --step_timeout_secs=-1: -1 is not a non-negative"),
        ("--actor_niceness=20", "flag --actor_niceness=20: 20 is not an integer in the range"),
    ],
)
def test_out_of_range_settings_are_refused_by_flag_parsing(spawn, bad_flag, message):
    process = spawn([*cluster_flags(1), *CARTPOLE, bad_flag], "out_of_range")
    assert process.wait(timeout=120) == EXIT_BAD_INPUT
    assert message in process.log()


def test_a_replay_too_large_for_the_host_is_refused_before_the_learner_serves(spawn):
    learner = spawn(
        [
            *cluster_flags(1),
            "--level_name=PongNoFrameskip-v4",
            "--job_name=learner",
            "--replay_size=100000000",  # ~55 TiB of frames
        ],
        "learner_huge_replay",
    )
    assert learner.wait(timeout=120) == 2
    log = learner.log()
    assert "--replay_size=100000000 unrolls need" in log and "GiB available on this host" in log
    assert "serving actors" not in log


def test_port_in_use_and_unreachable_learner(spawn):
    flags = cluster_flags(1)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", int(flags[1].rsplit(":", 1)[1])))
        busy.listen()
        actor = spawn([*flags, *CARTPOLE, "--job_name=actor", "--task=0"], "actor_busy_port")
        assert actor.wait(timeout=120) == 2
        assert "is in use" in actor.log()

    # Nobody listens on the learner's port: the actor gives up after --learner_wait_secs.
    actor = spawn(
        [*flags, *CARTPOLE, "--job_name=actor", "--task=0", "--learner_wait_secs=5"], "actor_alone"
    )
    assert actor.wait(timeout=120) == EXIT_LEARNER_LOST
    log = actor.log()
    assert "waiting for learner" in log
    assert "not reachable/initialised after" in log


@pytest.mark.parametrize("learner_host", ["::1:{port}", "[::1]:{port}"])
def test_an_ipv6_learner_is_refused_naming_the_flag(spawn, learner_host):
    """An actor given an IPv6 learner exits at once with the reason, instead of hanging silently."""
    learner_port, actor_port = free_ports(2)
    actor = spawn(
        [
            f"--learner_host={learner_host.format(port=learner_port)}",
            f"--actor_hosts=127.0.0.1:{actor_port}",
            *CARTPOLE,
            "--job_name=actor",
            "--task=0",
            "--learner_wait_secs=5",
        ],
        "actor_ipv6",
    )
    assert actor.wait(timeout=120) == 2
    assert "--learner_host: " in actor.log() and "IPv6 is not supported" in actor.log()


def test_test_mode_evaluates_the_older_checkpoint_when_the_newest_is_truncated(spawn, tmp_path):
    """A truncated newest checkpoint (a full disk, a crash mid-copy) is logged and skipped: the
    evaluation plays with the next older one."""
    from tests.checkpointing_test import truncate, write_learner_checkpoints

    logdir = tmp_path / "logdir"
    checkpoints = logdir / "checkpoints"
    write_learner_checkpoints(logdir, 2)  # MLPAgent on CartPole, as the learner saves them
    truncate(checkpoints / "ckpt-2")
    evaluation = spawn(
        [*CARTPOLE, f"--logdir={logdir}", "--mode=test", "--test_num_episodes=1"],
        "test_truncated_newest",
    )
    assert evaluation.wait(timeout=120) == 0, evaluation.log()[-3000:]
    log = evaluation.log()
    newest = checkpoints / "ckpt-2"
    assert f"checkpoint {newest} is unusable (Read less bytes than requested)" in log
    assert f"evaluating {checkpoints / 'ckpt-1'} (" in log
    assert "mean return over 1 episodes" in log


def test_test_mode_refuses_another_agents_checkpoint_in_one_line(spawn, tmp_path):
    """A checkpoint of another game's agent (6 actions, CartPole's has 2) is no damage: one line
    says it does not match the agent, naming both and a variable whose shape differs."""
    from tests.checkpointing_test import build, write_learner_checkpoints

    logdir = tmp_path / "logdir"
    write_learner_checkpoints(logdir, 1, agent=build("MLPAgent", num_actions=6))
    evaluation = spawn([*CARTPOLE, f"--logdir={logdir}", "--mode=test"], "test_other_agent")
    assert evaluation.wait(timeout=120) == 2, evaluation.log()[-3000:]
    assert (
        f"error: checkpoint {logdir / 'checkpoints' / 'ckpt-1'} does not match the agent "
        "(--agent_name=MLPAgent, 2 actions): agent/_baseline/w has shape [71, 1] in the "
        "checkpoint, [67, 1] in the agent"
    ) in evaluation.log()


# Bad input: refused before anything starts, with one line naming the flag.

FRONTEND = [
    sys.executable,
    str(local_cluster.REPO / "run_experiment_mm_raw.py"),
    "--workers_csv_path=sandbox/local_workers_example.csv",
    "--dry_run",
]

BAD_TRAINING_SETTINGS = [
    ("--batch_size=0", "flag --batch_size=0: 0 is not a positive integer"),
    ("--unroll_length=0", "flag --unroll_length=0: 0 is not a positive integer"),
    ("--num_envs_per_actor=0", "flag --num_envs_per_actor=0: 0 is not a positive integer"),
    ("--learning_rate=-1", "flag --learning_rate=-1.0: -1.0 is not greater than 0"),
    ("--replay_ratio=-1", "flag --replay_ratio=-1: -1.0 is not a non-negative number"),
    (
        "--total_environment_frames=0",
        "flag --total_environment_frames=0: 0 is not a positive integer",
    ),
]


@pytest.mark.parametrize("bad_flag, message", BAD_TRAINING_SETTINGS)
def test_bad_training_settings_are_refused_by_every_worker(spawn, bad_flag, message):
    workers = [
        spawn([*cluster_flags(1), *CARTPOLE, f"--job_name={job}", bad_flag], f"bad_{job}")
        for job in ("learner", "actor")
    ]
    for worker in workers:
        assert worker.wait(timeout=120) == EXIT_BAD_INPUT, worker.log()[-3000:]
        assert message in worker.log()


@pytest.mark.parametrize("bad_flag, message", BAD_TRAINING_SETTINGS)
def test_bad_training_settings_are_refused_by_the_frontend_before_planning(
    start, tmp_path, bad_flag, message
):
    frontend = start([*FRONTEND, f"--logdir={tmp_path / 'logdir'}", bad_flag], "frontend")
    assert frontend.wait(timeout=120) == EXIT_BAD_INPUT, frontend.log()[-3000:]
    log = frontend.log()
    assert message in log
    assert "--job_name=" not in log and "Dry run" not in log  # no plan


def bad_logdir(tmp_path, kind):
    """(a --logdir of `kind`, the reason its error gives)."""
    a_file = tmp_path / "afile"
    a_file.write_text("")
    return {
        "a file": (a_file, "it is a file, not a directory"),
        "under a file": (a_file / "sub", f"{a_file} is a file, not a directory"),
        # sysfs takes no new entry from anyone, root included.
        "not writable": ("/sys/impala-logdir", "not writable: cannot create anything in /sys"),
    }[kind]


@pytest.mark.parametrize("kind", ["a file", "under a file", "not writable"])
def test_a_bad_logdir_is_refused_before_anything_starts(spawn, start, tmp_path, kind):
    logdir, reason = bad_logdir(tmp_path, kind)
    message = f"--logdir={logdir}: {reason}"
    learner = spawn([*cluster_flags(1), *CARTPOLE, f"--logdir={logdir}"], "learner")
    frontend = start([*FRONTEND, f"--logdir={logdir}"], "frontend")
    assert learner.wait(timeout=120) == 2, learner.log()[-3000:]
    assert f"experiment.py (learner 0): error: {message}" in learner.log()
    assert "serving actors" not in learner.log()
    assert frontend.wait(timeout=120) == 2, frontend.log()[-3000:]
    assert message in frontend.log() and "Dry run" not in frontend.log()


@pytest.mark.parametrize("kind", ["a file", "under a file"])
def test_test_mode_refuses_a_logdir_that_is_no_directory(spawn, tmp_path, kind):
    logdir, reason = bad_logdir(tmp_path, kind)
    evaluation = spawn([*CARTPOLE, f"--logdir={logdir}", "--mode=test"], "test_bad_logdir")
    assert evaluation.wait(timeout=120) == 2, evaluation.log()[-3000:]
    assert f"error: --logdir={logdir}: {reason}" in evaluation.log()


DIVERGED = re.compile(
    r"experiment\.py \(learner 0\): error: training diverged at step (\d+) of this learner \(\d+ "
    r"environment frames\)"
)


@pytest.mark.parametrize("num_learners", [1, 2])
def test_diverging_learners_stop_naming_the_step_and_never_checkpoint_it(tmp_path, num_learners):
    """At --learning_rate=1000 Adam's first step moves every weight by 1000 and the next one's
    gradients overflow: every learner (Horovod rank) exits naming that step, and the checkpoints
    all come from before it: finite, from fewer optimizer steps (one per batch here)."""
    logdir = tmp_path / "logdir"
    flags = [
        *CARTPOLE,
        f"--logdir={logdir}",
        *("--optimizer=adam", "--epsilon=1e-5", "--learning_rate=1000"),
        "--checkpoint_secs=1",
    ]
    with local_cluster.WorkerSets(num_learners, num_learners, flags, tmp_path) as workers:
        assert workers.learners.wait(timeout=300) == 2, workers.learner_log()[-3000:]
        log = workers.learner_log()
    diverged_at = [int(step) for step in DIVERGED.findall(log)]
    assert len(diverged_at) == num_learners and len(set(diverged_at)) == 1, log[-3000:]
    # The learners trained a step before: its checkpoint is due (--checkpoint_secs=1 passed
    # while the step's function was traced).
    checkpoints = sorted((logdir / "checkpoints").glob("ckpt-*.index"))
    assert checkpoints, log[-3000:]
    for index in checkpoints:
        path = str(index.with_suffix(""))
        values = {
            name: tf.train.load_variable(path, name) for name, _ in tf.train.list_variables(path)
        }
        assert values["optimizer/step/.ATTRIBUTES/VARIABLE_VALUE"] < diverged_at[0], path
        floats = [v for v in values.values() if np.issubdtype(np.asarray(v).dtype, np.floating)]
        assert floats and all(np.isfinite(v).all() for v in floats), path


def test_an_actor_whose_learner_is_gone_gives_up_and_exits(spawn, tmp_path):
    """The learner killed: the actor waits --learner_wait_secs for it, then exits at once.

    Python's teardown would close the actor's TF session, which waits on the dead learner
    for minutes; a process that does not end cannot be restarted by the supervisor."""
    flags = [*cluster_flags(1), *CARTPOLE, f"--logdir={tmp_path / 'logdir'}"]
    learner = spawn([*flags, "--job_name=learner"], "learner")
    actor = spawn([*flags, "--job_name=actor", "--task=0", "--learner_wait_secs=30"], "actor")
    actor.wait_for_log("connected to learner", timeout=300)
    learner.signal(signal.SIGKILL)
    learner.wait(timeout=30)
    actor.wait_for_log("lost learner", timeout=120)
    actor.wait_for_log("not reachable/initialised after", timeout=120)
    # Giving up is the actor's last act: a bound far above that, far below the teardown's wait.
    assert actor.wait(timeout=20) == EXIT_LEARNER_LOST, actor.log()[-3000:]


def test_an_actor_gives_up_on_a_learner_port_that_does_not_answer(spawn):
    """Something listens on the learner's port but is no TF server: the actor logs its wait and
    gives up after --learner_wait_secs, instead of blocking in TF's session for ever."""
    flags = cluster_flags(1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", int(flags[0].rsplit(":", 1)[1])))
        silent.listen()
        actor = spawn(
            [*flags, *CARTPOLE, "--job_name=actor", "--task=0", "--learner_wait_secs=5"],
            "actor_silent_learner",
        )
        assert actor.wait(timeout=120) == EXIT_LEARNER_LOST, actor.log()[-3000:]
    log = actor.log()
    assert "waiting for learner" in log and "(no TF server answering, " in log
    assert "not reachable/initialised after" in log
