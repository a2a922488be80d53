"""The frontend's remote workers: actors started over SSH in network namespaces with sshd
(tests/netns_sshd.py), their learner on this host; host keys checked, each host's credential
used alone, and no password ever shown or written.

The runs use tests/fake_worker.py as experiment.py (tests/frontend_runs.py).
"""

import json
import os
import re
import uuid

import psutil
import pytest

from tests import frontend_runs

pytestmark = pytest.mark.slow


def test_unknown_host_key_is_rejected_by_default(tmp_path, hosts, runs):
    path, ports = frontend_runs.remote_csv(tmp_path / "w.csv", hosts, ("root", "", hosts.user_key))
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    host = hosts.hosts[0]
    code, out, err = runs(
        tmp_path / "logdir",
        f"--workers_csv_path={path}",
        f"--known_hosts={known_hosts}",
        *frontend_runs.fake_run_flags(tmp_path, 60_000),
    )
    assert code == 1, out + err
    assert (
        f"  actor-0-0 (row 2, root@{host.ip} ssh port {host.ssh_port}, auth: key "
        f"{hosts.user_key}, tf port {ports[1]}): its host key (ssh-ed25519 SHA256:" in out
    )
    assert f"is not in /etc/ssh/ssh_known_hosts or {known_hosts}" in out
    assert "--accept_unknown_host_keys" in out
    assert frontend_runs.run_processes(frontend_runs.run_id_of(out)) == []


def test_remote_actors_reach_their_learner_and_stop_kills_them(tmp_path, hosts, runs):
    key = ("root", "", hosts.user_key)
    path, ports = frontend_runs.remote_csv(tmp_path / "w.csv", hosts, key, key)
    logdir = tmp_path / "logdir"
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    code, out, err = runs(
        logdir,
        f"--workers_csv_path={path}",
        f"--known_hosts={known_hosts}",
        "--accept_unknown_host_keys",
        *frontend_runs.fake_run_flags(tmp_path, 60_000),
    )
    assert code == 0, out + err
    for host in hosts.hosts:
        assert f"WARNING: accepting the unknown host key of [{host.ip}]:{host.ssh_port}" in err
    run_id = frontend_runs.run_id_of(out)
    state = json.loads((logdir / "launch" / "run_state.json").read_text())
    assert [entry["name"] for entry in state["remote"]] == ["actor-0-0", "actor-0-1"]
    for entry, host in zip(state["remote"], hosts.hosts, strict=True):
        frontend_runs.assert_remote_actor_of_run(entry["pid"], run_id, host)
    frontend_runs.wait_until(
        lambda: frontend_runs.log_text(logdir, "learner-0").count("learner got") == 2,
        15,
        "2 hellos",
    )
    assert sorted(
        re.findall(r"learner got: (.*)", frontend_runs.log_text(logdir, "learner-0"))
    ) == [
        f"hello from actor {i} ({host.ip}:{port})"
        for i, (host, port) in enumerate(zip(hosts.hosts, ports[1:], strict=True))
    ]

    # --stop reads the CSV and --known_hosts the run recorded; flags given now still apply.
    code, out, err = frontend_runs.frontend(
        f"--logdir={logdir}", "--stop", "--accept_unknown_host_keys"
    )
    assert code == 0, out + err
    for entry, host in zip(state["remote"], hosts.hosts, strict=True):
        assert f"{entry['name']} (PID {entry['pid']} on root@{host.ip}): stopped." in out
    assert frontend_runs.run_processes(run_id) == []


def test_wrong_key_or_password_fails_per_host(tmp_path, hosts, runs):
    wrong_password = "wrong-" + uuid.uuid4().hex
    path, ports = frontend_runs.remote_csv(
        tmp_path / "w.csv", hosts, ("root", "", hosts.wrong_key), (hosts.user, wrong_password, "")
    )
    (h0, h1) = hosts.hosts
    code, out, err = runs(
        tmp_path / "logdir",
        f"--workers_csv_path={path}",
        f"--known_hosts={hosts.write_known_hosts(tmp_path / 'known_hosts')}",
        *frontend_runs.fake_run_flags(tmp_path, 60_000),
    )
    assert code == 1, out + err
    assert "Failed workers: 2" in out
    assert (
        f"  actor-0-0 (row 2, root@{h0.ip} ssh port {h0.ssh_port}, auth: key {hosts.wrong_key}, "
        f"tf port {ports[1]}): authentication failed" in out
    )
    assert (
        f"  actor-0-1 (row 3, {hosts.user}@{h1.ip} ssh port {h1.ssh_port}, auth: password from "
        f"the CSV, tf port {ports[2]}): authentication failed" in out
    )
    assert wrong_password not in out + err
    assert "WARNING" not in err  # The known_hosts file had both keys.
    assert frontend_runs.run_processes(frontend_runs.run_id_of(out)) == []


def test_password_never_appears_in_output_or_logs(open_dir, hosts, runs):
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("the throwaway user needs /usr/bin/python3 (this venv's python is root's)")
    logdir = open_dir / "logdir"
    (logdir / "launch").mkdir(parents=True)
    (logdir / "launch").chmod(0o777)  # The user's actors write their scripts and logs there.
    path, _ = frontend_runs.remote_csv(
        open_dir / "w.csv",
        hosts,
        (hosts.user, hosts.password, ""),
        (hosts.user, "env:IMPT_SSH_PASSWORD", ""),
    )
    flags = [
        f"--workers_csv_path={path}",
        f"--known_hosts={hosts.write_known_hosts(open_dir / 'known_hosts')}",
        "--remote_python=/usr/bin/python3",
        *frontend_runs.fake_run_flags(open_dir, 60_000),
    ]
    env = {"IMPT_SSH_PASSWORD": hosts.password}
    outputs = [runs(logdir, *flags, "--dry_run", env=env)]
    outputs.append(runs(logdir, *flags, env=env))
    code, out, err = outputs[-1]
    assert code == 0, f"stdout:\n{out[-4000:]}\nstderr:\n{err[-4000:]}"  # not repr-truncated
    state = json.loads((logdir / "launch" / "run_state.json").read_text())
    assert {psutil.Process(e["pid"]).username() for e in state["remote"]} == {hosts.user}
    frontend_runs.wait_until(
        lambda: frontend_runs.log_text(logdir, "learner-0").count("learner got") == 2,
        15,
        "2 hellos",
    )
    outputs.append(frontend_runs.frontend(f"--logdir={logdir}", "--stop", env=env))
    assert outputs[-1][0] == 0, outputs[-1]
    assert outputs[-1][1].count(": stopped.") == 2
    # The user's login shell is dash. Their exit statuses written before --stop returned:
    # nothing of the run runs or writes after it.
    assert frontend_runs.run_processes(state["run_id"]) == []
    assert len(list((logdir / "launch").glob("*.status"))) == 2
    assert list((logdir / "launch").glob("*.status.tmp")) == []

    for _, out, err in outputs:
        assert hosts.password not in out + err
    files = [p for p in logdir.rglob("*") if p.is_file()]
    assert len(files) >= 8  # Scripts and logs of 2 actors, 1 learner, mpirun.
    for file in files:
        assert hosts.password.encode() not in file.read_bytes(), file
