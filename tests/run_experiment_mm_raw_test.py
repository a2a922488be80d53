"""The frontend as users run it: a subprocess reading a CSV, starting real tmux/SSH/mpirun workers.

Most runs use tests/fake_worker.py as experiment.py (no TensorFlow: seconds, not minutes): its
learner prints each actor's hello, which shows the worker sets were wired as planned. The
end-to-end tests at the bottom run the real experiment.py. Remote hosts are network namespaces
with sshd (tests/netns_sshd.py). Processes of a run are found by the IMPALA_RUN_ID its launch
scripts export; every run is stopped, and anything left of it killed by PID, at teardown.

The supervision tests run the frontend with --follow in the background and break its run on
purpose: SIGKILL to a worker, or a fake worker told to exit (tell_exit) when the test wants.
"""

import contextlib
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import libtmux
import psutil
import pytest

import config
import launcher
from local_cluster import free_ports
from tests import netns_sshd

REPO = pathlib.Path(__file__).resolve().parent.parent
FRONTEND = str(REPO / "run_experiment_mm_raw.py")
HEADER = "job,ip,tf_port,cuda_visible_devices,ssh_port,ssh_username,ssh_password,ssh_key_path"
SESSION = "impala"  # The frontend's default --tmux_sess; each test has its own tmux server.


def frontend(*args, env=None, timeout=120):
    """Runs the frontend to its end (bounded); returns (exit code, stdout, stderr)."""
    result = subprocess.run(
        [sys.executable, FRONTEND, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=dict(os.environ, **(env or {})),
    )
    return result.returncode, result.stdout, result.stderr


def write_csv(path, rows):
    """rows: (job, ip, tf_port[, cuda, ssh_port, user, password, key]) tuples."""
    lines = [HEADER] + [",".join(map(str, (*row, *[""] * (8 - len(row))))) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def fake_repo(directory):
    """A --repo_dir whose experiment.py is the fake worker, readable by every user."""
    directory.mkdir(mode=0o755)
    shutil.copy(pathlib.Path(__file__).with_name("fake_worker.py"), directory / "experiment.py")
    return str(directory)


def tell_exit(repo, address, status):
    """Makes the fake worker at `address` (host:port) exit with `status`, now or at its start."""
    path = pathlib.Path(repo, f"exit-{address}")
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(str(status))
    temporary.rename(path)  # Never read half-written.


def run_id_of(out):
    """The run id the frontend printed first; its launch scripts export it as IMPALA_RUN_ID."""
    return re.match(r"Run (\S+): ", out).group(1)


def run_processes(run_id):
    """Every process on this machine (namespaces included) started for the run `run_id`."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get(launcher.RUN_ID_VARIABLE) == run_id:
                found.append(process)
    return found


def wait_until(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout} s for {what}")
        time.sleep(0.2)


def window_status(socket_name, window):
    return launcher.window_exit_status(launcher.tmux_server(socket_name), SESSION, window)


def assert_remote_actor_of_run(pid, run_id, host):
    """The recorded PID is the actor itself, leading its own process group, in its namespace."""
    actor = psutil.Process(pid)
    assert "--job_name=actor" in actor.cmdline()
    assert os.getpgid(actor.pid) == actor.pid
    assert actor.environ()[launcher.RUN_ID_VARIABLE] == run_id
    assert (
        os.stat(f"/proc/{actor.pid}/ns/net").st_ino
        == os.stat(f"/run/netns/{host.namespace}").st_ino
    )


def log_text(logdir, name):
    path = pathlib.Path(logdir, "launch", f"{name}.log")
    return path.read_text(errors="replace") if path.exists() else ""


def worker_report(logdir, name):
    """The JSON line the fake worker printed first: argv, cwd, pid, env."""
    return json.loads(log_text(logdir, name).splitlines()[0])


@pytest.fixture
def runs(tmux_socket):
    """run(logdir, *args): the frontend on a private tmux server; each run undone at teardown."""
    started = []  # (logdir, run id)

    def run(logdir, *args, env=None, timeout=120):
        code, out, err = frontend(
            f"--logdir={logdir}",
            f"--tmux_socket_name={tmux_socket}",
            *args,
            env=env,
            timeout=timeout,
        )
        if out.startswith("Run "):
            started.append((logdir, run_id_of(out)))
        return code, out, err

    yield run
    for logdir, run_id in started:
        undo_run(logdir, run_id)


def undo_run(logdir, run_id):
    """Stops the run if it is still recorded, then kills anything left of it."""
    if pathlib.Path(logdir, "launch", "run_state.json").exists():
        frontend(f"--logdir={logdir}", "--stop", "--stop_timeout_secs=2", timeout=60)
    leftovers = run_processes(run_id)
    for process in leftovers:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(leftovers, timeout=10)


def local_csv(tmp_path, cuda=("", "", "")):
    """The example's learners and actors (2 learners, 3 actors on this host) on free ports."""
    ports = free_ports(5)
    rows = [("learner", "localhost", ports[0]), ("learner", "127.0.0.1", ports[1])]
    rows += [
        ("actor", "localhost", port, device) for port, device in zip(ports[2:], cuda, strict=True)
    ]
    return write_csv(tmp_path / "workers.csv", rows), ports


def fake_run_flags(tmp_path, milliseconds):
    return [
        f"--repo_dir={fake_repo(tmp_path / 'repo')}",
        f"--total_environment_frames={milliseconds}",  # The fake worker's run time.
        "--startup_check_secs=1",
    ]


# Validation and dry run: nothing may start.


@pytest.mark.parametrize(
    "rows, expected",
    [
        ([("learner", "localhost", 1), ("worker", "localhost", 2)], "3: row 2, field 'job'"),
        ([("learner", "localhost", 1), ("actor", "127.0.0.1", 1)], "3: row 2, field 'tf_port'"),
        ([("learner", "localhost", 1)], "2: row 1, field 'job'"),  # A learner with no actor.
        (
            [("learner", "localhost", 1), ("actor", "203.0.113.9", 2, "", 22, "bob")],
            "3: row 2, field 'ssh_password'",
        ),
    ],
)
def test_invalid_csv_is_reported_and_starts_nothing(tmp_path, tmux_socket, rows, expected):
    path = write_csv(tmp_path / "workers.csv", rows)
    code, out, err = frontend(
        f"--workers_csv_path={path}", f"--logdir={tmp_path}", f"--tmux_socket_name={tmux_socket}"
    )
    assert code == 2
    assert f"{path}:{expected}" in err
    assert out == ""  # Not even a plan.
    assert not libtmux.Server(socket_name=tmux_socket).is_alive()
    assert not (tmp_path / "launch").exists()


def test_an_update_that_does_not_split_over_the_learners_starts_nothing(tmp_path, tmux_socket):
    path, _ = local_csv(tmp_path)  # 2 learners
    code, out, err = frontend(
        f"--workers_csv_path={path}",
        f"--logdir={tmp_path}",
        f"--tmux_socket_name={tmux_socket}",
        "--minibatch_unrolls=3",
    )
    assert code == 2
    assert f"{path}: --minibatch_unrolls=3 does not split evenly over 2 learners" in err
    assert out == ""
    assert not libtmux.Server(socket_name=tmux_socket).is_alive()
    assert not (tmp_path / "launch").exists()


def test_dry_run_prints_plan_and_every_command_with_secrets_masked(tmp_path, tmux_socket):
    host = os.uname().nodename  # This host, by a name its remote actors can reach.
    ports = free_ports(5)
    secret, env_secret = "CSV-pa55word-" + uuid.uuid4().hex, "ENV-pa55word-" + uuid.uuid4().hex
    path = write_csv(
        tmp_path / "workers.csv",
        [
            ("learner", host, ports[0], "0"),
            ("learner", host, ports[1], "1"),
            ("actor", "localhost", ports[2]),
            ("actor", "203.0.113.9", ports[3], "", 2222, "bob", secret),
            ("actor", "203.0.113.10", ports[4], "", 22, "eve", "env:IMPT_PASSWORD"),
        ],
    )
    code, out, err = frontend(
        f"--workers_csv_path={path}",
        f"--logdir={tmp_path}",
        f"--tmux_socket_name={tmux_socket}",
        "--remote_python=/opt/py/bin/python",
        "--remote_repo_dir=/srv/impala",
        "--level_name=CartPole-v1",
        "--total_environment_frames=1234",
        "--dry_run",
        "--verbose",
        env={"IMPT_PASSWORD": env_secret},
    )
    assert code == 0, err
    assert secret not in out + err and env_secret not in out + err
    launch_dir = tmp_path / "launch"
    # One line per worker, its files named in the launch dir; actor k joins learner k % 2.
    assert f"Plan (the files named are in {launch_dir} on each worker's host):" in out
    assert (
        f"  learner-0: learner of worker set 0, tf {host}:{ports[0]} (row 1); mpirun rank 0 on "
        "this host; addresses cluster-0.txt; script learner-0.sh; log learner-0.log\n" in out
    )
    assert (
        f"  actor-0-1: actor 1 of worker set 0, tf 203.0.113.10:{ports[4]} (row 5); over SSH as "
        "eve@203.0.113.10 ssh port 22 (auth: password from $IMPT_PASSWORD); script "
        "actor-0-1.sh; log actor-0-1.log\n" in out
    )
    assert f"  learner-1: learner of worker set 1, tf {host}:{ports[1]} (row 2); " in out
    assert (
        f"  actor-1-0: actor 0 of worker set 1, tf 203.0.113.9:{ports[3]} (row 4); over SSH as "
        "bob@203.0.113.9 ssh port 2222 (auth: password from the CSV); " in out
    )
    assert f"  learners: the learners' mpirun; tmux window {SESSION}:learners; " in out
    # --verbose: each worker's command under its line.
    commands = [line.strip() for line in out.splitlines() if line.startswith("    cd ")]
    assert len(commands) == 6  # 3 actors, 2 learners, 1 mpirun.
    set0, set1 = (f"--cluster_file={launch_dir}/cluster-{i}.txt" for i in (0, 1))
    expected = {
        "learner-0": f"cd {REPO} && CUDA_VISIBLE_DEVICES=0 {sys.executable} experiment.py "
        f"--job_name=learner --task=0 {set0}",
        "actor-0-0": f"cd {REPO} && CUDA_VISIBLE_DEVICES='' {sys.executable} experiment.py "
        f"--job_name=actor --task=0 {set0}",
        "actor-0-1": "cd /srv/impala && CUDA_VISIBLE_DEVICES='' /opt/py/bin/python experiment.py "
        f"--job_name=actor --task=1 {set0}",
        "learner-1": f"cd {REPO} && CUDA_VISIBLE_DEVICES=1 {sys.executable} experiment.py "
        f"--job_name=learner --task=0 {set1}",
        "actor-1-0": "cd /srv/impala && CUDA_VISIBLE_DEVICES='' /opt/py/bin/python experiment.py "
        f"--job_name=actor --task=0 {set1}",
    }
    for command, (name, start) in zip(commands, expected.items(), strict=False):
        # Drop the exports that follow CUDA_VISIBLE_DEVICES (PYTHONUNBUFFERED, the run id).
        assert re.sub(r" PYTHONUNBUFFERED=1 IMPALA_RUN_ID=\S+", "", command).startswith(start), name
        for flag in config.NAMES:  # Every field of the config, forwarded to all.
            assert re.search(rf" --(no)?{flag}(=| |$)", command), (name, flag)
        assert (
            "--level_name=CartPole-v1" in command and "--total_environment_frames=1234" in command
        )
    assert re.search(
        rf" --oversubscribe --bind-to none --tag-output -np 1 -H localhost bash {launch_dir}/"
        rf"learner-0.sh : -np 1 -H localhost bash {launch_dir}/learner-1.sh$",
        commands[5],
    )
    assert out.rstrip().endswith("Dry run: nothing started.")
    assert not libtmux.Server(socket_name=tmux_socket).is_alive()
    assert not launch_dir.exists()


# Local runs: tmux windows and one mpirun.


def test_local_run_wires_every_worker_set_and_stop_leaves_nothing(tmp_path, runs, tmux_socket):
    path, ports = local_csv(tmp_path, cuda=("", "3", ""))
    logdir = tmp_path / "logdir"
    code, out, err = runs(logdir, f"--workers_csv_path={path}", *fake_run_flags(tmp_path, 3000))
    assert code == 0, out + err
    assert "Failed workers: 0" in out
    assert f"Watch: tmux -L {tmux_socket} attach -t {SESSION}" in out
    run_id = run_id_of(out)
    # 3 actors + 2 learners (python and its tee each), mpirun and its tee.
    assert len(run_processes(run_id)) == 12

    wait_until(lambda: window_status(tmux_socket, "learners") is not None, 30, "learners to end")
    assert window_status(tmux_socket, "learners") == 0
    for window in ("actor-0-0", "actor-0-1", "actor-1-0"):
        assert window_status(tmux_socket, window) == 0
    # Actor k said hello to learner k % 2, whose TF address it was given.
    hellos = {
        name: sorted(re.findall(r"learner got: (.*)", log_text(logdir, name)))
        for name in ("learner-0", "learner-1")
    }
    assert hellos == {
        "learner-0": [
            f"hello from actor 0 (localhost:{ports[2]})",
            f"hello from actor 1 (localhost:{ports[4]})",
        ],
        "learner-1": [f"hello from actor 0 (localhost:{ports[3]})"],
    }
    assert worker_report(logdir, "actor-0-1")["env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert worker_report(logdir, "actor-1-0")["env"]["CUDA_VISIBLE_DEVICES"] == "3"
    assert worker_report(logdir, "actor-1-0")["cwd"] == str(tmp_path / "repo")
    assert [
        worker_report(logdir, f"learner-{i}")["env"]["OMPI_COMM_WORLD_RANK"] for i in (0, 1)
    ] == ["0", "1"]
    assert "[1,1]<stdout>:learner got: hello from actor 0" in log_text(logdir, "mpirun")

    code, out, err = frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert f"Killed tmux session '{SESSION}'" in out
    assert run_processes(run_id) == []
    assert not libtmux.Server(socket_name=tmux_socket).is_alive()
    assert not (logdir / "launch" / "run_state.json").exists()


def test_killing_a_window_or_the_run_kills_its_processes(tmp_path, runs, tmux_socket):
    path, _ = local_csv(tmp_path)
    logdir = tmp_path / "logdir"
    code, out, err = runs(logdir, f"--workers_csv_path={path}", *fake_run_flags(tmp_path, 60_000))
    assert code == 0, out + err
    run_id = run_id_of(out)
    wait_until(lambda: "actor said hello" in log_text(logdir, "actor-0-0"), 10, "actor-0-0")
    actor = psutil.Process(worker_report(logdir, "actor-0-0")["pid"])
    tee = actor.children()
    assert [p.name() for p in tee] == ["tee"]

    # Killing one window ends its worker (SIGHUP to the pane's process group), no orphans.
    server = launcher.tmux_server(tmux_socket)
    server.sessions.get(session_name=SESSION).windows.get(window_name="actor-0-0").kill()
    _, alive = psutil.wait_procs([actor, *tee], timeout=5)
    assert alive == []

    # --stop ends the rest, mpirun's ranks included, without needing SIGKILL.
    ranks = [psutil.Process(worker_report(logdir, f"learner-{i}")["pid"]) for i in (0, 1)]
    assert all(rank.is_running() for rank in ranks)
    code, out, err = frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert re.search(r"Killed tmux session 'impala': \d+ processes ended\.$", out, re.M), out
    assert run_processes(run_id) == []


def test_failed_actor_is_reported_and_stops_the_run_unless_tolerated(tmp_path, runs):
    path, ports = local_csv(tmp_path)
    logdir = tmp_path / "logdir"
    flags = [f"--workers_csv_path={path}", *fake_run_flags(tmp_path, 60_000)]
    tell_exit(tmp_path / "repo", f"localhost:{ports[3]}", 3)  # Row 4 exits 3 at once.
    code, out, err = runs(logdir, *flags)
    assert code == 1, out + err
    assert "Failed workers: 1" in out
    assert (
        f"  actor-1-0 (row 4, this host, tf localhost:{ports[3]}): exited with status 3 within "
        "1.0 s;" in out
    ), out
    assert f"fake worker: exit-localhost:{ports[3]} says exit 3" in out  # Its log's end: why.
    assert "stopping everything it started" in out
    assert run_processes(run_id_of(out)) == []
    assert not (logdir / "launch" / "run_state.json").exists()

    code, out, err = runs(logdir, *flags, "--tolerate_actor_failures")
    assert code == 0, out + err
    assert "Failed workers: 1" in out
    assert "WARNING: learner 1 has no running actor" in out
    assert len(run_processes(run_id_of(out))) == 10  # All but the failed actor.


# Remote runs: actors over SSH in network namespaces, learners on this host.


@pytest.fixture(scope="module")
def hosts():
    yield from netns_sshd.hosts_for_a_fixture(2)


def remote_csv(path, hosts, *logins):
    """One learner on this host's end of hosts[0]'s veth; actor i in hosts[i] as logins[i].

    logins: (user, password, key) per actor.
    """
    ports = free_ports(1 + len(logins))
    rows = [("learner", hosts.hosts[0].host_ip, ports[0])]
    for host, (user, password, key), port in zip(hosts.hosts, logins, ports[1:], strict=False):
        rows.append(("actor", host.ip, port, "", host.ssh_port, user, password, key))
    return write_csv(path, rows), ports


def test_unknown_host_key_is_rejected_by_default(tmp_path, hosts, runs):
    path, ports = remote_csv(tmp_path / "w.csv", hosts, ("root", "", hosts.user_key))
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    host = hosts.hosts[0]
    code, out, err = runs(
        tmp_path / "logdir",
        f"--workers_csv_path={path}",
        f"--known_hosts={known_hosts}",
        *fake_run_flags(tmp_path, 60_000),
    )
    assert code == 1, out + err
    assert (
        f"  actor-0-0 (row 2, root@{host.ip} ssh port {host.ssh_port}, auth: key "
        f"{hosts.user_key}, tf {host.ip}:{ports[1]}): host key of [{host.ip}]:{host.ssh_port} "
        f"(ssh-ed25519 SHA256:" in out
    )
    assert f"is not in /etc/ssh/ssh_known_hosts or {known_hosts}" in out
    assert "--accept_unknown_host_keys" in out
    assert run_processes(run_id_of(out)) == []


def test_remote_actors_reach_their_learner_and_stop_kills_them(tmp_path, hosts, runs):
    key = ("root", "", hosts.user_key)
    path, ports = remote_csv(tmp_path / "w.csv", hosts, key, key)
    logdir = tmp_path / "logdir"
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    code, out, err = runs(
        logdir,
        f"--workers_csv_path={path}",
        f"--known_hosts={known_hosts}",
        "--accept_unknown_host_keys",
        *fake_run_flags(tmp_path, 60_000),
    )
    assert code == 0, out + err
    for host in hosts.hosts:
        assert f"WARNING: accepting the unknown host key of [{host.ip}]:{host.ssh_port}" in err
    run_id = run_id_of(out)
    state = json.loads((logdir / "launch" / "run_state.json").read_text())
    assert [entry["name"] for entry in state["remote"]] == ["actor-0-0", "actor-0-1"]
    for entry, host in zip(state["remote"], hosts.hosts, strict=True):
        assert_remote_actor_of_run(entry["pid"], run_id, host)
    wait_until(lambda: log_text(logdir, "learner-0").count("learner got") == 2, 15, "2 hellos")
    assert sorted(re.findall(r"learner got: (.*)", log_text(logdir, "learner-0"))) == [
        f"hello from actor {i} ({host.ip}:{port})"
        for i, (host, port) in enumerate(zip(hosts.hosts, ports[1:], strict=True))
    ]

    # --stop reads the CSV and --known_hosts the run recorded; flags given now still apply.
    code, out, err = frontend(f"--logdir={logdir}", "--stop", "--accept_unknown_host_keys")
    assert code == 0, out + err
    for entry, host in zip(state["remote"], hosts.hosts, strict=True):
        assert f"{entry['name']} (PID {entry['pid']} on root@{host.ip}): stopped." in out
    assert run_processes(run_id) == []


def test_wrong_key_or_password_fails_per_host(tmp_path, hosts, runs):
    wrong_password = "wrong-" + uuid.uuid4().hex
    path, ports = remote_csv(
        tmp_path / "w.csv", hosts, ("root", "", hosts.wrong_key), (hosts.user, wrong_password, "")
    )
    (h0, h1) = hosts.hosts
    code, out, err = runs(
        tmp_path / "logdir",
        f"--workers_csv_path={path}",
        f"--known_hosts={hosts.write_known_hosts(tmp_path / 'known_hosts')}",
        *fake_run_flags(tmp_path, 60_000),
    )
    assert code == 1, out + err
    assert "Failed workers: 2" in out
    assert (
        f"  actor-0-0 (row 2, root@{h0.ip} ssh port {h0.ssh_port}, auth: key {hosts.wrong_key}, "
        f"tf {h0.ip}:{ports[1]}): authentication failed" in out
    )
    assert (
        f"  actor-0-1 (row 3, {hosts.user}@{h1.ip} ssh port {h1.ssh_port}, auth: password from "
        f"the CSV, tf {h1.ip}:{ports[2]}): authentication failed" in out
    )
    assert wrong_password not in out + err
    assert "WARNING" not in err  # The known_hosts file had both keys.
    assert run_processes(run_id_of(out)) == []


@pytest.fixture
def shared_dir():
    """A directory the throwaway user can use too (pytest's tmp_path is root's alone)."""
    directory = pathlib.Path(tempfile.mkdtemp(prefix="impt_shared_"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_password_never_appears_in_output_or_logs(hosts, runs, shared_dir):
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("the throwaway user needs /usr/bin/python3 (this venv's python is root's)")
    logdir = shared_dir / "logdir"
    (logdir / "launch").mkdir(parents=True)
    (logdir / "launch").chmod(0o777)  # The user's actors write their scripts and logs there.
    path, _ = remote_csv(
        shared_dir / "w.csv",
        hosts,
        (hosts.user, hosts.password, ""),
        (hosts.user, "env:IMPT_SSH_PASSWORD", ""),
    )
    flags = [
        f"--workers_csv_path={path}",
        f"--known_hosts={hosts.write_known_hosts(shared_dir / 'known_hosts')}",
        "--remote_python=/usr/bin/python3",
        *fake_run_flags(shared_dir, 60_000),
    ]
    env = {"IMPT_SSH_PASSWORD": hosts.password}
    outputs = [runs(logdir, *flags, "--dry_run", env=env)]
    outputs.append(runs(logdir, *flags, env=env))
    assert outputs[-1][0] == 0, outputs[-1]
    state = json.loads((logdir / "launch" / "run_state.json").read_text())
    assert {psutil.Process(e["pid"]).username() for e in state["remote"]} == {hosts.user}
    wait_until(lambda: log_text(logdir, "learner-0").count("learner got") == 2, 15, "2 hellos")
    outputs.append(frontend(f"--logdir={logdir}", "--stop", env=env))
    assert outputs[-1][0] == 0, outputs[-1]
    assert outputs[-1][1].count(": stopped.") == 2

    for _, out, err in outputs:
        assert hosts.password not in out + err
    files = [p for p in logdir.rglob("*") if p.is_file()]
    assert len(files) >= 8  # Scripts and logs of 2 actors, 1 learner, mpirun.
    for file in files:
        assert hosts.password.encode() not in file.read_bytes(), file


# End to end with the real experiment.py (needs Horovod for the learners' mpirun).

CARTPOLE = [
    "--level_name=CartPole-v1",
    "--agent_name=MLPAgent",
    "--total_environment_frames=3000",
    "--batch_size=4",
    "--unroll_length=10",
    "--num_envs_per_actor=2",
    "--log_secs=1",
    "--batch_timeout_secs=120",
    "--learner_wait_secs=120",
    "--startup_check_secs=2",
]


def check_trained(logdir, tmux_socket, actor_windows):
    """Learners ended (0) after training; so did each local actor; rank 0 wrote summaries."""
    wait_until(lambda: window_status(tmux_socket, "learners") is not None, 600, "training")
    assert window_status(tmux_socket, "learners") == 0, log_text(logdir, "mpirun")[-3000:]
    for window in actor_windows:
        wait_until(lambda w=window: window_status(tmux_socket, w) is not None, 120, window)
        assert window_status(tmux_socket, window) == 0, log_text(logdir, window)[-3000:]
        assert "learner finished training; exiting" in log_text(logdir, window)
    assert list(pathlib.Path(logdir).glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_local_end_to_end_training(tmp_path, runs, tmux_socket):
    path, _ = local_csv(tmp_path)
    logdir = tmp_path / "logdir"
    code, out, err = runs(logdir, f"--workers_csv_path={path}", *CARTPOLE)
    assert code == 0, out + err
    run_id = run_id_of(out)
    check_trained(logdir, tmux_socket, ["actor-0-0", "actor-0-1", "actor-1-0"])
    for name in ("learner-0", "learner-1"):
        assert log_text(logdir, name)
    code, out, err = frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert run_processes(run_id) == []


@pytest.mark.slow
def test_remote_end_to_end_training(tmp_path, hosts, runs, tmux_socket):
    key = ("root", "", hosts.user_key)
    path, _ = remote_csv(tmp_path / "w.csv", hosts, key, key)
    logdir = tmp_path / "logdir"
    known_hosts = hosts.write_known_hosts(tmp_path / "known_hosts")
    code, out, err = runs(
        logdir, f"--workers_csv_path={path}", f"--known_hosts={known_hosts}", *CARTPOLE
    )
    assert code == 0, out + err
    run_id = run_id_of(out)
    check_trained(logdir, tmux_socket, [])
    state = json.loads((logdir / "launch" / "run_state.json").read_text())
    pids = [entry["pid"] for entry in state["remote"]]
    wait_until(lambda: not any(map(psutil.pid_exists, pids)), 120, "remote actors to finish")
    for name in ("actor-0-0", "actor-0-1"):
        assert "learner finished training; exiting" in log_text(logdir, name)
    code, out, err = frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert out.count(": not running.") == 2
    assert run_processes(run_id) == []


@pytest.mark.slow
def test_follow_prints_learner_progress_and_cleans_up_after_training(tmp_path, runs):
    """The README's main command: --follow shows the learners' progress until training ends."""
    path, _ = local_csv(tmp_path)
    logdir = tmp_path / "logdir"
    code, out, err = runs(logdir, f"--workers_csv_path={path}", "--follow", *CARTPOLE, timeout=600)
    assert code == 0, out + err
    # One progress line per interval with the global figures (rank 0), not one per rank.
    assert re.search(r"\] frames \d+ \(.*\| return", out) and "[learner rank 1/2] frames" not in out
    for rank in (0, 1):
        assert f"[learner rank {rank}/2] stopped at" in out
    assert "The learners exited with status 0: stopping what is left of the run." in out
    assert not (logdir / "launch" / "run_state.json").exists()
    assert run_processes(run_id_of(out)) == []


# Supervision: --follow restarts failed workers (supervisor.py).


class Following:
    """A frontend started with --follow in the background; its output read as it grows."""

    def __init__(self, directory, args):
        self.out_path, self.err_path = directory / "frontend.out", directory / "frontend.err"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.popen = subprocess.Popen(
                [sys.executable, FRONTEND, "--follow", *args],
                stdout=out,
                stderr=err,
                cwd=REPO,
                start_new_session=True,  # Only the signals a test sends reach it.
            )

    def out(self):
        return self.out_path.read_text(errors="replace")

    def err(self):
        return self.err_path.read_text(errors="replace")

    def run_id(self):
        found = re.match(r"Run (\S+): ", self.out())
        return found and found.group(1)

    def wait_for(self, pattern, timeout, count=1):
        """Waits (bounded) until `pattern` (a regex) matched `count` times in the output."""

        def seen():
            if self.popen.poll() is not None and len(re.findall(pattern, self.out(), re.M)) < count:
                raise AssertionError(
                    f"exited ({self.popen.returncode}) before {pattern!r}:\n"
                    + self.out()[-5000:]
                    + self.err()[-3000:]
                )
            return len(re.findall(pattern, self.out(), re.M)) >= count

        wait_until(seen, timeout, f"{pattern!r} x{count} in the frontend's output")

    def wait(self, timeout):
        """Its exit code; fails (with its output's end) if it runs longer than `timeout` s."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"frontend still running after {timeout} s:\n{self.out()[-5000:]}"
            ) from None


@pytest.fixture
def follows(tmux_socket, tmp_path):
    """follow(logdir, *args): the frontend with --follow, started in the background.

    At teardown: killed if still running, then its run stopped and anything left killed.
    """
    started = []  # (Following, logdir)

    def follow(logdir, *args):
        directory = tmp_path / f"frontend-{len(started)}"
        directory.mkdir()
        following = Following(
            directory, [f"--logdir={logdir}", f"--tmux_socket_name={tmux_socket}", *args]
        )
        started.append((following, logdir))
        return following

    yield follow
    for following, logdir in started:
        if following.popen.poll() is None:
            following.popen.kill()
            following.popen.wait(timeout=10)
        if following.run_id():
            undo_run(logdir, following.run_id())


def supervision_flags(backoff=0.5, max_restarts=5):
    return [f"--restart_backoff_secs={backoff}", f"--max_restarts={max_restarts}"]


def restart_lines(out):
    return [line for line in out.splitlines() if ": restarting it in " in line]


def check_stopped(logdir, run_id, tmux_socket):
    """Nothing of the run is left: no process, no tmux session, no run-state file."""
    wait_until(lambda: run_processes(run_id) == [], 30, "the run's processes to end")
    server = libtmux.Server(socket_name=tmux_socket)
    assert not (server.is_alive() and server.has_session(SESSION))
    assert not (pathlib.Path(logdir) / "launch" / "run_state.json").exists()


def pane_pid(tmux_socket, window):
    session = launcher.tmux_server(tmux_socket).sessions.get(session_name=SESSION)
    return int(session.windows.get(window_name=window).panes[0].pane_pid)


def test_follow_gives_up_on_an_actor_that_keeps_crashing(tmp_path, follows, tmux_socket):
    """A worker's restart budget spent: the run is torn down, the error says who and why."""
    path, ports = local_csv(tmp_path)
    logdir = tmp_path / "logdir"
    following = follows(
        logdir,
        f"--workers_csv_path={path}",
        *fake_run_flags(tmp_path, 120_000),
        *supervision_flags(max_restarts=2),
    )
    following.wait_for("^Following ", 60)
    run_id = following.run_id()
    wait_until(lambda: "actor said hello" in log_text(logdir, "actor-0-1"), 30, "actor-0-1")
    tell_exit(tmp_path / "repo", f"localhost:{ports[4]}", 1)  # From now on, always exits 1.

    assert following.wait(120) == 1
    out, err = following.out(), following.err()
    lines = restart_lines(out)
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
    assert f"Killed tmux session '{SESSION}'" in out
    check_stopped(logdir, run_id, tmux_socket)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_follow_sigterm_or_sighup_stops_the_whole_run(tmp_path, follows, tmux_socket, signum):
    """A batch scheduler's SIGTERM, a closed terminal's SIGHUP: no worker of the run is left."""
    path, _ = local_csv(tmp_path)
    logdir = tmp_path / "logdir"
    following = follows(logdir, f"--workers_csv_path={path}", *fake_run_flags(tmp_path, 120_000))
    following.wait_for("^Following ", 60)
    run_id = following.run_id()
    wait_until(lambda: len(run_processes(run_id)) == 12, 30, "every worker of the run")
    following.popen.send_signal(signum)

    assert following.wait(60) == 128 + signum
    assert f"{signal.Signals(signum).name} received: stopping the whole run." in following.err()
    assert f"Killed tmux session '{SESSION}'" in following.out()
    assert restart_lines(following.out()) == []
    check_stopped(logdir, run_id, tmux_socket)


def test_follow_does_not_fight_stop_and_ctrl_c_leaves_the_run_going(
    tmp_path, follows, runs, tmux_socket
):
    path, _ = local_csv(tmp_path)
    flags = [f"--workers_csv_path={path}", *fake_run_flags(tmp_path, 120_000)]
    # --stop from another terminal: the follower stops supervising, restarts nothing.
    logdir = tmp_path / "logdir"
    following = follows(logdir, *flags)
    following.wait_for("^Following ", 60)
    run_id = following.run_id()
    code, out, err = frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert following.wait(60) == 1
    assert "The run was stopped from elsewhere: " in following.err()
    assert restart_lines(following.out()) == []
    check_stopped(logdir, run_id, tmux_socket)

    # Ctrl-C: stops following only; the run goes on.
    logdir = tmp_path / "logdir2"
    following = follows(logdir, *flags)
    following.wait_for("^Following ", 60)
    run_id = following.run_id()
    following.popen.send_signal(signal.SIGINT)
    assert following.wait(60) == 0
    assert "Stopped following; the run goes on, unsupervised" in following.out()
    assert len(run_processes(run_id)) == 12
    assert (logdir / "launch" / "run_state.json").exists()
    code, out, err = frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    check_stopped(logdir, run_id, tmux_socket)


def test_follow_restarts_a_killed_remote_actor_over_ssh(tmp_path, hosts, follows, tmux_socket):
    key = ("root", "", hosts.user_key)
    path, ports = remote_csv(tmp_path / "w.csv", hosts, key)
    logdir = tmp_path / "logdir"
    host = hosts.hosts[0]
    following = follows(
        logdir,
        f"--workers_csv_path={path}",
        f"--known_hosts={hosts.write_known_hosts(tmp_path / 'known_hosts')}",
        *fake_run_flags(tmp_path, 120_000),
        *supervision_flags(),
    )
    following.wait_for("^Following ", 60)
    run_id = following.run_id()
    wait_until(lambda: log_text(logdir, "learner-0").count("learner got") == 1, 30, "a hello")
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
    wait_until(lambda: log_text(logdir, "learner-0").count("learner got") == 2, 60, "2 hellos")
    (restarted,) = json.loads(state_path.read_text())["remote"]
    assert restarted["pid"] != entry["pid"]
    assert_remote_actor_of_run(restarted["pid"], run_id, host)

    # The learner finishes (exit 0): the frontend stops the actor and exits 0.
    tell_exit(tmp_path / "repo", f"{host.host_ip}:{ports[0]}", 0)
    assert following.wait(60) == 0, following.out() + following.err()
    out = following.out()
    assert len(restart_lines(out)) == 1
    assert "The learners exited with status 0: stopping what is left of the run." in out
    assert f"actor-0-0 (PID {restarted['pid']} on root@{host.ip}): stopped." in out
    check_stopped(logdir, run_id, tmux_socket)


# Supervision end to end, with the real experiment.py.

SUPERVISED_CARTPOLE = [
    "--level_name=CartPole-v1",
    "--agent_name=MLPAgent",
    "--total_environment_frames=20000",
    "--batch_size=4",
    "--unroll_length=10",
    "--num_envs_per_actor=2",
    "--log_secs=1",
    "--batch_timeout_secs=300",
    "--learner_wait_secs=300",
    "--startup_check_secs=2",
    *supervision_flags(backoff=1),
]
PROGRESS = re.compile(r"\] frames (\d+) \(")


@pytest.mark.slow
def test_follow_restarts_a_killed_actor_and_training_completes(tmp_path, follows, tmux_socket):
    """One learner, one actor: the learner trains on only after the restarted actor is back."""
    ports = free_ports(2)
    path = write_csv(
        tmp_path / "w.csv", [("learner", "localhost", ports[0]), ("actor", "localhost", ports[1])]
    )
    logdir = tmp_path / "logdir"
    following = follows(logdir, f"--workers_csv_path={path}", *SUPERVISED_CARTPOLE)
    following.wait_for("^Following ", 120)
    run_id = following.run_id()
    wait_until(lambda: PROGRESS.search(log_text(logdir, "learner-0")), 300, "training")
    actor = psutil.Process(pane_pid(tmux_socket, "actor-0-0"))  # The script exec'd the actor.
    assert "--job_name=actor" in actor.cmdline()
    assert "stopped at" not in log_text(logdir, "learner-0")  # Mid-run.
    actor.kill()

    following.wait_for(
        r"\] actor-0-0 \(this host\) was killed by signal 9 \(SIGKILL\): restarting it in 1 s "
        r"\(restart 1; 1 of at most 5 within 600 s\)$",
        60,
    )
    assert following.wait(600) == 0, following.out()[-5000:] + following.err()
    out = following.out()
    assert len(restart_lines(out)) == 1
    # The restarted actor connected and fed the learner (it has no other) up to the frame budget.
    assert log_text(logdir, "actor-0-0").count("connected to learner") == 2
    assert re.search(
        r"stopped at \d+ environment frames \(frame budget reached\)",
        log_text(logdir, "learner-0"),
    )
    assert "The learners exited with status 0: stopping what is left of the run." in out
    check_stopped(logdir, run_id, tmux_socket)


@pytest.mark.slow
def test_follow_restarts_the_learners_from_their_checkpoint(tmp_path, follows, tmux_socket):
    """A learner rank killed: mpirun ends, is restarted, rank 0 restores the last checkpoint."""
    ports = free_ports(4)
    rows = [("learner", "localhost", ports[0]), ("learner", "127.0.0.1", ports[1])]
    rows += [("actor", "localhost", port) for port in ports[2:]]
    path = write_csv(tmp_path / "w.csv", rows)
    logdir = tmp_path / "logdir"
    following = follows(
        logdir, f"--workers_csv_path={path}", "--checkpoint_secs=1", *SUPERVISED_CARTPOLE
    )
    following.wait_for("^Following ", 120)
    run_id = following.run_id()

    def trained_since_a_checkpoint():
        log = log_text(logdir, "learner-0")
        return "saved checkpoint" in log and PROGRESS.search(log[log.index("saved checkpoint") :])

    wait_until(trained_since_a_checkpoint, 300, "a checkpoint and training after it")
    (rank1,) = [
        p
        for p in run_processes(run_id)
        if "--job_name=learner" in p.cmdline() and p.environ().get("OMPI_COMM_WORLD_RANK") == "1"
    ]
    assert "stopped at" not in log_text(logdir, "learner-0")  # Mid-run.
    rank1.kill()

    following.wait_for(
        # mpirun names the rank that failed first: usually rank 1, killed by signal 9.
        r"\] learners \(mpirun on this host; ranks on this host\) exited with status [1-9]\d*"
        r"( \(process rank \d .*\))?: restarting it in 1 s \(restart 1; 1 of at most 5 within "
        r"600 s\)$",
        120,
    )
    assert following.wait(900) == 0, following.out()[-5000:] + following.err()
    assert len(restart_lines(following.out())) == 1

    # Rank 0's log: its first run, then the restarted one, which begins by restoring.
    log = log_text(logdir, "learner-0")
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
    assert log_text(logdir, "learner-1").count(f"training from {resumed} to 20000") == 1
    check_stopped(logdir, run_id, tmux_socket)


@pytest.mark.slow
def test_follow_restarts_an_actor_that_gave_up_on_its_killed_learner(
    tmp_path, follows, tmux_socket
):
    """The learner killed and away longer than its actor waits for it (--learner_wait_secs):
    the actor gives up and exits, the supervisor restarts both, and the restarted actor feeds
    the restarted learner to the end of training."""
    ports = free_ports(2)
    path = write_csv(
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
        *supervision_flags(backoff=30),
    )
    following.wait_for("^Following ", 120)
    run_id = following.run_id()
    wait_until(lambda: PROGRESS.search(log_text(logdir, "learner-0")), 300, "training")
    (learner,) = [p for p in run_processes(run_id) if "--job_name=learner" in p.cmdline()]
    learner.kill()

    following.wait_for(
        r"\] actor-0-0 \(this host\) exited with status 2: restarting it in 30 s \(restart 1; ",
        180,
    )
    assert following.wait(900) == 0, following.out()[-5000:] + following.err()
    actor_log = log_text(logdir, "actor-0-0")
    gave_up = actor_log.index("not reachable/initialised after 5 s (--learner_wait_secs)")
    assert "connected to learner" in actor_log[gave_up:], actor_log[-3000:]
    learner_log = log_text(logdir, "learner-0")
    assert learner_log.count("serving actors") == 2, learner_log[-3000:]
    assert re.search(r"stopped at \d+ environment frames \(frame budget reached\)", learner_log)
    check_stopped(logdir, run_id, tmux_socket)
