"""What the frontend tests share: the frontend run as users run it, the workers CSVs they
give it, and what they check of a run.

Most runs use tests/fake_worker.py as experiment.py (no TensorFlow: seconds, not minutes): its
learner prints each actor's hello, which shows the worker sets were wired as planned. Processes
of a run are found by the IMPALA_RUN_ID its launch scripts export; `undo_run` stops a run and
kills anything left of it by PID. The fixtures that start runs (`runs`, `follows`) and remote
hosts (`hosts`) are in conftest.py.
"""

import contextlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import libtmux
import psutil

from frontend import launcher
from tools.local_cluster import free_ports, run_processes

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


def remote_csv(path, hosts, *logins):
    """One learner on this host's end of hosts[0]'s veth; actor i in hosts[i] as logins[i].

    logins: (user, password, key) per actor.
    """
    ports = free_ports(1 + len(logins))
    rows = [("learner", hosts.hosts[0].host_ip, ports[0])]
    for host, (user, password, key), port in zip(hosts.hosts, logins, ports[1:], strict=False):
        rows.append(("actor", host.ip, port, "", host.ssh_port, user, password, key))
    return write_csv(path, rows), ports


# A short training run of the real experiment.py (its learners' mpirun needs Horovod).
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


# --follow: the frontend supervising its run (supervisor.py).


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
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.popen.wait(timeout=timeout)
        raise AssertionError(f"frontend still running after {timeout} s:\n{self.out()[-5000:]}")


def follow_fake_run(follows, tmp_path, logdir, *flags):
    """The frontend following a run of fake workers (120 s at most), once it says it follows."""
    following = follows(logdir, *fake_run_flags(tmp_path, 120_000), *flags)
    following.wait_for("^Following ", 60)
    return following


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
