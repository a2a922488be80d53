"""The defaults the docs state are config.Config's: the README's table of the flags that matter
and the `--flag=value` settings of docs/configuration.md's section on the defaults (the image
family's, which are Config's own)."""

import dataclasses
import pathlib
import re

import pytest

import config as config_lib

REPO = pathlib.Path(__file__).resolve().parent.parent
DEFAULTS = {field.name: field.default for field in dataclasses.fields(config_lib.Config)}
SUFFIXES = {"K": 1_000, "M": 1_000_000}


def parse_value(text):
    """A default as the docs write it: `PongNoFrameskip-v4`, 10M, 500K, 2.5e-4, 64."""
    text = text.strip().strip("`")
    number = re.fullmatch(r"([\d.]+(?:e-?\d+)?)([KM]?)", text)
    if number is None:
        return text
    return float(number[1]) * SUFFIXES.get(number[2], 1)


def readme_table_defaults(text):
    """[(flag, stated default)] of the README's table under "## The flags that matter": a row
    may name several flags and as many comma-separated defaults."""
    section = text.split("## The flags that matter", 1)[1].split("\n## ", 1)[0]
    stated = []
    for row in re.findall(r"^\| (`--.*?) \| (.*?) \|", section, re.MULTILINE):
        names = re.findall(r"`--(\w+)`", row[0])
        values = row[1].split(", ")
        assert len(names) == len(values), f"README row {row}: {len(names)} flags, {values}"
        stated += zip(names, map(parse_value, values), strict=True)
    return stated


def configuration_defaults(text):
    """[(flag, stated default)] of each `--flag=value` alone in its backticks in configuration.md's
    first section, the image family's defaults (a command of several flags, such as the IMPALA
    paper's settings, states no default)."""
    section = text.split("## The defaults", 1)[1].split("\n## ", 1)[0]
    settings = re.findall(r"`--(\w+)=([^`\s]+)`", section)
    return [(name, parse_value(value)) for name, value in settings]


def mismatches(stated):
    """The (flag, stated, Config's) triples where a stated default is not Config's."""
    wrong = []
    for name, value in stated:
        actual = DEFAULTS[name]
        same = value == pytest.approx(actual) if isinstance(value, float) else value == actual
        if not same:
            wrong.append((name, value, actual))
    return wrong


def test_the_parser_reads_every_way_the_docs_write_a_default():
    assert [parse_value(v) for v in ("10M", "500K", "2.5e-4", "64", "`/tmp/impala`")] == [
        10_000_000,
        500_000,
        2.5e-4,
        64,
        "/tmp/impala",
    ]
    table = "## The flags that matter\n| `--a`, `--b` | 64, 2 | x |\n| `--c` | `d` | y |\n## Next"
    assert readme_table_defaults(table) == [("a", 64), ("b", 2), ("c", "d")]


def test_a_stale_default_is_found():
    assert mismatches([("replay_ratio", 1.0), ("batch_size", 2.0)]) == [
        ("replay_ratio", 1.0, DEFAULTS["replay_ratio"])
    ]


def test_the_readmes_table_of_flags_states_configs_defaults():
    stated = readme_table_defaults((REPO / "README.md").read_text())
    assert len(stated) >= 10  # The table was found and read whole.
    assert mismatches(stated) == []


def test_the_configuration_docs_defaults_section_states_configs_defaults():
    stated = configuration_defaults((REPO / "docs" / "configuration.md").read_text())
    assert len(stated) >= 10
    assert mismatches(stated) == []
