"""The evaluator role around its own loop: its rows in the workers CSV, its line in the cluster
file, its job in the cluster spec, and the frontend planning, starting, stopping and restarting
it as it does an actor (runs use tests/fake_worker.py as experiment.py, as the other frontend
tests do)."""

import json
import os
import re
import signal
import socket

import numpy as np
import psutil
import pytest

import cluster_file
import transport
from tests import frontend_runs, netns_sshd
from tests.loopback_transport import PARAMETER_SPECS, UNROLL_SPEC
from tests.workers_csv_test import ACTOR, LEARNER, REMOTE, load, problems, write
from tools.local_cluster import free_ports

EVALUATOR = "evaluator,localhost,9101,,,,"
SESSION = frontend_runs.SESSION


# The workers CSV.


def test_evaluators_join_worker_sets_round_robin_as_actors_do(tmp_path):
    path = write(
        tmp_path,
        LEARNER,
        "evaluator,localhost,9101,,,,",
        "learner,localhost,8002,,,,",
        "learner,localhost,8003,,,,",
        *[f"actor,localhost,{9001 + k},,,," for k in range(3)],
        "evaluator,localhost,9102,,,,",
    )
    worker_sets = load(path)
    assert [ws.evaluator and (ws.evaluator.host, ws.evaluator.row) for ws in worker_sets] == [
        ("localhost:9101", 2),
        ("localhost:9102", 8),
        None,
    ]
    assert [w.tf_port for w in worker_sets[0].workers] == [8001, 9001, 9101]
    assert [w.tf_port for w in worker_sets[2].workers] == [8003, 9003]


def test_a_second_evaluator_for_a_worker_set_is_refused_naming_its_row(tmp_path):
    path = write(tmp_path, LEARNER, ACTOR, EVALUATOR, "evaluator,localhost,9102,,,,")
    assert problems(path) == [
        f"{path}:5: row 4, field 'job': a second evaluator for worker set 0 (learner row 1): at "
        "most one per worker set; evaluator k goes to worker set k % 1 and there are 2 evaluators"
    ]


@pytest.mark.parametrize(
    "rows, line, row, field, text",
    [
        ([LEARNER, ACTOR, "evaluator,localhost,,,,,"], 4, 3, "tf_port", "'' is not a port"),
        ([LEARNER, ACTOR, "evaluator,,9101,,,,"], 4, 3, "ip", "empty"),
        ([LEARNER, ACTOR, "evaluator,127.0.0.1,9001,,,,"], 4, 3, "tf_port", "used by row 2"),
        ([LEARNER, ACTOR, "evaluator,localhost,9101,gpu0,,,"], 4, 3, "cuda_visible_devices", ""),
        ([LEARNER, ACTOR, f"evaluator,{REMOTE},9101,,22,bob,"], 4, 3, "ssh_password", "credential"),
        ([LEARNER, ACTOR, f"evaluator,{REMOTE},9101,,,bob,pw"], 4, 3, "ssh_port", "SSH port"),
        # A loopback learner cannot be reached by its remote evaluator.
        ([LEARNER, ACTOR, f"evaluator,{REMOTE},9101,,22,bob,password"], 2, 1, "ip", "[3]"),
        ([EVALUATOR], 2, 1, "job", "evaluator localhost:9101 has no learner"),
    ],
)
def test_an_evaluator_rows_bad_fields_are_named_like_any_rows(
    tmp_path, rows, line, row, field, text
):
    path = write(tmp_path, *rows)
    prefix = f"{path}:{line}: row {row}, field '{field}': "
    assert any(p.startswith(prefix) and text in p for p in problems(path)), problems(path)


# The cluster file and the cluster spec.


@pytest.mark.parametrize("evaluator", [None, "10.0.0.4:8003"])
def test_cluster_file_round_trip_with_and_without_an_evaluator(tmp_path, evaluator):
    path = tmp_path / "cluster.txt"
    path.write_text(cluster_file.text("10.0.0.1:8000", ["10.0.0.2:8001"], evaluator))
    evaluator_line = f"evaluator {evaluator}\n" if evaluator else ""
    assert path.read_text() == f"learner 10.0.0.1:8000\nactor 10.0.0.2:8001\n{evaluator_line}"
    cluster = cluster_file.read(path)
    assert cluster == cluster_file.Cluster("10.0.0.1:8000", ["10.0.0.2:8001"], evaluator)
    assert cluster.evaluator == evaluator


@pytest.mark.parametrize(
    "text, line",
    [
        ("learner a:1\nactor b:2\nevaluator c:3\nevaluator d:4\n", 4),
        ("learner a:1\nevaluator c:3\nactor b:2\n", 3),
    ],
    ids=["two_evaluators", "actor_after_the_evaluator"],
)
def test_a_second_or_misplaced_evaluator_line_is_named(tmp_path, text, line):
    path = tmp_path / "cluster.txt"
    path.write_text(text)
    with pytest.raises(cluster_file.ClusterFileError) as error:
        cluster_file.read(path)
    assert str(error.value) == (
        f"{path}:{line}: the evaluator's line comes last (after the actors'), once"
    )


def test_cluster_spec_with_an_evaluator_has_its_three_jobs():
    spec = transport.cluster_spec("a:1", ["b:2", "c:3"], "d:4")
    assert spec.as_dict() == {"learner": ["a:1"], "actor": ["b:2", "c:3"], "evaluator": ["d:4"]}
    assert set(transport.cluster_spec("a:1", ["b:2"]).jobs) == {"learner", "actor"}
    with pytest.raises(transport.AddressError, match=r"^--evaluator_host: 'd' is not HOST:PORT"):
        transport.cluster_spec("a:1", ["b:2"], "d")


def test_an_evaluator_reads_the_learners_parameters_and_is_not_waited_for():
    """The learner and its actor work before the evaluator's server is up; then the evaluator,
    a client like an actor, reads what the learner published."""
    learner_port, actor_port, evaluator_port = free_ports(3)
    spec = transport.cluster_spec(
        f"127.0.0.1:{learner_port}", [f"127.0.0.1:{actor_port}"], f"127.0.0.1:{evaluator_port}"
    )

    def client(job_name):
        server = transport.start_server(spec, job_name, 0)
        return transport.Transport(server, job_name, 0, PARAMETER_SPECS, UNROLL_SPEC, 8)

    learner, actor = client("learner"), client("actor")
    learner.initialize()
    parameters = [np.full(shape, 2.0, dtype.as_numpy_dtype) for shape, dtype in PARAMETER_SPECS]
    assert learner.publish(parameters, frames=40) == 1
    assert actor.pull_parameters().version == 1
    evaluator = client("evaluator")
    published = evaluator.pull_parameters()
    assert (published.version, published.frames) == (1, 40)
    for got, sent in zip(published.parameters, parameters, strict=True):
        np.testing.assert_array_equal(got, sent)
    assert not evaluator.training_finished()
    learner.finish()
    assert evaluator.training_finished()


def test_an_evaluators_busy_port_names_evaluator_host():
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        spec = transport.cluster_spec("127.0.0.1:1", ["127.0.0.1:2"], f"127.0.0.1:{port}")
        with pytest.raises(transport.AddressError, match=rf"^--evaluator_host: port {port} "):
            transport.start_server(spec, "evaluator", 0)


# experiment.py's addresses for an evaluator.


@pytest.mark.parametrize(
    "cluster_text, args, message",
    [
        (
            "learner 127.0.0.1:1\nactor 127.0.0.1:2\n",
            [],
            "--job_name=evaluator: no evaluator address; give an 'evaluator HOST:PORT' line in "
            "--cluster_file={path}",
        ),
        (
            "learner 127.0.0.1:1\nactor 127.0.0.1:2\nevaluator 127.0.0.1:3\n",
            ["--task=1"],
            "--task=1: a worker set has one evaluator, task 0",
        ),
        (
            "learner 127.0.0.1:1\nactor 127.0.0.1:2\nevaluator 127.0.0.1:3\n",
            ["--evaluator_host=127.0.0.1:3"],
            "--cluster_file and --learner_host/--actor_hosts/--evaluator_host: give one or the "
            "other",
        ),
        (
            None,
            ["--learner_host=127.0.0.1:1", "--actor_hosts=127.0.0.1:2"],
            "--job_name=evaluator: no evaluator address; give --evaluator_host",
        ),
    ],
    ids=["no_evaluator_line", "task_1", "with_evaluator_host", "no_evaluator_host"],
)
def test_experiment_refuses_an_evaluator_without_its_address_in_one_line(
    spawn, tmp_path, cluster_text, args, message
):
    path = tmp_path / "cluster.txt"
    if cluster_text is not None:
        path.write_text(cluster_text)
        args = [f"--cluster_file={path}", *args]
    flags = ["--job_name=evaluator", "--level_name=CartPole-v1", "--agent_name=MLPAgent"]
    process = spawn([*flags, f"--logdir={tmp_path}", *args], "evaluator")
    assert process.wait(timeout=120) == 2, process.log()[-3000:]
    assert f"): error: {message.format(path=path)}" in process.log()
    assert "experiment.py (evaluator " in process.log()


# The frontend.


def test_dry_run_plans_each_evaluator_like_an_actor(tmp_path):
    host = os.uname().nodename  # This host, by a name a remote evaluator can reach.
    key = tmp_path / "id_ed25519"
    key.write_text("not read by a dry run")
    ports = free_ports(6)
    path = frontend_runs.write_csv(
        tmp_path / "workers.csv",
        [
            ("learner", host, ports[0]),
            ("learner", host, ports[1]),
            ("actor", "localhost", ports[2]),
            ("actor", "localhost", ports[3]),
            ("evaluator", "localhost", ports[4]),
            ("evaluator", "203.0.113.9", ports[5], "", 22, "bob", "", key),
        ],
    )
    code, out, err = frontend_runs.frontend(
        f"--workers_csv_path={path}", f"--logdir={tmp_path}", "--dry_run", "--verbose"
    )
    assert code == 0, err
    launch_dir = tmp_path / "launch"
    assert "(2 learners, 2 actors, 2 evaluator(s); actor k -> learner k % 2)" in out
    assert (
        f"  evaluator-0: evaluator of worker set 0, tf localhost:{ports[4]} (row 5); tmux window "
        f"{SESSION}:evaluator-0; script evaluator-0.sh; log evaluator-0.log\n" in out
    )
    assert (
        f"  evaluator-1: evaluator of worker set 1, tf 203.0.113.9:{ports[5]} (row 6); over SSH "
        f"as bob@203.0.113.9 ssh port 22 (auth: key {key}); script evaluator-1.sh; log "
        "evaluator-1.log\n" in out
    )
    # Each worker's line, then (--verbose) its command; an evaluator after its set's actors.
    plan = [line for line in out.splitlines() if line.startswith("  ")]
    names = [line.split(":")[0].strip() for line in plan[::2]]
    assert names == [
        "learner-0",
        "actor-0-0",
        "evaluator-0",
        "learner-1",
        "actor-1-0",
        "evaluator-1",
        "learners",
    ]
    commands = dict(zip(names, plan[1::2], strict=True))
    for index in (0, 1):
        assert (
            " experiment.py --job_name=evaluator --task=0 "
            f"--cluster_file={launch_dir}/cluster-{index}.txt " in commands[f"evaluator-{index}"]
        )
    assert not launch_dir.exists()


def evaluator_csv(tmp_path):
    """1 learner, 1 actor and its evaluator, on this host on free ports."""
    ports = free_ports(3)
    rows = [("learner", "localhost", ports[0]), ("actor", "localhost", ports[1])]
    rows.append(("evaluator", "127.0.0.1", ports[2]))
    return frontend_runs.write_csv(tmp_path / "workers.csv", rows), ports


@pytest.mark.slow
def test_a_local_evaluator_runs_in_its_tmux_window_and_stop_ends_it(tmp_path, runs, tmux_socket):
    path, ports = evaluator_csv(tmp_path)
    logdir = tmp_path / "logdir"
    code, out, err = runs(
        logdir, f"--workers_csv_path={path}", *frontend_runs.fake_run_flags(tmp_path, 60_000)
    )
    assert code == 0, out + err
    assert "Failed workers: 0" in out
    run_id = frontend_runs.run_id_of(out)
    launch_dir = logdir / "launch"
    assert (launch_dir / "cluster-0.txt").read_text() == (
        f"learner localhost:{ports[0]}\nactor localhost:{ports[1]}\n"
        f"evaluator 127.0.0.1:{ports[2]}\n"
    )
    # It found its own address and its learner's in the cluster file, as the actor did.
    frontend_runs.wait_until(
        lambda: frontend_runs.log_text(logdir, "learner-0").count("learner got") == 2, 30, "hellos"
    )
    hellos = re.findall(r"learner got: (.*)", frontend_runs.log_text(logdir, "learner-0"))
    assert sorted(hellos) == [
        f"hello from actor 0 (localhost:{ports[1]})",
        f"hello from evaluator (127.0.0.1:{ports[2]})",
    ]
    report = frontend_runs.worker_report(logdir, "evaluator-0")
    assert report["argv"][:3] == [
        "--job_name=evaluator",
        "--task=0",
        f"--cluster_file={launch_dir}/cluster-0.txt",
    ]
    evaluator = psutil.Process(report["pid"])  # The script exec'd it in its window's pane.
    assert evaluator.pid == frontend_runs.pane_pid(tmux_socket, "evaluator-0")
    assert frontend_runs.window_status(tmux_socket, "evaluator-0") is None  # Still running.

    code, out, err = frontend_runs.frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert f"Killed tmux session '{SESSION}'" in out
    assert not evaluator.is_running()
    assert frontend_runs.run_processes(run_id) == []


def follow_evaluator_run(tmp_path, follows, *flags):
    """A followed run of evaluator_csv's workers (fake, 120 s at most) -> (Following, run id,
    ports, logdir, repo)."""
    path, ports = evaluator_csv(tmp_path)
    logdir = tmp_path / "logdir"
    following = frontend_runs.follow_fake_run(
        follows,
        tmp_path,
        logdir,
        f"--workers_csv_path={path}",
        *frontend_runs.supervision_flags(),
        *flags,
    )
    return following, following.run_id(), ports, logdir, tmp_path / "repo"


@pytest.mark.slow
def test_follow_restarts_a_killed_evaluator_and_not_one_that_ended(tmp_path, follows, tmux_socket):
    following, run_id, ports, logdir, repo = follow_evaluator_run(tmp_path, follows)

    def hellos():
        return frontend_runs.log_text(logdir, "learner-0").count("hello from evaluator")

    frontend_runs.wait_until(lambda: hellos() == 1, 30, "its hello")
    os.kill(frontend_runs.pane_pid(tmux_socket, "evaluator-0"), signal.SIGKILL)

    following.wait_for(
        r"\] evaluator-0 \(this host\) was killed by signal 9 \(SIGKILL\): restarting it in "
        r"0.5 s \(restart 1; 1 of at most 5 within 600 s\)$",
        60,
    )
    # Started again in its window, it says hello again.
    frontend_runs.wait_until(lambda: hellos() == 2, 60, "its second hello")
    # An evaluator that ends with 0 (as at the end of training) is not restarted.
    frontend_runs.tell_exit(repo, f"127.0.0.1:{ports[2]}", 0)
    following.wait_for(r"\] evaluator-0 \(this host\) exited with status 0: not restarted\.$", 60)
    frontend_runs.tell_exit(repo, f"localhost:{ports[0]}", 0)  # The learner finishes.
    assert following.wait(60) == 0, following.out() + following.err()
    assert len(frontend_runs.restart_lines(following.out())) == 1
    frontend_runs.check_stopped(logdir, run_id, tmux_socket)


@pytest.mark.slow
@pytest.mark.parametrize("evaluator_ends", [True, False])
def test_follow_waits_for_the_final_evaluation_at_most_its_bound(
    tmp_path, follows, tmux_socket, evaluator_ends
):
    """When the learners finish, the evaluator still has the final parameters to play: the
    frontend waits for it to end (at most --final_evaluation_secs), then stops the rest."""
    bound = 600 if evaluator_ends else 2
    following, run_id, ports, logdir, repo = follow_evaluator_run(
        tmp_path, follows, f"--final_evaluation_secs={bound}"
    )
    frontend_runs.wait_until(
        lambda: "hello from evaluator" in frontend_runs.log_text(logdir, "learner-0"),
        30,
        "the evaluator's hello",
    )
    frontend_runs.tell_exit(repo, f"localhost:{ports[0]}", 0)  # The learner finishes.
    following.wait_for(
        rf"\] The learners have finished: waiting at most {bound} s for evaluator-0 to "
        r"evaluate the final parameters\.$",
        60,
    )
    if evaluator_ends:
        frontend_runs.tell_exit(repo, f"127.0.0.1:{ports[2]}", 0)
        following.wait_for(r"\] evaluator-0 \(this host\) exited with status 0\.$", 60)
    else:
        following.wait_for(r"\] Stopped waiting for evaluator-0 after 2 s\.$", 60)
    assert following.wait(60) == 0, following.out() + following.err()
    assert "The learners exited with status 0: stopping what is left" in following.out()
    assert frontend_runs.restart_lines(following.out()) == []
    frontend_runs.check_stopped(logdir, run_id, tmux_socket)


@pytest.fixture(scope="module")
def hosts():
    yield from netns_sshd.hosts_for_a_fixture(1)


@pytest.mark.slow
def test_a_remote_evaluator_is_recorded_and_stop_kills_it(tmp_path, hosts, runs):
    host = hosts.hosts[0]
    ports = free_ports(3)
    path = frontend_runs.write_csv(
        tmp_path / "workers.csv",
        [
            ("learner", host.host_ip, ports[0]),
            ("actor", "localhost", ports[1]),
            ("evaluator", host.ip, ports[2], "", host.ssh_port, "root", "", hosts.user_key),
        ],
    )
    logdir = tmp_path / "logdir"
    code, out, err = runs(
        logdir,
        f"--workers_csv_path={path}",
        f"--known_hosts={hosts.write_known_hosts(tmp_path / 'known_hosts')}",
        *frontend_runs.fake_run_flags(tmp_path, 60_000),
    )
    assert code == 0, out + err
    run_id = frontend_runs.run_id_of(out)
    (entry,) = json.loads((logdir / "launch" / "run_state.json").read_text())["remote"]
    assert entry["name"] == "evaluator-0"
    evaluator = psutil.Process(entry["pid"])
    assert "--job_name=evaluator" in evaluator.cmdline()
    assert os.getpgid(evaluator.pid) == evaluator.pid
    assert (
        os.stat(f"/proc/{evaluator.pid}/ns/net").st_ino
        == os.stat(f"/run/netns/{host.namespace}").st_ino
    )
    frontend_runs.wait_until(
        lambda: "hello from evaluator" in frontend_runs.log_text(logdir, "learner-0"), 30, "hello"
    )

    code, out, err = frontend_runs.frontend(f"--logdir={logdir}", "--stop")
    assert code == 0, out + err
    assert f"evaluator-0 (PID {entry['pid']} on root@{host.ip}): stopped." in out
    assert frontend_runs.run_processes(run_id) == []
