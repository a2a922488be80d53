"""config.py: every numeric setting is bounded where a value makes no sense, refused as the flags
are parsed (naming the flag); --logdir is checked without creating anything."""

import dataclasses
import os

import pytest
from absl import flags

import config
from tests.training_settings import CARTPOLE, CARTPOLE_TWO_LEARNERS

NUMERIC_FIELDS = [field for field in config.FIELDS if config.is_number(field)]
BOUNDS = ("lower_bound", "upper_bound", "greater_than", "less_than")


def parse(args):
    """The Config that `args` (list of --name=value) give, through a fresh set of flags."""
    flag_values = flags.FlagValues()
    config.define_flags(flag_values)
    flag_values(["program", *args])
    return config.from_flags(flag_values)


def out_of_bounds(field):
    """(bound, value) pairs just outside each bound of `field`, and NaN for a float."""
    metadata, step = field.metadata, 1 if field.type is int else 0.5
    values = []
    if metadata["lower_bound"] is not None:
        values.append(("lower_bound", metadata["lower_bound"] - step))
    if metadata["upper_bound"] is not None:
        values.append(("upper_bound", metadata["upper_bound"] + step))
    if metadata["greater_than"] is not None:
        values.append(("greater_than", metadata["greater_than"]))
    if metadata["less_than"] is not None:
        values.append(("less_than", metadata["less_than"]))
    if field.type is float:
        values.append(("finite", float("nan")))
    return values


def test_every_numeric_setting_declares_its_bounds_or_why_it_has_none():
    """A new numeric field cannot forget its bounds: it declares some, or says in `unbounded`
    why every value of it has a meaning."""
    for field in NUMERIC_FIELDS:
        bounded = any(field.metadata[key] is not None for key in BOUNDS)
        assert bounded != bool(field.metadata["unbounded"]), field.name


def test_the_defaults_and_the_recipes_are_within_the_bounds():
    assert parse([]) == config.Config()
    paper = parse(config.flag_args(config.IMPALA_PAPER))
    assert paper == dataclasses.replace(config.Config(), **config.IMPALA_PAPER)
    parse(CARTPOLE)
    parse(CARTPOLE_TWO_LEARNERS)


@pytest.mark.parametrize(
    "name, bound, value",
    [(field.name, *case) for field in NUMERIC_FIELDS for case in out_of_bounds(field)],
)
def test_a_value_out_of_bounds_is_refused_naming_the_flag(name, bound, value):
    with pytest.raises(flags.IllegalFlagValueError, match=f"^flag --{name}="):
        parse([f"--{name}={value}"])


@pytest.mark.parametrize(
    "arg, message",
    [
        ("--learning_rate=0", "flag --learning_rate=0.0: 0.0 is not greater than 0"),
        ("--epsilon=-1e-8", "flag --epsilon=-1e-08: -1e-08 is not greater than 0"),
        ("--policy_clip=1", "flag --policy_clip=1.0: 1.0 is not less than 1"),
        ("--momentum=1", "flag --momentum=1.0: 1.0 is not less than 1"),
        ("--gradients_clipping=inf", "flag --gradients_clipping=inf: inf is not a finite number"),
    ],
)
def test_strict_bounds_and_finiteness_read_as_absl_errors(arg, message):
    with pytest.raises(flags.IllegalFlagValueError) as error:
        parse([arg])
    assert str(error.value) == message


def test_the_strict_bounds_are_in_the_help():
    flag_values = flags.FlagValues()
    config.define_flags(flag_values)
    assert flag_values["learning_rate"].help.endswith("(greater than 0)")
    assert flag_values["policy_clip"].help.endswith("0: off. (less than 1)")


def test_values_at_the_inclusive_bounds_are_accepted():
    settings = parse(["--discounting=1", "--replay_beta=0", "--policy_clip=0", "--log_secs=0"])
    assert (settings.discounting, settings.replay_beta, settings.policy_clip) == (1, 0, 0)


# --logdir.


def test_a_missing_logdir_under_a_writable_directory_passes_and_is_not_created(tmp_path):
    logdir = tmp_path / "new" / "logdir"
    config.check_logdir(str(logdir))
    assert os.listdir(tmp_path) == []  # the probe left nothing behind
    config.check_logdir(str(tmp_path))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("writable", [True, False])
def test_a_logdir_that_is_a_file_or_under_one_is_refused(tmp_path, writable):
    a_file = tmp_path / "afile"
    a_file.write_text("")
    with pytest.raises(config.ConfigError, match=f"^--logdir={a_file}: it is a file, not a"):
        config.check_logdir(str(a_file), writable)
    under = a_file / "sub"
    with pytest.raises(config.ConfigError, match=f"^--logdir={under}: {a_file} is a file, not a"):
        config.check_logdir(str(under), writable)


def test_a_logdir_where_nothing_can_be_created_is_refused_even_for_root():
    # sysfs refuses new entries to every user, root included.
    with pytest.raises(
        config.ConfigError,
        match="^--logdir=/sys/impala-logdir: not writable: cannot create anything in /sys",
    ):
        config.check_logdir("/sys/impala-logdir")
    config.check_logdir("/sys/impala-logdir", writable=False)  # --mode=test only reads it


def test_an_empty_logdir_is_refused():
    with pytest.raises(config.ConfigError, match="^--logdir is empty"):
        config.check_logdir("")
