"""Defaults by environment family (config.py): --level_name's observations choose the image
(Atari) or the vector (CartPole) defaults; a flag given always wins; the frontend resolves them
once and forwards them, a worker started by hand resolves them the same way; both log which set
applied in one line."""

import dataclasses
import subprocess
import sys

import pytest
from absl import flags

import config
from tools import local_cluster

VECTOR = config.Config(**config.VECTOR_DEFAULTS, level_name="CartPole-v1")
CARTPOLE_LINE = "training defaults: the vector family's (CartPole-v1: observation shape (4,)); "


def flag_values(args):
    """A fresh set of the training flags, parsed from `args` (list of --name=value)."""
    values = flags.FlagValues()
    config.define_flags(values)
    values(["program", *args])
    return values


def parse(args):
    return config.from_flags(flag_values(args))


@pytest.mark.parametrize(
    "level_name, family, shape",
    [
        ("CartPole-v1", "vector", "(4,)"),
        ("Acrobot-v1", "vector", "(6,)"),
        ("MountainCar-v0", "vector", "(2,)"),
        ("PongNoFrameskip-v4", "image", "(84, 84, 4)"),
        ("ALE/Breakout-v5", "image", "(84, 84, 4)"),
        ("PixelBandit-v0", "image", "(84, 84, 4)"),
        ("PixelCatch-v0", "image", "(84, 84, 4)"),
    ],
)
def test_the_family_is_the_rank_of_the_observations(level_name, family, shape):
    assert config.environment_family(level_name) == (
        family,
        f"{level_name}: observation shape {shape}",
    )


def test_a_level_that_cannot_be_made_keeps_the_image_defaults_for_the_worker_to_refuse():
    assert config.environment_family("NoSuchGame-v9") == (
        "image",
        "NoSuchGame-v9: no environment that can be made here",
    )
    assert parse(["--level_name=NoSuchGame-v9"]) == config.Config(level_name="NoSuchGame-v9")


def test_each_family_s_defaults_are_within_the_flags_bounds():
    for defaults in config.FAMILY_DEFAULTS.values():
        settings = config.Config(**defaults)
        assert parse(config.flag_args(settings)) == settings


def test_without_flags_atari_keeps_config_s_defaults_and_cartpole_takes_the_vector_ones():
    assert parse([]) == config.Config()
    assert parse(["--level_name=ALE/Pong-v5"]) == config.Config(level_name="ALE/Pong-v5")
    cartpole = parse(["--level_name=CartPole-v1"])
    assert cartpole == VECTOR
    assert cartpole.agent_name == "MLPAgent"


def test_flags_given_win_over_the_family_s_defaults():
    # Config's own defaults, given: they win over the vector family's.
    given = ["--learning_rate=0.00025", "--total_environment_frames=10000000"]
    cartpole = parse(["--level_name=CartPole-v1", "--agent_name=ResNetAgent", *given])
    assert cartpole == dataclasses.replace(
        VECTOR, agent_name="ResNetAgent", learning_rate=2.5e-4, total_environment_frames=10**7
    )
    assert parse(["--learning_rate=0.001"]) == config.Config(learning_rate=0.001)


def test_flags_set_in_code_count_as_given():
    values = flag_values(["--level_name=CartPole-v1"])
    values.learning_rate = 0.001
    assert config.from_flags(values) == dataclasses.replace(VECTOR, learning_rate=0.001)
    values = flag_values([])
    values.level_name = "CartPole-v1"
    assert config.from_flags(values) == VECTOR


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--level_name=CartPole-v1"],
        ["--level_name=CartPole-v1", "--learning_rate=0.001", "--optimizer=adam"],
        ["--level_name=PixelCatch-v0", "--batch_size=4"],
    ],
)
def test_a_worker_given_the_forwarded_flags_resolves_what_the_frontend_did(args):
    resolved = parse(args)
    assert parse(config.flag_args(resolved)) == resolved
    # ... and so does a worker started by hand with the frontend's own flags.
    assert parse(args) == resolved


def test_the_line_names_the_family_and_the_settings_the_flags_change():
    assert config.defaults_line(VECTOR) == CARTPOLE_LINE + "changed by flags: none"
    changed = dataclasses.replace(VECTOR, learning_rate=0.003, logdir="/elsewhere")
    assert config.defaults_line(changed) == (
        CARTPOLE_LINE + "changed by flags: --learning_rate=0.003"
    )
    # Only the settings a family chooses are listed.
    atari = config.Config(agent_name="ResNetAgent", learning_rate=0.001, batch_size=8)
    assert config.defaults_line(atari) == (
        "training defaults: the image family's (PongNoFrameskip-v4: observation shape "
        "(84, 84, 4)); changed by flags: --agent_name=ResNetAgent --learning_rate=0.001"
    )


def training_flags_of(command):
    """The training flags (the fields of config.Config) of a worker's command line."""
    names = {*config.NAMES, *(f"no{name}" for name in config.NAMES)}  # --nosticky_actions
    return [arg for arg in command.split() if arg[2:].split("=")[0] in names]


def test_the_frontend_names_the_family_in_its_plan_and_forwards_the_resolved_settings(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "run_experiment_mm_raw.py",
            "--dry_run",
            "--verbose",
            f"--logdir={tmp_path}",
            "--level_name=CartPole-v1",
            "--learning_rate=0.01",
            "--batch_size=4",
        ],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    line = CARTPOLE_LINE + "changed by flags: --learning_rate=0.01"
    assert lines.count(line) == 1 and lines.index(line) == 1, result.stdout
    commands = [line for line in lines if line.startswith("    cd ")]
    assert len(commands) == 7  # 2 learners, 3 actors, an evaluator, mpirun
    expected = dataclasses.replace(VECTOR, learning_rate=0.01, batch_size=4, logdir=str(tmp_path))
    for command in commands[:-1]:
        assert parse(training_flags_of(command)) == expected, command


def test_a_worker_logs_the_family_as_it_starts(tmp_path):
    # --mode=test in an empty logdir: the worker logs the line, then finds no checkpoint.
    result = subprocess.run(
        [
            sys.executable,
            "experiment.py",
            "--mode=test",
            "--level_name=CartPole-v1",
            f"--logdir={tmp_path}",
        ],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "] " + CARTPOLE_LINE + "changed by flags: none\n" in result.stderr
