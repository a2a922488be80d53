"""--follow: the frontend supervises its run (supervisor.py) until training ends.

The tests run the frontend with --follow in the background and break its run on purpose: SIGKILL
to a worker, or a fake worker (tests/fake_worker.py) told to exit (tell_exit) when the test
wants. Those at the bottom run the real experiment.py.
"""

import json
import os
import re
import signal

import psutil
import pytest

from tests import frontend_runs
from tools.local_cluster import free_ports

pytestmark = pytest.mark.slow


# With fake workers.


def test_follow_gives_up_on_an_actor_that_keeps_crashing(tmp_path, follows, tmux_socket):
    """A worker's restart budget spent: the run is torn down, the error says who and why."""
    path, ports = frontend_runs.local_csv(tmp_path)
    logdir = tmp_path / "logdir"
    flags = [f"--workers_csv_path={path}", *frontend_runs.supervision_flags(max_restarts=2)]
    following = frontend_runs.follow_fake_run(follows, tmp_path, logdir, *flags)
    run_id = following.run_id()
    frontend_runs.wait_until(
        lambda: "actor said hello" in frontend_runs.log_text(logdir, "actor-0-1"), 30, "actor-0-1"
    )
    frontend_runs.tell_exit(
        tmp_path / "repo", f"localhost:{ports[4]}", 1
    )  # From now on, always exits 1.

    assert following.wait(120) == 1
    out, err = following.out(), following.err()
    lines = frontend_runs.restart_lines(out)
    assert len(lines) == 2, out
    for line, (n, delay) in zip(lines, [(1, 0.5), (2, 1)], strict=True):
        assert re.search(
            rf"\] actor-0-1 \(this host\) exited with status 1: restarting it in {delay:g} s "
            rf"\(restart {n}; {n} of at most 2 within 600 s\)$",
            line,
        ), line
    log = logdir / "launch" / "actor-0-1.log"
    assert (
        "ERROR: actor-0-1 (this host) exited with status 1, after 2 restarts within 600 s "
        f"(--max_restarts=2, --restart_window_secs=600): giving up. The end of its log {log}:"
        in err
    ), err
    # The end of its log: the reason it exited, three times (first run and two restarts).
    assert err.count(f"fake worker: exit-localhost:{ports[4]} says exit 1") == 3, err
    assert "Stopping the whole run." in err
    assert f"Killed tmux session '{frontend_runs.SESSION}'" in out
    frontend_runs.check_stopped(logdir, run_id, tmux_socket)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_follow_sigterm_or_sighup_stops_the_whole_run(tmp_path, follows, tmux_socket, signum):
    """A batch scheduler's SIGTERM, a closed terminal's SIGHUP: no worker of the run is left."""
    path, _ = frontend_runs.local_csv(tmp_path)
    logdir = tmp_path / "logdir"
    following = frontend_runs.follow_fake_run(
        follows, tmp_path, logdir, f"--workers_csv_path={path}"
    )
    run_id = following.run_id()
    frontend_runs.wait_until(
        lambda: len(frontend_runs.run_processes(run_id)) == 12, 30, "every worker of the run"
    )
    following.popen.send_signal(signum)

    assert following.wait(60) == 128 + signum
    assert f"{signal.Signals(signum).name} received: stopping the whole run." in following.err()
    assert f"Killed tmux session '{frontend_runs.SESSION}'" in following.out()
    assert frontend_runs.restart_lines(following.out()) == []
    frontend_runs.check_stopped(logdir, run_id, tmux_socket)


def test_follow_does_not_fight_stop_and_ctrl_c_leaves_the_run_going(
    tmp_path, follows, runs, tmux_socket
):
    path, _ = frontend_runs.local_csv(tmp_path)
    flags = [f"--workers_csv_path={path}", *frontend_runs.fake_run_flags(tmp_path, 120_000)]
    # --stop from another terminal: a normal end; the follower says so, restarts nothing.
    logdir = tmp_path / "logdir"
    following = follows(logdir, *flags)
    following.wait_for("^Following ", 60)
    run_id = following.run_id()
    code, out, err = frontend_runs.frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert following.wait(60) == 0
    assert "The run was stopped with --stop: nothing left to follow." in following.out()
    assert following.err() == ""
    assert frontend_runs.restart_lines(following.out()) == []
    frontend_runs.check_stopped(logdir, run_id, tmux_socket)

    # Ctrl-C: stops following only; the run goes on.
    logdir = tmp_path / "logdir2"
    following = follows(logdir, *flags)
    following.wait_for("^Following ", 60)
    run_id = following.run_id()
    following.popen.send_signal(signal.SIGINT)
    assert following.wait(60) == 0
    assert "Stopped following; the run goes on, unsupervised" in following.out()
    assert len(frontend_runs.run_processes(run_id)) == 12
    assert (logdir / "launch" / "run_state.json").exists()
    code, out, err = frontend_runs.frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    frontend_runs.check_stopped(logdir, run_id, tmux_socket)


def test_follow_restarts_a_killed_remote_actor_over_ssh(tmp_path, hosts, follows, tmux_socket):
    key = ("root", "", hosts.user_key)
    path, ports = frontend_runs.remote_csv(tmp_path / "w.csv", hosts, key)
    logdir = tmp_path / "logdir"
    host = hosts.hosts[0]
    following = frontend_runs.follow_fake_run(
        follows,
        tmp_path,
        logdir,
        f"--workers_csv_path={path}",
        f"--known_hosts={hosts.write_known_hosts(tmp_path / 'known_hosts')}",
        *frontend_runs.supervision_flags(),
    )
    run_id = following.run_id()
    frontend_runs.wait_until(
        lambda: frontend_runs.log_text(logdir, "learner-0").count("learner got") == 1, 30, "a hello"
    )
    state_path = logdir / "launch" / "run_state.json"
    (entry,) = json.loads(state_path.read_text())["remote"]
    os.kill(entry["pid"], signal.SIGKILL)

    following.wait_for(
        rf"\] actor-0-0 \(root@{re.escape(host.ip)} ssh port {host.ssh_port}\) was killed by "
        r"signal 9 \(SIGKILL\): restarting it in 0.5 s \(restart 1; 1 of at most 5 within "
        r"600 s\)$",
        60,
    )
    # Started again over SSH, in its namespace, its new PID recorded; it says hello again.
    frontend_runs.wait_until(
        lambda: frontend_runs.log_text(logdir, "learner-0").count("learner got") == 2,
        60,
        "2 hellos",
    )
    (restarted,) = json.loads(state_path.read_text())["remote"]
    assert restarted["pid"] != entry["pid"]
    frontend_runs.assert_remote_actor_of_run(restarted["pid"], run_id, host)

    # The learner finishes (exit 0): the frontend stops the actor and exits 0.
    frontend_runs.tell_exit(tmp_path / "repo", f"{host.host_ip}:{ports[0]}", 0)
    assert following.wait(60) == 0, following.out() + following.err()
    out = following.out()
    assert len(frontend_runs.restart_lines(out)) == 1
    assert "The learners exited with status 0: stopping what is left of the run." in out
    assert f"actor-0-0 (PID {restarted['pid']} on root@{host.ip}): stopped." in out
    frontend_runs.check_stopped(logdir, run_id, tmux_socket)


# Supervision end to end, with the real experiment.py.

# The vector family's batches: tiny ones train CartPole several times slower per frame.
SUPERVISED_CARTPOLE = [
    "--level_name=CartPole-v1",
    "--total_environment_frames=20000",
    "--log_secs=1",
    "--batch_timeout_secs=300",
    "--learner_wait_secs=300",
    "--startup_check_secs=2",
    *frontend_runs.supervision_flags(backoff=1),
]
PROGRESS = re.compile(r"\] frames (\d+) \(")


def test_follow_restarts_a_killed_actor_and_training_completes(tmp_path, follows, tmux_socket):
    """One learner, one actor: the learner trains on only after the restarted actor is back."""
    ports = free_ports(2)
    path = frontend_runs.write_csv(
        tmp_path / "w.csv", [("learner", "localhost", ports[0]), ("actor", "localhost", ports[1])]
    )
    logdir = tmp_path / "logdir"
    following = follows(logdir, f"--workers_csv_path={path}", *SUPERVISED_CARTPOLE)
    following.wait_for("^Following ", 120)
    run_id = following.run_id()
    frontend_runs.wait_until(
        lambda: PROGRESS.search(frontend_runs.log_text(logdir, "learner-0")), 300, "training"
    )
    actor = psutil.Process(
        frontend_runs.pane_pid(tmux_socket, "actor-0-0")
    )  # The script exec'd the actor.
    assert "--job_name=actor" in actor.cmdline()
    assert "stopped at" not in frontend_runs.log_text(logdir, "learner-0")  # Mid-run.
    actor.kill()

    following.wait_for(
        r"\] actor-0-0 \(this host\) was killed by signal 9 \(SIGKILL\): restarting it in 1 s "
        r"\(restart 1; 1 of at most 5 within 600 s\)$",
        60,
    )
    assert following.wait(600) == 0, following.out()[-5000:] + following.err()
    out = following.out()
    assert len(frontend_runs.restart_lines(out)) == 1
    # The restarted actor connected and fed the learner (it has no other) up to the frame budget.
    assert frontend_runs.log_text(logdir, "actor-0-0").count("connected to learner") == 2
    assert re.search(
        r"stopped at \d+ environment frames \(frame budget reached\)",
        frontend_runs.log_text(logdir, "learner-0"),
    )
    assert "The learners exited with status 0: stopping what is left of the run." in out
    frontend_runs.check_stopped(logdir, run_id, tmux_socket)


def test_follow_restarts_the_learners_from_their_checkpoint(tmp_path, follows, tmux_socket):
    """A learner rank killed: mpirun ends, is restarted, rank 0 restores the last checkpoint."""
    ports = free_ports(4)
    rows = [("learner", "localhost", ports[0]), ("learner", "127.0.0.1", ports[1])]
    rows += [("actor", "localhost", port) for port in ports[2:]]
    path = frontend_runs.write_csv(tmp_path / "w.csv", rows)
    logdir = tmp_path / "logdir"
    following = follows(
        logdir, f"--workers_csv_path={path}", "--checkpoint_secs=1", *SUPERVISED_CARTPOLE
    )
    following.wait_for("^Following ", 120)
    run_id = following.run_id()

    def trained_since_a_checkpoint():
        log = frontend_runs.log_text(logdir, "learner-0")
        return "saved checkpoint" in log and PROGRESS.search(log[log.index("saved checkpoint") :])

    frontend_runs.wait_until(trained_since_a_checkpoint, 300, "a checkpoint and training after it")
    (rank1,) = [
        p
        for p in frontend_runs.run_processes(run_id)
        if "--job_name=learner" in p.cmdline() and p.environ().get("OMPI_COMM_WORLD_RANK") == "1"
    ]
    assert "stopped at" not in frontend_runs.log_text(logdir, "learner-0")  # Mid-run.
    rank1.kill()

    following.wait_for(
        # mpirun names the rank that failed first: usually rank 1, killed by signal 9.
        r"\] learners \(mpirun on this host; ranks on this host\) exited with status [1-9]\d*"
        r"( \(process rank \d .*\))?: restarting it in 1 s \(restart 1; 1 of at most 5 within "
        r"600 s\)$",
        120,
    )
    assert following.wait(900) == 0, following.out()[-5000:] + following.err()
    assert len(frontend_runs.restart_lines(following.out())) == 1

    # Rank 0's log: its first run, then the restarted one, which begins by restoring.
    log = frontend_runs.log_text(logdir, "learner-0")
    assert log.count("restored checkpoint") == 1, log[-5000:]
    restart = log.index("restored checkpoint")
    before, after = log[:restart], log[restart:]
    assert "training from 0 to 20000 environment frames" in before
    # It restored the newest checkpoint saved before the kill (or one it was saving then) ...
    saved = [int(n) for n in re.findall(r"saved checkpoint \S+/ckpt-(\d+)", before)]
    restored = int(re.match(r"restored checkpoint \S+/ckpt-(\d+)", after).group(1))
    assert restored in (saved[-1], saved[-1] + 1), (restored, saved)
    # ... and training resumed from its frame count: at least what was logged before that
    # checkpoint, at most what was logged after it; then went on to the frame budget.
    (resumed,) = map(int, re.findall(r"training from (\d+) to 20000 environment frames", after))
    last_save = before.rindex("saved checkpoint")
    logged_before = [int(f) for f in PROGRESS.findall(before[:last_save])]
    logged_after = [int(f) for f in PROGRESS.findall(before[last_save:])]
    assert resumed > 0 and all(frames <= resumed for frames in logged_before), logged_before
    if logged_after and restored == saved[-1]:
        assert resumed <= logged_after[0], (resumed, logged_after)
    assert re.search(r"stopped at \d+ environment frames \(frame budget reached\)", after)
    assert (
        frontend_runs.log_text(logdir, "learner-1").count(f"training from {resumed} to 20000") == 1
    )
    frontend_runs.check_stopped(logdir, run_id, tmux_socket)


def test_follow_restarts_an_actor_that_gave_up_on_its_killed_learner(
    tmp_path, follows, tmux_socket
):
    """The learner killed and away longer than its actor waits for it (--learner_wait_secs):
    the actor gives up and exits, the supervisor restarts both, and the restarted actor feeds
    the restarted learner to the end of training."""
    ports = free_ports(2)
    path = frontend_runs.write_csv(
        tmp_path / "w.csv", [("learner", "localhost", ports[0]), ("actor", "localhost", ports[1])]
    )
    logdir = tmp_path / "logdir"
    # The learners come back --restart_backoff_secs after they died, long after the actor gave
    # up; a restarted learner waits for its first batch as long as for any (300 s).
    following = follows(
        logdir,
        f"--workers_csv_path={path}",
        *SUPERVISED_CARTPOLE,
        "--learner_wait_secs=5",
        *frontend_runs.supervision_flags(backoff=30),
    )
    following.wait_for("^Following ", 120)
    run_id = following.run_id()
    frontend_runs.wait_until(
        lambda: PROGRESS.search(frontend_runs.log_text(logdir, "learner-0")), 300, "training"
    )
    (learner,) = [
        p for p in frontend_runs.run_processes(run_id) if "--job_name=learner" in p.cmdline()
    ]
    learner.kill()

    following.wait_for(
        r"\] actor-0-0 \(this host\) exited with status 7, gave up on its learner after "
        r"--learner_wait_secs: restarting it in 30 s \(restart 1; ",
        180,
    )
    assert following.wait(900) == 0, following.out()[-5000:] + following.err()
    actor_log = frontend_runs.log_text(logdir, "actor-0-0")
    # Gone (no server answering) or, if its call to the dead learner timed out first, still
    # (learner_link.StallWatch): either way after --learner_wait_secs, whole seconds under load.
    gave_up = re.search(
        r"not reachable/initialised after \d+ s \(--learner_wait_secs\)"
        r"|parameters stayed at version \S+ for \d+ s \(--learner_wait_secs=5\)",
        actor_log,
    )
    assert gave_up, actor_log[-3000:]
    assert "connected to learner" in actor_log[gave_up.end() :], actor_log[-3000:]
    learner_log = frontend_runs.log_text(logdir, "learner-0")
    assert learner_log.count("serving actors") == 2, learner_log[-3000:]
    assert re.search(r"stopped at \d+ environment frames \(frame budget reached\)", learner_log)
    frontend_runs.check_stopped(logdir, run_id, tmux_socket)
