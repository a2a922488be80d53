"""Bad flags are refused before TensorFlow is imported: one line naming the flag, and the exit
status of bad input (exit_codes.EXIT_BAD_INPUT), the same as every other error of bad input.
Whether TF was imported is read from `python -X importtime`."""

import subprocess
import sys

import pytest

from exit_codes import EXIT_BAD_INPUT
from tools.local_cluster import EXPERIMENT, REPO


def run_experiment(*flags):
    """(exit status, stderr, the modules imported) of experiment.py with `flags`."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", EXPERIMENT, *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    imported = {
        line.rpartition("|")[2].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    return result.returncode, result.stderr, imported


def imports_tensorflow(modules):
    return any(name.partition(".")[0] == "tensorflow" for name in modules)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--batch_size=0"], "error: flag --batch_size=0: 0 is not a positive integer"),
        (["--learning_rate=-1"], "error: flag --learning_rate=-1.0: -1.0 is not greater than 0"),
        (
            ["--max_failed_checkpoints=0"],
            "error: flag --max_failed_checkpoints=0: 0 is not a positive integer",
        ),
        (["--job_name=boss"], "error: flag --job_name=boss: value should be one of"),
        (
            ["--popart", "--value_loss_divisor=std"],
            "error: flags popart=True, value_loss_divisor=std: --popart divides the value term "
            "by its targets' variance",
        ),
        (["--no_such_flag=1"], "error: Unknown command line flag 'no_such_flag'"),
        (["--batch_size", "8", "16"], "error: unexpected arguments ['16']"),
        (
            ["--job_name=actor", "--task=3", "--actor_hosts=127.0.0.1:1"],
            "experiment.py (actor 3): error: --task=3: no such actor in --actor_hosts (1 given)",
        ),
    ],
)
def test_a_bad_flag_is_refused_before_tensorflow_is_imported(flags, message):
    status, stderr, imported = run_experiment(*flags)
    assert status == EXIT_BAD_INPUT, stderr[-3000:]
    assert message in stderr
    assert not imports_tensorflow(imported), "tensorflow imported before the flags were checked"


def test_good_flags_go_on_to_import_tensorflow(tmp_path):
    """The check above can see TF's import: with good flags, --mode=test imports it before it
    finds no checkpoint."""
    status, stderr, imported = run_experiment(
        "--mode=test", "--level_name=CartPole-v1", f"--logdir={tmp_path}"
    )
    assert status == EXIT_BAD_INPUT, stderr[-3000:]
    assert f"experiment.py (--mode=test): error: no checkpoint in {tmp_path / 'checkpoints'}" in (
        stderr
    )
    assert imports_tensorflow(imported)
