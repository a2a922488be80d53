"""The frontend's plan: one line per worker (its role, address, host, files), each command with
every training flag and no secret, and a plan that grows with the workers only, never their square.

A worker set's addresses reach its workers in a cluster file (cluster_file.py), not as flags
that would carry every actor's address in every command (over Linux's 128 KiB for one argument
with thousands of actors): the plan prints one short line per worker, every command and script
stays short, and a real run's workers find one another through that file.
"""

import os
import pathlib
import re
import shlex
import sys
import uuid

import libtmux
import pytest

import cluster_file
import config
from frontend import launcher, workers_csv
from tests import frontend_runs
from tools.local_cluster import free_ports

MANY_ACTORS = 2000
LONGEST_PLAN_LINE = 300  # Characters; the plan names files relative to the launch dir.
LONGEST_ARGUMENT = 1000  # Characters of one argument of any worker's command.
LONGEST_SCRIPT = 8192  # Bytes of a worker's launch script, all training flags included.


def test_dry_run_prints_plan_and_every_command_with_secrets_masked(tmp_path, tmux_socket):
    host = os.uname().nodename  # This host, by a name its remote actors can reach.
    ports = free_ports(5)
    secret, env_secret = "CSV-pa55word-" + uuid.uuid4().hex, "ENV-pa55word-" + uuid.uuid4().hex
    path = frontend_runs.write_csv(
        tmp_path / "workers.csv",
        [
            ("learner", host, ports[0], "0"),
            ("learner", host, ports[1], "1"),
            ("actor", "localhost", ports[2]),
            ("actor", "203.0.113.9", ports[3], "", 2222, "bob", secret),
            ("actor", "203.0.113.10", ports[4], "", 22, "eve", "env:IMPT_PASSWORD"),
        ],
    )
    code, out, err = frontend_runs.frontend(
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
    assert (
        f"  learners: the learners' mpirun; tmux window {frontend_runs.SESSION}:learners; " in out
    )
    # --verbose: each worker's command under its line.
    commands = [line.strip() for line in out.splitlines() if line.startswith("    cd ")]
    assert len(commands) == 6  # 3 actors, 2 learners, 1 mpirun.
    set0, set1 = (f"--cluster_file={launch_dir}/cluster-{i}.txt" for i in (0, 1))
    expected = {
        "learner-0": f"cd {frontend_runs.REPO} && CUDA_VISIBLE_DEVICES=0 {sys.executable} "
        f"experiment.py --job_name=learner --task=0 {set0}",
        "actor-0-0": f"cd {frontend_runs.REPO} && CUDA_VISIBLE_DEVICES='' {sys.executable} "
        f"experiment.py --job_name=actor --task=0 {set0}",
        "actor-0-1": "cd /srv/impala && CUDA_VISIBLE_DEVICES='' /opt/py/bin/python experiment.py "
        f"--job_name=actor --task=1 {set0}",
        "learner-1": f"cd {frontend_runs.REPO} && CUDA_VISIBLE_DEVICES=1 {sys.executable} "
        f"experiment.py --job_name=learner --task=0 {set1}",
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


def many_actors_csv(tmp_path):
    """1 learner + MANY_ACTORS actors on this host (a dry run binds no port)."""
    rows = [("learner", "127.0.0.1", 20000)]
    rows += [("actor", "127.0.0.1", 20001 + k) for k in range(MANY_ACTORS)]
    return frontend_runs.write_csv(tmp_path / "workers.csv", rows)


def test_dry_run_of_thousands_of_actors_prints_one_short_line_per_worker(tmp_path):
    path = many_actors_csv(tmp_path)
    code, out, err = frontend_runs.frontend(
        f"--workers_csv_path={path}", f"--logdir={tmp_path}", "--dry_run", timeout=120
    )
    assert code == 0, err
    lines = out.splitlines()
    # The run's heading, the training defaults' line, the plan's heading, one line per worker,
    # the mpirun, 'Dry run'.
    assert len(lines) == 3 + (1 + MANY_ACTORS) + 1 + 1
    assert max(map(len, lines)) <= LONGEST_PLAN_LINE
    assert (
        f"  actor-0-{MANY_ACTORS - 1}: actor {MANY_ACTORS - 1} of worker set 0, tf 127.0.0.1:"
        in out
    )
    assert "addresses cluster-0.txt; script learner-0.sh; log learner-0.log" in out
    assert " cd " not in out  # The commands only with --verbose.
    assert not (tmp_path / "launch").exists()


def test_verbose_dry_run_prints_each_command_short(tmp_path):
    path = many_actors_csv(tmp_path)
    code, out, err = frontend_runs.frontend(
        f"--workers_csv_path={path}", f"--logdir={tmp_path}", "--dry_run", "--verbose", timeout=120
    )
    assert code == 0, err
    commands = [line for line in out.splitlines() if line.startswith("    cd ")]
    assert len(commands) == 1 + MANY_ACTORS + 1  # Every worker and the mpirun.
    cluster = f"--cluster_file={tmp_path}/launch/cluster-0.txt"
    assert all(cluster in command for command in commands[:-1])
    assert max(len(arg) for command in commands for arg in shlex.split(command)) <= LONGEST_ARGUMENT


def test_every_argument_and_script_stays_short_and_the_cluster_file_holds_every_address(
    tmp_path,
):
    worker_sets = workers_csv.load_worker_sets(many_actors_csv(tmp_path))
    place = launcher.Place(sys.executable, str(tmp_path))
    launch_dir = str(tmp_path / "launch")
    plan = launcher.plan(
        worker_sets, ["--level_name=CartPole-v1"], launch_dir, "run", place, place, "mpirun", True
    )
    for launch in plan.all:
        assert max(map(len, launch.argv)) <= LONGEST_ARGUMENT, launch.name
        assert len(launch.script().encode()) <= LONGEST_SCRIPT, launch.name
        assert "--actor_hosts" not in launch.script() and "--learner_host" not in launch.script()
    launcher.write_cluster_files(plan)
    (written,) = os.listdir(launch_dir)  # One file per worker set, once.
    learner_host, actor_hosts, evaluator_host = cluster_file.read(os.path.join(launch_dir, written))
    assert learner_host == "127.0.0.1:20000"
    assert actor_hosts == [f"127.0.0.1:{20001 + k}" for k in range(MANY_ACTORS)]
    assert evaluator_host is None


def test_cluster_file_round_trip(tmp_path):
    path = tmp_path / "cluster.txt"
    path.write_text(cluster_file.text("10.0.0.1:8000", ["10.0.0.2:8001", "[::1]:8002"]))
    assert path.read_text() == "learner 10.0.0.1:8000\nactor 10.0.0.2:8001\nactor [::1]:8002\n"
    assert cluster_file.read(path) == ("10.0.0.1:8000", ["10.0.0.2:8001", "[::1]:8002"], None)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("learner a:1\nactor b:2 c:3\n", ":2: 'actor b:2 c:3' is not 'JOB HOST:PORT' with JOB"),
        ("learner a:1\nworker b:2\n", ":2: 'worker b:2' is not 'JOB HOST:PORT' with JOB one"),
        ("actor b:2\nlearner a:1\n", ":1: the learner's line comes first, once"),
        ("learner a:1\nlearner b:2\n", ":2: the learner's line comes first, once"),
        ("", ": no 'learner HOST:PORT' line"),
    ],
    ids=["two_addresses", "unknown_job", "actor_first", "two_learners", "empty"],
)
def test_a_malformed_cluster_file_is_named_with_its_line(tmp_path, text, problem):
    path = tmp_path / "cluster.txt"
    path.write_text(text)
    with pytest.raises(cluster_file.ClusterFileError, match=re.escape(f"{path}{problem}")):
        cluster_file.read(path)


@pytest.mark.parametrize(
    "cluster_text, extra_flags, message",
    [
        (
            "learner 127.0.0.1:1\nactor 127.0.0.1:2\n",
            ["--actor_hosts=127.0.0.1:2"],
            "--cluster_file and --learner_host/--actor_hosts/--evaluator_host: give one or the "
            "other",
        ),
        (
            "learner 127.0.0.1:1\nactor 127.0.0.1:2\n",
            ["--task=1"],
            "--task=1: no such actor in --cluster_file={path} (1 given)",
        ),
        ("learner 127.0.0.1:1\nactor\n", [], "--cluster_file: {path}:2: 'actor' is not"),
    ],
    ids=["with_address_flags", "task_out_of_range", "malformed"],
)
def test_experiment_refuses_bad_cluster_flags_in_one_line(
    spawn, tmp_path, cluster_text, extra_flags, message
):
    path = tmp_path / "cluster.txt"
    path.write_text(cluster_text)
    args = ["--job_name=actor", f"--cluster_file={path}", *extra_flags]
    process = spawn([*args, "--level_name=CartPole-v1", "--agent_name=MLPAgent"], "bad_cluster")
    assert process.wait(timeout=120) == 2
    assert "experiment.py (actor " in process.log()
    assert message.format(path=path) in process.log()


@pytest.mark.slow
def test_a_real_run_gets_its_addresses_through_the_cluster_file(tmp_path, runs, tmux_socket):
    """1 learner + 2 actors on CartPole: every worker's command names the cluster file only."""
    ports = free_ports(3)
    rows = [("learner", "localhost", ports[0])]
    rows += [("actor", "127.0.0.1", port) for port in ports[1:]]
    path = frontend_runs.write_csv(tmp_path / "workers.csv", rows)
    logdir = tmp_path / "logdir"
    code, out, err = runs(logdir, f"--workers_csv_path={path}", *frontend_runs.CARTPOLE)
    assert code == 0, out + err
    run_id = frontend_runs.run_id_of(out)
    launch_dir = pathlib.Path(logdir, "launch")
    assert (launch_dir / "cluster-0.txt").read_text() == (
        f"learner localhost:{ports[0]}\nactor 127.0.0.1:{ports[1]}\nactor 127.0.0.1:{ports[2]}\n"
    )
    for name in ("learner-0", "actor-0-0", "actor-0-1"):
        script = (launch_dir / f"{name}.sh").read_text()
        assert f"--cluster_file={launch_dir}/cluster-0.txt" in script, name
        assert "--actor_hosts" not in script and "--learner_host" not in script, name
    frontend_runs.check_trained(logdir, tmux_socket, ["actor-0-0", "actor-0-1"])
    for task, port in enumerate(ports[1:]):  # Its own address and its learner's, from the file.
        log = frontend_runs.log_text(logdir, f"actor-0-{task}")
        connected = f"actor {task} (127.0.0.1:{port}): connected to learner localhost:{ports[0]}"
        assert connected in log, log[-3000:]
    code, out, err = frontend_runs.frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert frontend_runs.run_processes(run_id) == []
