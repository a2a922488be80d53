"""checkpointing.py on real TF checkpoints of a real agent, written as the learner writes them:
damage (a truncated data file, an emptied or garbled `checkpoint` state file) falls back to the
newest readable checkpoint, logged; a checkpoint of another agent is refused at once, named."""

import dataclasses
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

import agents
import checkpointing
import config
import environments
import train_step
from agents.running_moments import RunningMoments
from roles import build_agent
from tests.training_settings import CARTPOLE_SETTINGS

CARTPOLE = config.Config(**CARTPOLE_SETTINGS)


def build(agent_name="MLPAgent", num_actions=None, observation_shape=None):
    """The agent roles.build_agent makes for CartPole, or `agent_name` with another number
    of actions or observation shape (built the same way: its variables created by one call)."""
    if num_actions is None and observation_shape is None:
        return build_agent(dataclasses.replace(CARTPOLE, agent_name=agent_name))[0]
    agent = agents.agent_factory(agent_name)(num_actions or 2)
    dummy = environments.StepOutput(
        reward=tf.zeros([1], tf.float32),
        info=environments.StepOutputInfo(
            tf.zeros([1], tf.float32), tf.zeros([1], tf.int32), tf.zeros([1], tf.bool)
        ),
        done=tf.zeros([1], tf.bool),
        observation=tf.zeros([1, *(observation_shape or [4])], tf.float32),
    )
    agent(tf.zeros([1], tf.int32), dummy, agent.initial_state(1))
    return agent


def learner_checkpointer(logdir, agent=None, settings=CARTPOLE):
    """A Checkpointer tracking what learner.Learner tracks (agent, optimizer with its slots,
    frame counter); returns (checkpointer, agent, frames)."""
    agent = agent or build()
    optimizer = train_step.make_optimizer(settings, tf.Variable(settings.learning_rate))
    train_step.create_optimizer_state(optimizer, agent)
    frames = tf.Variable(0, dtype=tf.int64, trainable=False, name="environment_frames")
    checkpointer = checkpointing.Checkpointer(
        str(logdir), agent=agent, optimizer=optimizer, environment_frames=frames
    )
    return checkpointer, agent, frames


def write_learner_checkpoints(logdir, count, agent=None, settings=CARTPOLE):
    """`count` checkpoints ckpt-1..ckpt-count in `logdir`, as the learner saves them: checkpoint
    i holds environment_frames 1000 * i and the agent's variables shifted by i. Returns
    {path: first agent variable's values}."""
    checkpointer, agent, frames = learner_checkpointer(logdir, agent, settings)
    checkpointer.restore_latest()
    saved = {}
    for i in range(1, count + 1):
        frames.assign(1000 * i)
        for variable in agent.variables:
            variable.assign_add(tf.ones_like(variable))
        saved[checkpointer.save()] = agent.variables[0].numpy().copy()
    return saved


def truncate(path_prefix):
    """Truncates a checkpoint's data file to half its size, as a full disk or a crash mid-copy."""
    data = f"{path_prefix}.data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)


@pytest.fixture
def logs(caplog):
    """The log records' text (absl logs through Python's logging)."""
    caplog.set_level(logging.INFO)
    return lambda: "\n".join(record.getMessage() for record in caplog.records)


def test_a_truncated_newest_checkpoint_falls_back_to_the_older_one(tmp_path, logs):
    saved = write_learner_checkpoints(tmp_path, 3)
    directory = tmp_path / "checkpoints"
    truncate(directory / "ckpt-3")

    checkpointer, agent, frames = learner_checkpointer(tmp_path)
    assert checkpointer.restore_latest() == str(directory / "ckpt-2")
    assert int(frames.numpy()) == 2000
    np.testing.assert_array_equal(agent.variables[0].numpy(), saved[str(directory / "ckpt-2")])
    assert (
        f"checkpoint {directory / 'ckpt-3'} is unusable (Read less bytes than requested): "
        "trying the next older one"
    ) in logs()
    # Training goes on: the next save is ckpt-3 again, over the damaged one.
    assert checkpointer.save() == str(directory / "ckpt-3")
    assert learner_checkpointer(tmp_path)[0].restore_latest() == str(directory / "ckpt-3")

    evaluated = build()
    truncate(directory / "ckpt-3")
    path = checkpointing.restore_for_evaluation(str(tmp_path), agent=evaluated)
    assert path == str(directory / "ckpt-2")
    np.testing.assert_array_equal(evaluated.variables[0].numpy(), saved[path])


def test_every_checkpoint_truncated_is_one_error_naming_the_directory_and_each(tmp_path, logs):
    write_learner_checkpoints(tmp_path, 3)
    directory = tmp_path / "checkpoints"
    for n in (1, 2, 3):
        truncate(directory / f"ckpt-{n}")
    for restore in (
        lambda: learner_checkpointer(tmp_path)[0].restore_latest(),
        lambda: checkpointing.restore_for_evaluation(str(tmp_path), agent=build()),
    ):
        with pytest.raises(checkpointing.CheckpointError) as error:
            restore()
        message = str(error.value)
        assert message.startswith(f"no readable checkpoint in {directory}: ")
        for n in (3, 2, 1):
            assert f"checkpoint {directory / f'ckpt-{n}'} is unusable (Read less bytes" in message
        assert "\n" not in message
    assert f"checkpoint {directory / 'ckpt-1'} is unusable" in logs()


@pytest.mark.parametrize(
    "state", [b"", b"garbage, not a checkpoint state\n", b"\x00\xff\xfe\x17"], ids=repr
)
def test_an_unreadable_state_file_still_restores_the_newest_intact_checkpoint(
    tmp_path, logs, state
):
    saved = write_learner_checkpoints(tmp_path, 3)
    directory = tmp_path / "checkpoints"
    state_file = directory / "checkpoint"

    state_file.write_bytes(state)
    evaluated = build()
    path = checkpointing.restore_for_evaluation(str(tmp_path), agent=evaluated)
    assert path == str(directory / "ckpt-3")
    np.testing.assert_array_equal(evaluated.variables[0].numpy(), saved[path])
    assert f"checkpoint state file {state_file} is unreadable" in logs()
    assert state_file.read_bytes() == state  # evaluation only reads

    # With the newest truncated as well, the next older one.
    truncate(directory / "ckpt-3")
    assert checkpointing.restore_for_evaluation(str(tmp_path), agent=build()) == str(
        directory / "ckpt-2"
    )

    # The learner resumes, writes the state file anew, and its manager keeps 3 checkpoints.
    checkpointer, _, frames = learner_checkpointer(tmp_path)
    assert checkpointer.restore_latest() == str(directory / "ckpt-2")
    assert int(frames.numpy()) == 2000
    assert tf.train.latest_checkpoint(str(directory)) == str(directory / "ckpt-3")
    checkpointer.save()
    checkpointer.save()
    assert sorted(p.name for p in directory.glob("*.index")) == [
        "ckpt-2.index",
        "ckpt-3.index",
        "ckpt-4.index",
    ]
    assert tf.train.latest_checkpoint(str(directory)) == str(directory / "ckpt-4")


def test_a_missing_state_file_takes_the_checkpoints_from_their_files(tmp_path, logs):
    write_learner_checkpoints(tmp_path, 2)
    directory = tmp_path / "checkpoints"
    (directory / "checkpoint").unlink()
    assert checkpointing.restore_for_evaluation(str(tmp_path), agent=build()) == str(
        directory / "ckpt-2"
    )
    assert "is missing: taking the checkpoints from the ckpt-N.index files" in logs()


def test_an_unreadable_state_file_without_checkpoints(tmp_path):
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    (directory / "checkpoint").write_bytes(b"")
    with pytest.raises(checkpointing.CheckpointError, match=f"no checkpoint in {directory} "):
        checkpointing.restore_for_evaluation(str(tmp_path), agent=build())
    # The learner starts afresh, its first checkpoint is ckpt-1.
    checkpointer, _, _ = learner_checkpointer(tmp_path)
    assert checkpointer.restore_latest() is None
    assert checkpointer.save() == str(directory / "ckpt-1")


def test_without_checkpoints_the_learner_starts_afresh_and_evaluation_refuses(tmp_path):
    assert learner_checkpointer(tmp_path)[0].restore_latest() is None
    with pytest.raises(checkpointing.CheckpointError, match="no checkpoint in .* --mode=train"):
        checkpointing.restore_for_evaluation(str(tmp_path / "other"), agent=build())


@pytest.mark.parametrize(
    "other, expected",
    [
        # Another game's number of actions: the policy head's shape differs.
        (
            lambda: build("MLPAgent", num_actions=6),
            "agent/_baseline/w has shape [67, 1] in the checkpoint, [71, 1] in the agent",
        ),
        # Another agent: its heads' shapes differ, its torso's variables are not in it.
        (
            lambda: build("SimpleConvNetAgent", num_actions=2, observation_shape=[84, 84, 4]),
            "agent/_baseline/w has shape [67, 1] in the checkpoint, [515, 1] in the agent",
        ),
    ],
)
def test_another_agents_checkpoint_is_refused_at_once_naming_both(tmp_path, logs, other, expected):
    write_learner_checkpoints(tmp_path, 2)
    newest = tmp_path / "checkpoints" / "ckpt-2"
    agent = other()
    name = type(agent).__name__
    for restore in (
        lambda: checkpointing.restore_for_evaluation(str(tmp_path), agent=agent),
        lambda: learner_checkpointer(tmp_path, agent)[0].restore_latest(),
    ):
        with pytest.raises(checkpointing.CheckpointError) as error:
            restore()
        message = str(error.value)
        assert message.startswith(
            f"checkpoint {newest} does not match the agent (--agent_name={name}, "
            f"{agent.num_actions} actions): "
        )
        assert expected in message
        assert "unusable" not in message and "\n" not in message
    assert "unusable" not in logs()  # not taken for damage, no fallback tried


@pytest.mark.parametrize("normalized_before", [True, False], ids=["normalized", "scaled"])
def test_a_checkpoint_of_the_other_input_normalisation_is_refused_naming_the_flag(
    tmp_path, normalized_before
):
    """Either way: the input statistics missing from the checkpoint, or in it but not in the
    agent (which would drop them without a word)."""

    def agent(normalized):
        return build_agent(dataclasses.replace(CARTPOLE, normalize_input=normalized))[0]

    write_learner_checkpoints(tmp_path, 1, agent=agent(normalized_before))
    with pytest.raises(checkpointing.CheckpointError) as error:
        checkpointing.restore_for_evaluation(str(tmp_path), agent=agent(not normalized_before))
    where = "is in the checkpoint, not in" if normalized_before else "is not in the checkpoint"
    assert "agent/_input_normalizer/_count (shape []) " + where in str(error.value)
    assert "(2 more variable(s) differ)" in str(error.value)
    assert "--normalize_input" in str(error.value)


@pytest.mark.parametrize(
    "setting, missing",
    [
        ("separate_value_torso", "separate value torso): agent/_value_torso/"),
        ("popart", "PopArt value head): agent/_baseline/"),
    ],
)
def test_a_checkpoint_of_the_plain_value_network_is_refused_by_another(tmp_path, setting, missing):
    """A shared torso's checkpoint restored by a separate value torso, a linear value head's by
    PopArt's: the new variables are missing, and the error names the flag."""
    write_learner_checkpoints(tmp_path, 1)
    other = build_agent(dataclasses.replace(CARTPOLE, **{setting: True}))[0]
    with pytest.raises(checkpointing.CheckpointError) as error:
        checkpointing.restore_for_evaluation(str(tmp_path), agent=other)
    assert missing in str(error.value)
    assert "is not in the checkpoint" in str(error.value)
    assert f"--{setting}" in str(error.value)


def test_a_checkpoint_without_the_value_target_statistics_is_refused_naming_the_flag(tmp_path):
    """A run resumed with --normalize_value_loss from a checkpoint written without it: the
    learner's running moments of the value targets are not in it."""
    write_learner_checkpoints(tmp_path, 1)
    _, agent, frames = learner_checkpointer(tmp_path / "other")
    moments = RunningMoments(name="value_target_moments")
    moments.create_variables([])
    checkpointer = checkpointing.Checkpointer(
        str(tmp_path), agent=agent, environment_frames=frames, value_target_moments=moments
    )
    with pytest.raises(checkpointing.CheckpointError) as error:
        checkpointer.restore_latest()
    assert "value_target_moments/_count (shape []) is not in the checkpoint" in str(error.value)
    assert "--normalize_value_loss" in str(error.value)


def test_a_missing_variable_is_named(tmp_path):
    """A checkpoint that lacks one of the agent's variables (here: an agent saved alone, as a
    checkpoint of another program might be) names it."""
    directory = tmp_path / "checkpoints"
    agent = build()
    tf.train.CheckpointManager(tf.train.Checkpoint(agent=agent._torso), str(directory), 1).save()
    with pytest.raises(checkpointing.CheckpointError) as error:
        checkpointing.restore_for_evaluation(str(tmp_path), agent=build())
    assert "does not match the agent (--agent_name=MLPAgent, 2 actions): " in str(error.value)
    assert "agent/_baseline/b (shape [1]) is not in the checkpoint" in str(error.value)


def test_a_mismatching_newest_checkpoint_is_not_skipped_for_an_older_matching_one(tmp_path):
    """The decision checkpointing.py documents: a mismatch is refused at once (a --logdir
    pointed at another run), only damage falls back."""
    write_learner_checkpoints(tmp_path, 1)
    directory = tmp_path / "checkpoints"
    other = build("MLPAgent", num_actions=6)
    tf.train.CheckpointManager(tf.train.Checkpoint(agent=other), str(directory), 3).save(
        checkpoint_number=2
    )
    with pytest.raises(checkpointing.CheckpointError, match="ckpt-2 does not match the agent"):
        checkpointing.restore_for_evaluation(str(tmp_path), agent=build())
    # Unreadable, the other agent's newest checkpoint is damage: skipped for the older one.
    (directory / "ckpt-2.index").write_bytes(b"not a checkpoint")
    assert checkpointing.restore_for_evaluation(str(tmp_path), agent=build()) == str(
        directory / "ckpt-1"
    )
