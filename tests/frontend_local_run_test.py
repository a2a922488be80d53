"""The frontend's runs on this host: each actor in its tmux window, all learners in one mpirun;
--stop, or killing a window, leaves no process behind.

The runs use tests/fake_worker.py as experiment.py (tests/frontend_runs.py).
"""

import re

import libtmux
import psutil
import pytest

from frontend import launcher
from tests import frontend_runs

pytestmark = pytest.mark.slow


def test_local_run_wires_every_worker_set_and_stop_leaves_nothing(tmp_path, runs, tmux_socket):
    path, ports = frontend_runs.local_csv(tmp_path, cuda=("", "3", ""))
    logdir = tmp_path / "logdir"
    code, out, err = runs(
        logdir, f"--workers_csv_path={path}", *frontend_runs.fake_run_flags(tmp_path, 3000)
    )
    assert code == 0, out + err
    assert "Failed workers: 0" in out
    assert f"Watch: tmux -L {tmux_socket} attach -t {frontend_runs.SESSION}" in out
    run_id = frontend_runs.run_id_of(out)
    # 3 actors + 2 learners (python and its tee each), mpirun and its tee.
    assert len(frontend_runs.run_processes(run_id)) == 12

    frontend_runs.wait_until(
        lambda: frontend_runs.window_status(tmux_socket, "learners") is not None,
        30,
        "learners to end",
    )
    assert frontend_runs.window_status(tmux_socket, "learners") == 0
    for window in ("actor-0-0", "actor-0-1", "actor-1-0"):
        assert frontend_runs.window_status(tmux_socket, window) == 0
    # Actor k said hello to learner k % 2, whose TF address it was given.
    hellos = {
        name: sorted(re.findall(r"learner got: (.*)", frontend_runs.log_text(logdir, name)))
        for name in ("learner-0", "learner-1")
    }
    assert hellos == {
        "learner-0": [
            f"hello from actor 0 (localhost:{ports[2]})",
            f"hello from actor 1 (localhost:{ports[4]})",
        ],
        "learner-1": [f"hello from actor 0 (localhost:{ports[3]})"],
    }
    assert frontend_runs.worker_report(logdir, "actor-0-1")["env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert frontend_runs.worker_report(logdir, "actor-1-0")["env"]["CUDA_VISIBLE_DEVICES"] == "3"
    assert frontend_runs.worker_report(logdir, "actor-1-0")["cwd"] == str(tmp_path / "repo")
    assert [
        frontend_runs.worker_report(logdir, f"learner-{i}")["env"]["OMPI_COMM_WORLD_RANK"]
        for i in (0, 1)
    ] == ["0", "1"]
    assert "[1,1]<stdout>:learner got: hello from actor 0" in frontend_runs.log_text(
        logdir, "mpirun"
    )

    code, out, err = frontend_runs.frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert f"Killed tmux session '{frontend_runs.SESSION}'" in out
    assert frontend_runs.run_processes(run_id) == []
    assert not libtmux.Server(socket_name=tmux_socket).is_alive()
    assert not (logdir / "launch" / "run_state.json").exists()


def test_killing_a_window_or_the_run_kills_its_processes(tmp_path, runs, tmux_socket):
    path, _ = frontend_runs.local_csv(tmp_path)
    logdir = tmp_path / "logdir"
    code, out, err = runs(
        logdir, f"--workers_csv_path={path}", *frontend_runs.fake_run_flags(tmp_path, 60_000)
    )
    assert code == 0, out + err
    run_id = frontend_runs.run_id_of(out)
    frontend_runs.wait_until(
        lambda: "actor said hello" in frontend_runs.log_text(logdir, "actor-0-0"), 10, "actor-0-0"
    )
    actor = psutil.Process(frontend_runs.worker_report(logdir, "actor-0-0")["pid"])
    tee = actor.children()
    assert [p.name() for p in tee] == ["tee"]

    # Killing one window ends its worker (SIGHUP to the pane's process group), no orphans.
    server = launcher.tmux_server(tmux_socket)
    server.sessions.get(session_name=frontend_runs.SESSION).windows.get(
        window_name="actor-0-0"
    ).kill()
    _, alive = psutil.wait_procs([actor, *tee], timeout=5)
    assert alive == []

    # --stop ends the rest, mpirun's ranks included, without needing SIGKILL.
    ranks = [
        psutil.Process(frontend_runs.worker_report(logdir, f"learner-{i}")["pid"]) for i in (0, 1)
    ]
    assert all(rank.is_running() for rank in ranks)
    code, out, err = frontend_runs.frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert re.search(r"Killed tmux session 'impala': \d+ processes ended\.$", out, re.M), out
    assert frontend_runs.run_processes(run_id) == []


def test_failed_actor_is_reported_and_stops_the_run_unless_tolerated(tmp_path, runs):
    path, ports = frontend_runs.local_csv(tmp_path)
    logdir = tmp_path / "logdir"
    flags = [f"--workers_csv_path={path}", *frontend_runs.fake_run_flags(tmp_path, 60_000)]
    frontend_runs.tell_exit(tmp_path / "repo", f"localhost:{ports[3]}", 3)  # Row 4 exits 3 at once.
    code, out, err = runs(logdir, *flags)
    assert code == 1, out + err
    assert "Failed workers: 1" in out
    assert (
        f"  actor-1-0 (row 4, this host, tf localhost:{ports[3]}): exited with status 3 within "
        "1.0 s;" in out
    ), out
    assert f"fake worker: exit-localhost:{ports[3]} says exit 3" in out  # Its log's end: why.
    assert "stopping everything it started" in out
    assert frontend_runs.run_processes(frontend_runs.run_id_of(out)) == []
    assert not (logdir / "launch" / "run_state.json").exists()

    code, out, err = runs(logdir, *flags, "--tolerate_actor_failures")
    assert code == 0, out + err
    assert "Failed workers: 1" in out
    assert "WARNING: learner 1 has no running actor" in out
    assert (
        len(frontend_runs.run_processes(frontend_runs.run_id_of(out))) == 10
    )  # All but the failed actor.
