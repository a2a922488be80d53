"""bench.system_ab's configuration B: A's flags with --b on top, a bad --b refused before any
worker starts. In subprocesses, as users run it: the bench modules define flags of one name
(--actors, --rounds) that one pytest process could not import side by side."""

import subprocess
import sys

import pytest

from tools import local_cluster


def run_python(*args):
    return subprocess.run(
        [sys.executable, *args],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "setting, message",
    [
        ("learner_speed=2", "--b=learner_speed=2: not NAME=VALUE of a training flag"),
        ("intra_op_threads", "--b=intra_op_threads: not NAME=VALUE of a training flag"),
        ("batch_size=-1", "--b=batch_size=-1: flag --batch_size=-1: -1 is not a positive"),
    ],
)
def test_a_bad_b_setting_is_named_before_any_worker_starts(setting, message):
    result = run_python("-m", "bench.system_ab", f"--b={setting}", "--load_wait_secs=0")
    assert result.returncode != 0
    assert message in result.stderr
    assert "load before" not in result.stdout  # refused before the machine was even looked at


def test_configuration_b_is_a_with_the_b_settings_on_top():
    script = (
        "from absl import flags\n"
        "import config\n"
        "from bench import system_ab\n"
        "flags.FLAGS(['x'])\n"
        "a = config.configure({'level_name': 'CartPole-v1', 'batch_size': 4})\n"
        "b = system_ab.b_config(config.flag_args(a), ['intra_op_threads=2', 'batch_size=8'])\n"
        "print(b.level_name, b.batch_size, b.intra_op_threads, b.agent_name == a.agent_name)\n"
    )
    result = run_python("-c", script)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["CartPole-v1", "8", "2", "True"]
