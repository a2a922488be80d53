"""End to end with the real experiment.py: the frontend's runs train CartPole to their frame
budget with local or remote actors, and --follow prints the learners' progress until the end.
"""

import json
import re

import psutil
import pytest

from tests import frontend_runs

pytestmark = pytest.mark.slow


def test_local_end_to_end_training(tmp_path, runs, tmux_socket):
    path, _ = frontend_runs.local_csv(tmp_path)
    logdir = tmp_path / "logdir"
    code, out, err = runs(logdir, f"--workers_csv_path={path}", *frontend_runs.CARTPOLE)
    assert code == 0, out + err
    run_id = frontend_runs.run_id_of(out)
    frontend_runs.check_trained(logdir, tmux_socket, ["actor-0-0", "actor-0-1", "actor-1-0"])
    for name in ("learner-0", "learner-1"):
        assert frontend_runs.log_text(logdir, name)
    code, out, err = frontend_runs.frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert frontend_runs.run_processes(run_id) == []


def test_remote_end_to_end_training(tmp_path, hosts, runs, tmux_socket):
    key = ("root", "", hosts.user_key)
    path, _ = frontend_runs.remote_csv(tmp_path / "w.csv", hosts, key, key)
    logdir = tmp_path / "logdir"
    known_hosts = hosts.write_known_hosts(tmp_path / "known_hosts")
    flags = [f"--workers_csv_path={path}", f"--known_hosts={known_hosts}"]
    code, out, err = runs(logdir, *flags, *frontend_runs.CARTPOLE)
    assert code == 0, out + err
    run_id = frontend_runs.run_id_of(out)
    frontend_runs.check_trained(logdir, tmux_socket, [])
    state = json.loads((logdir / "launch" / "run_state.json").read_text())
    pids = [entry["pid"] for entry in state["remote"]]
    frontend_runs.wait_until(
        lambda: not any(map(psutil.pid_exists, pids)), 120, "remote actors to finish"
    )
    for name in ("actor-0-0", "actor-0-1"):
        assert "learner finished training; exiting" in frontend_runs.log_text(logdir, name)
    code, out, err = frontend_runs.frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert out.count(": not running.") == 2
    assert frontend_runs.run_processes(run_id) == []


def test_follow_prints_learner_progress_and_cleans_up_after_training(tmp_path, runs):
    """The README's main command: --follow shows the learners' progress until training ends."""
    path, _ = frontend_runs.local_csv(tmp_path)
    logdir = tmp_path / "logdir"
    code, out, err = runs(
        logdir, f"--workers_csv_path={path}", "--follow", *frontend_runs.CARTPOLE, timeout=600
    )
    assert code == 0, out + err
    # One progress line per interval with the global figures (rank 0), not one per rank.
    assert re.search(r"\] frames \d+ \(.*\| return", out) and "[learner rank 1/2] frames" not in out
    for rank in (0, 1):
        assert f"[learner rank {rank}/2] stopped at" in out
    assert "The learners exited with status 0: stopping what is left of the run." in out
    assert not (logdir / "launch" / "run_state.json").exists()
    assert frontend_runs.run_processes(frontend_runs.run_id_of(out)) == []
