"""launcher: the plan of a run (one script per worker, the learners' one MPMD mpirun, where each
worker runs from), its tmux windows and a remote worker's exit status; nothing is started."""

import os
import pathlib
import shlex
import signal
import subprocess
import sys

import paramiko
import pytest

from frontend import launcher
from tests.frontend_fakes import RUN_ID, FakeTmux, plan

CSV_SECRET, ENV_SECRET = "csv-Secret-8d1e2f", "env-Secret-5a6b7c"
ROWS = (
    "learner,localhost,8001,0,,,",
    f"learner,10.0.0.3,8002,1,22,bob,{CSV_SECRET}",
    "actor,localhost,9001,,,,",
    "actor,10.0.0.2,9002,,22,eve,env:IMPT_PW",
    "actor,localhost,9003,,,,",
    "evaluator,localhost,9101,,,,",
)
FLAGS = ("--level_name=CartPole-v1", "--total_environment_frames=1234")
LOCAL = launcher.Place("/venv/bin/python", "/repo")
REMOTE = launcher.Place("/opt/py/bin/python", "/srv/impala")
SESSION = "impala"


@pytest.fixture
def run_plan(tmp_path):
    """The plan of ROWS: 2 learners (1 remote), 3 actors (1 remote), an evaluator."""
    _, the_plan = plan(
        tmp_path,
        *ROWS,
        flag_args=FLAGS,
        local=LOCAL,
        remote=REMOTE,
        environ={"IMPT_PW": ENV_SECRET},
    )
    return the_plan


def test_one_launch_per_worker_each_with_its_own_script_log_and_worker_set(tmp_path, run_plan):
    launch_dir = tmp_path / "launch"
    assert [launch.name for launch in run_plan.all] == [
        "actor-0-0",
        "actor-0-1",
        "actor-1-0",
        "evaluator-0",
        "learner-0",
        "learner-1",
        "learners",
    ]
    assert [c.name for c in run_plan.clients] == [
        "actor-0-0",
        "actor-0-1",
        "actor-1-0",
        "evaluator-0",
    ]
    for launch in run_plan.all:
        assert launch.script_path == f"{launch_dir}/{launch.name}.sh"
    assert [launch.log_path for launch in run_plan.all] == [
        f"{launch_dir}/{name}.log"
        for name in (*[c.name for c in run_plan.clients], "learner-0", "learner-1", "mpirun")
    ]
    # Actor k of the CSV is actor k // 2 of worker set k % 2; its task is its place in its set.
    expected = {
        "actor-0-0": ("actor", 0, 0, "localhost:9001"),
        "actor-0-1": ("actor", 1, 0, "localhost:9003"),
        "actor-1-0": ("actor", 0, 1, "10.0.0.2:9002"),
        "evaluator-0": ("evaluator", 0, 0, "localhost:9101"),
        "learner-0": ("learner", 0, 0, "localhost:8001"),
        "learner-1": ("learner", 0, 1, "10.0.0.3:8002"),
    }
    for launch in run_plan.all[:-1]:
        job, task, worker_set, host = expected[launch.name]
        cluster = f"{launch_dir}/cluster-{worker_set}.txt"
        assert launch.worker.host == host
        assert launch.cluster_file == run_plan.cluster_files[worker_set]
        assert launch.cluster_file.path == cluster
        assert launch.argv[1:] == (
            "experiment.py",
            f"--job_name={job}",
            f"--task={task}",
            f"--cluster_file={cluster}",
            *FLAGS,
        )
        assert launch.env == {
            "CUDA_VISIBLE_DEVICES": launch.worker.cuda_visible_devices,
            "PYTHONUNBUFFERED": "1",
            launcher.RUN_ID_VARIABLE: RUN_ID,
        }
    assert [launch.env["CUDA_VISIBLE_DEVICES"] for launch in run_plan.learners] == ["0", "1"]
    assert run_plan.cluster_files[0].text == (
        "learner localhost:8001\nactor localhost:9001\nactor localhost:9003\n"
        "evaluator localhost:9101\n"
    )
    assert run_plan.cluster_files[1].text == "learner 10.0.0.3:8002\nactor 10.0.0.2:9002\n"


def test_a_remote_worker_runs_from_the_remote_place_a_local_one_from_this_hosts(tmp_path, run_plan):
    by_name = {launch.name: launch for launch in run_plan.all}
    for name in ("actor-1-0", "learner-1"):
        assert by_name[name].is_remote
        assert (by_name[name].argv[0], by_name[name].cwd) == (REMOTE.python, REMOTE.repo_dir)
    for name in ("actor-0-0", "actor-0-1", "evaluator-0", "learner-0"):
        assert not by_name[name].is_remote
        assert (by_name[name].argv[0], by_name[name].cwd) == (LOCAL.python, LOCAL.repo_dir)
    # The mpirun runs here; a remote learner's output reaches a terminal through it.
    assert (run_plan.mpirun.worker, run_plan.mpirun.cwd) == (None, LOCAL.repo_dir)
    assert not run_plan.mpirun.is_remote
    assert [launch.name for launch in run_plan.all if not launch.to_terminal] == ["actor-1-0"]
    assert by_name["actor-1-0"].status_path == f"{tmp_path}/launch/actor-1-0.status"


@pytest.mark.parametrize("as_root", [False, True])
def test_the_learners_are_one_mpmd_mpirun_over_their_scripts(tmp_path, as_root):
    _, the_plan = plan(
        tmp_path, *ROWS, local=LOCAL, as_root=as_root, environ={"IMPT_PW": ENV_SECRET}
    )
    launch_dir = tmp_path / "launch"
    mpirun = the_plan.mpirun
    assert mpirun.name == "learners"
    assert mpirun.argv == (
        "mpirun",
        *["--allow-run-as-root"] * as_root,
        "--oversubscribe",
        "--bind-to",
        "none",
        "--tag-output",
        *("-np", "1", "-H", "localhost", "bash", f"{launch_dir}/learner-0.sh"),
        ":",
        *("-np", "1", "-H", "10.0.0.3", "bash", f"{launch_dir}/learner-1.sh"),
    )
    assert mpirun.env == {launcher.RUN_ID_VARIABLE: RUN_ID}
    assert (mpirun.script_path, mpirun.log_path) == (
        f"{launch_dir}/learners.sh",
        f"{launch_dir}/mpirun.log",
    )


def test_mpmd_argv_puts_options_before_the_ranks():
    assert launcher.mpmd_argv(
        "/usr/bin/mpirun", False, [("h0", ["a"]), ("h1", ["b", "c"])], ["-x"]
    ) == (
        *("/usr/bin/mpirun", "--oversubscribe", "--bind-to", "none", "-x"),
        *("-np", "1", "-H", "h0", "a", ":", "-np", "1", "-H", "h1", "b", "c"),
    )


def test_no_secret_in_any_command_script_or_repr(run_plan):
    for launch in run_plan.all:
        for text in (
            launch.command,
            launch.script(),
            repr(launch),
            *launch.argv,
            *launch.env.values(),
        ):
            assert CSV_SECRET not in text and ENV_SECRET not in text, launch.name
    remote_actor = run_plan.actors[2]
    assert remote_actor.worker.password == ENV_SECRET  # It is there, for SSH only.
    assert remote_actor.worker.auth == "password from $IMPT_PW"


def test_the_command_is_the_scripts_cd_exports_and_exec_on_one_line(tmp_path, run_plan):
    actor = run_plan.actors[0]
    assert actor.command == (
        f"cd /repo && CUDA_VISIBLE_DEVICES='' PYTHONUNBUFFERED=1 {launcher.RUN_ID_VARIABLE}="
        f"{RUN_ID} {shlex.join(actor.argv)}"
    )
    log = shlex.quote(actor.log_path)
    assert actor.script().splitlines() == [
        "#!/bin/bash",
        "# actor-0-0: written by run_experiment_mm_raw.py.",
        f"export CUDA_VISIBLE_DEVICES='' PYTHONUNBUFFERED=1 {launcher.RUN_ID_VARIABLE}={RUN_ID}",
        "trap '' HUP",
        f"exec > >(exec tee -a {log}) 2>&1",
        "trap - HUP",
        "cd /repo || exit 1",
        f"exec {shlex.join(actor.argv)}",
    ]
    # A remote actor's output goes to its log by redirection (start_remote), not through tee.
    remote_script = run_plan.actors[2].script()
    assert "tee" not in remote_script
    assert remote_script.splitlines()[-2:] == [
        "cd /srv/impala || exit 1",
        f"exec {shlex.join(run_plan.actors[2].argv)}",
    ]
    launcher.write_script(actor)
    assert pathlib.Path(actor.script_path).read_text() == actor.script()
    assert os.stat(actor.script_path).st_mode & 0o777 == 0o755


def _local_launch(tmp_path, argv):
    return launcher.Launch(
        name="actor-0-0",
        worker=None,
        cwd=str(tmp_path),
        env={"PYTHONUNBUFFERED": "1"},
        argv=tuple(argv),
        script_path=str(tmp_path / "actor-0-0.sh"),
        log_path=str(tmp_path / "actor-0-0.log"),
    )


def test_the_worker_keeps_sighups_default(tmp_path):
    """The script ignores SIGHUP only while it forks the tee: the worker still ends on it."""
    launch = _local_launch(
        tmp_path,
        [
            sys.executable,
            "-c",
            "import signal; print(signal.getsignal(signal.SIGHUP) == signal.SIG_DFL)",
        ],
    )
    launcher.write_script(launch)
    subprocess.run(
        ["bash", launch.script_path],
        check=True,
        timeout=60,
        capture_output=True,
        # As in a tmux pane: bash cannot reset a SIGHUP ignored on entry (e.g. pytest under nohup).
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    assert launcher.local_tail(launch, timeout=60) == "True\n"


def test_wait_for_log_waits_for_a_tee_not_started_yet(tmp_path):
    """A subshell still named as the script (it has not exec'd tee yet) holds the worker's
    last lines: wait_for_log waits for it, as for the tee it becomes."""
    launch = _local_launch(tmp_path, ["true"])
    # Stands in for the late subshell: it writes the log a second after it starts.
    pathlib.Path(launch.script_path).write_text(f"sleep 1\necho 'last line' >> {launch.log_path}\n")
    late_subshell = subprocess.Popen(["bash", launch.script_path])
    try:
        assert launcher.local_tail(launch, timeout=60) == "last line\n"
    finally:
        late_subshell.kill()
        late_subshell.wait(timeout=60)


def test_each_local_client_and_the_mpirun_get_a_tmux_window_of_their_name(run_plan):
    tmux = FakeTmux()
    local = [launch for launch in run_plan.clients if not launch.is_remote]
    for launch in [*local, run_plan.mpirun]:
        launcher.open_window(tmux, SESSION, launch)
    assert tmux.window_names(SESSION) == ["actor-0-0", "actor-0-1", "evaluator-0", "learners"]
    first, *others = tmux.commands
    script = shlex.quote(local[0].script_path)
    assert first == (
        *("new-session", "-d", "-s", SESSION, "-n", "actor-0-0", f"exec bash {script}", ";"),
        *("set-option", "-w", "-t", f"{SESSION}:actor-0-0", "remain-on-exit", "on"),
    )
    for command, launch in zip(others, [*local[1:], run_plan.mpirun], strict=True):
        assert command[:7] == (
            *("new-window", "-d", "-t", f"{SESSION}:", "-n", launch.name),
            f"exec bash {shlex.quote(launch.script_path)}",
        )
    assert all(window.remain_on_exit for window in tmux.sessions[0].windows)


def test_open_window_names_what_tmux_refused(run_plan):
    tmux = FakeTmux()
    tmux.refuse = "duplicate session: impala"
    with pytest.raises(RuntimeError, match=r"^tmux new-session -d -s impala -n actor-0-0: dup"):
        launcher.open_window(tmux, SESSION, run_plan.actors[0])


def test_window_exit_status_running_exited_killed_or_not_reaped_yet(run_plan):
    tmux = FakeTmux()
    for launch in run_plan.actors[:2]:
        launcher.open_window(tmux, SESSION, launch)
    assert launcher.window_exit_status(tmux, SESSION, "actor-0-0") is None
    tmux.end(SESSION, "actor-0-0", status=3)
    assert launcher.window_exit_status(tmux, SESSION, "actor-0-0") == 3
    tmux.end(SESSION, "actor-0-0", signal=9)
    assert launcher.window_exit_status(tmux, SESSION, "actor-0-0") == -9
    # tmux missed the SIGCHLD: a child of its own run makes it reap the worker.
    tmux.end(SESSION, "actor-0-1", status=2, reaped=False)
    assert launcher.window_exit_status(tmux, SESSION, "actor-0-1") == 2
    assert tmux.commands[-1] == ("run-shell", "true")


def test_respawn_window_restarts_a_dead_window_reopens_a_closed_one_never_a_session(run_plan):
    tmux = FakeTmux()
    actor, other = run_plan.actors[:2]
    for launch in (actor, other):
        launcher.open_window(tmux, SESSION, launch)
    tmux.end(SESSION, actor.name, status=1)
    launcher.respawn_window(tmux, SESSION, actor)
    command = f"exec bash {shlex.quote(actor.script_path)}"
    assert tmux.commands[-1] == ("respawn-window", "-k", "-t", f"{SESSION}:actor-0-0", command)
    assert launcher.window_exit_status(tmux, SESSION, actor.name) is None

    tmux.close(SESSION, other.name)
    launcher.respawn_window(tmux, SESSION, other)
    assert tmux.commands[-1][:6] == ("new-window", "-d", "-t", f"{SESSION}:", "-n", other.name)
    assert tmux.window_names(SESSION) == ["actor-0-0", "actor-0-1"]

    tmux.refuse = "can't find window"
    with pytest.raises(RuntimeError, match=r"^tmux respawn-window actor-0-0: can't find window$"):
        launcher.respawn_window(tmux, SESSION, actor)
    tmux.refuse = None
    tmux.kill_session(SESSION)
    commands = len(tmux.commands)
    with pytest.raises(RuntimeError, match=r"^tmux session 'impala' is gone$"):
        launcher.respawn_window(tmux, SESSION, actor)
    assert len(tmux.commands) == commands and not tmux.has_session(SESSION)


class FakeSsh:
    """A paramiko.SSHClient whose commands answer `out` with exit status `status`."""

    def __init__(self, out, status=0):
        self.out, self.status, self.commands = out, status, []

    def exec_command(self, command, timeout):
        self.commands.append(command)
        return None, _Stream(self.out.encode(), self.status), _Stream(b"", self.status)


class _Stream:
    def __init__(self, data, status):
        self._data = data
        self.channel = self
        self._status = status

    def read(self):
        return self._data

    def recv_exit_status(self):
        return self._status


@pytest.mark.parametrize(
    "out, status",
    [
        ("running\n", None),
        ("0\n", 0),
        ("3\n", 3),
        ("137\n", -9),  # 128 + N: killed by signal N.
        ("unknown\n", "exited (exit status unknown)"),
    ],
)
def test_remote_exit_status_reads_what_the_waiting_parent_recorded(out, status):
    client = FakeSsh(out)
    assert launcher.remote_exit_status(client, 4242, RUN_ID, "/l/actor-0-0.status", 5) == status
    (command,) = client.commands
    # Only a process of this run counts as running: the PID may have been reused.
    assert "</proc/4242/environ" in command
    assert f"grep -qxF {launcher.RUN_ID_VARIABLE}={RUN_ID};" in command


class LocalShell:
    """A paramiko.SSHClient whose commands run in this host's /bin/sh (dash on Debian, the login
    shell useradd gives), to check what the remote commands do, not how they read."""

    def exec_command(self, command, timeout):
        done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, timeout=timeout)
        return None, _Stream(done.stdout, done.returncode), _Stream(done.stderr, done.returncode)


def test_remote_exit_status_in_a_real_shell(tmp_path):
    status_path = str(tmp_path / "actor-0-0.status")

    def exit_status(pid, run_id=RUN_ID):
        return launcher.remote_exit_status(LocalShell(), pid, run_id, status_path, 30)

    env = {**os.environ, launcher.RUN_ID_VARIABLE: RUN_ID}
    with subprocess.Popen(["sleep", "60"], env=env) as worker:
        try:
            assert exit_status(worker.pid) is None
            # The same PID counts as ended for another run: it may have been reused.
            assert exit_status(worker.pid, "other-run") == "exited (exit status unknown)"
        finally:
            worker.kill()
    pathlib.Path(status_path).write_text("137\n")
    assert exit_status(worker.pid) == -9


def test_remote_exit_status_names_a_failed_check():
    with pytest.raises(RuntimeError, match=r"^checking PID 7 failed \(exit status 1\): denied$"):
        launcher.remote_exit_status(FakeSsh("denied\n", status=1), 7, RUN_ID, "/s", 5)


@pytest.mark.parametrize(
    "error, description",
    [
        (paramiko.AuthenticationException("Authentication failed."), "authentication failed ("),
        (TimeoutError(), "timed out: no answer"),
        (ConnectionRefusedError(111, "Connection refused"), "cannot connect: "),
        (EOFError(), "cannot connect: the host closed the connection before SSH began"),
        (ValueError("odd"), "ValueError: odd"),
    ],
)
def test_describe_error_is_one_line_per_kind_of_failure(error, description):
    assert launcher.describe_error(error).startswith(description)
