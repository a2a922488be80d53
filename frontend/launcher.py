"""Starting and stopping workers: one bash script per worker, run in tmux or over SSH.

No command is typed into a shell: every worker gets a script under the run's launch directory,
LOGDIR/launch/, and is started by running that script:

    actor-I-J.sh / .log   actor J of worker set I (its --task is J); a remote actor also
                          leaves actor-I-J.status, its exit status, when it ends
    evaluator-I.sh / .log the evaluator of worker set I, if it has one, started as an actor is
    learner-I.sh / .log   the learner of worker set I, rank I of the one mpirun
    learners.sh / mpirun.log   that mpirun, started in the tmux window 'learners'
    cluster-I.txt         the addresses of worker set I (cluster_file.py), which its workers
                          read (--cluster_file): no command grows with the number of workers

A remote worker's files live at the same path on its own host. Every script `exec`s its worker,
so the worker keeps the script's PID and process group: killing a tmux window (SIGHUP to the
pane's process group; mpirun passes it on to its ranks) or the recorded process group of a remote
worker stops the worker itself, with no orphan left behind. Dead workers can be started again
the same way (`respawn_window`, `start_remote`), which is how the supervisor restarts them.
"""

import collections
import contextlib
import dataclasses
import io
import os
import posixpath
import shlex
import socket

import libtmux
import paramiko
import psutil

import cluster_file

# Exported to every worker; --stop checks it before killing a remote PID that may have been reused.
RUN_ID_VARIABLE = "IMPALA_RUN_ID"


@dataclasses.dataclass(frozen=True)
class ClusterFile:
    """A worker set's addresses (cluster_file.py), at the same path on every host."""

    path: str
    text: str = dataclasses.field(repr=False)


@dataclasses.dataclass(frozen=True)
class Launch:
    """One process to start: a worker, or the mpirun that starts all learners."""

    name: str  # 'actor-I-J', 'evaluator-I', 'learner-I' or 'learners': tmux window, files.
    worker: object  # The workers_csv.Worker it runs as; None for the mpirun.
    cwd: str
    env: dict
    argv: tuple
    script_path: str
    log_path: str
    cluster_file: ClusterFile | None = None  # Its worker set's, which it reads; None: mpirun.

    @property
    def is_remote(self):
        return self.worker is not None and not self.worker.is_local

    @property
    def to_terminal(self):
        """Whether its output also goes to a terminal: a tmux window, or mpirun's (a learner)."""
        return not (self.is_remote and self.worker.job != "learner")

    @property
    def status_path(self):
        """Where a remote worker's exit status goes when it ends (see start_remote)."""
        return exit_status_path(posixpath.dirname(self.log_path), self.name)

    @property
    def command(self):
        """The command as one shell line, for people to read."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"cd {shlex.quote(self.cwd)} && {env} {shlex.join(self.argv)}"

    def script(self):
        lines = ["#!/bin/bash", f"# {self.name}: written by run_experiment_mm_raw.py."]
        lines.append("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items()))
        if self.to_terminal:
            # Also to the log. tee is in the pane's process group, which gets SIGHUP when the
            # worker ends; tee ignores it to copy the worker's last lines, and ends at EOF.
            # Ignored before the fork: a subshell starved until the worker's end would die of it.
            lines.append("trap '' HUP")
            lines.append(f"exec > >(exec tee -a {shlex.quote(self.log_path)}) 2>&1")
            lines.append("trap - HUP")  # The worker keeps SIGHUP's default: it ends it.
        lines.append(f"cd {shlex.quote(self.cwd)} || exit 1")
        lines.append(f"exec {shlex.join(self.argv)}")  # The worker takes over this PID.
        return "\n".join(lines) + "\n"


@dataclasses.dataclass(frozen=True)
class Place:
    """Where workers run from on some host: the python to use and the repo dir (cwd)."""

    python: str
    repo_dir: str


@dataclasses.dataclass(frozen=True)
class Plan:
    actors: list  # Worker set by worker set, each set's in task order.
    evaluators: list  # Worker set by worker set, of the sets that have one.
    learners: list  # Rank i is the learner of worker set i.
    mpirun: Launch
    cluster_files: list  # File i holds the addresses of worker set i.

    @property
    def clients(self):
        """The learners' clients, each started on its own (tmux or SSH): actors and evaluators."""
        return [*self.actors, *self.evaluators]

    @property
    def all(self):
        return [*self.clients, *self.learners, self.mpirun]


def exit_status_path(launch_dir, name):
    """Where the remote worker `name` of the run whose launch directory is `launch_dir` (the same
    path on every host) has its exit status written when it ends (see start_remote)."""
    return posixpath.join(launch_dir, f"{name}.status")


def worker_launch(name, worker, task, cluster, flag_args, launch_dir, run_id, place):
    """Runs `worker` as task `task` of the worker set whose ClusterFile is `cluster`."""
    env = {
        "CUDA_VISIBLE_DEVICES": worker.cuda_visible_devices,  # Empty hides every GPU.
        "PYTHONUNBUFFERED": "1",  # Logs as they happen.
        RUN_ID_VARIABLE: run_id,
    }
    argv = (
        place.python,
        "experiment.py",
        f"--job_name={worker.job}",
        f"--task={task}",
        f"--cluster_file={cluster.path}",
        *flag_args,
    )
    path = posixpath.join(launch_dir, name)
    return Launch(name, worker, place.repo_dir, env, argv, f"{path}.sh", f"{path}.log", cluster)


def mpmd_argv(mpirun, as_root, ranks, options=()):
    """One MPMD mpirun: `mpirun [options] -np 1 -H host0 argv0... : -np 1 -H host1 ...`.

    Args:
      mpirun: path of mpirun.
      as_root: add --allow-run-as-root (Open MPI refuses root without it).
      ranks: one (host, argv) per rank, in rank order.
      options: more mpirun options.
    """
    argv = [mpirun, *["--allow-run-as-root"] * as_root, "--oversubscribe", "--bind-to", "none"]
    argv += options
    for rank, (host, rank_argv) in enumerate(ranks):
        argv += [":"] * bool(rank) + ["-np", "1", "-H", host, *rank_argv]
    return tuple(argv)


def mpirun_argv(mpirun, as_root, learners):
    """All learners' ranks: `mpirun ... -np 1 -H host bash learner-0.sh : ...`."""
    ranks = [
        (
            "localhost" if learner.worker.is_local else learner.worker.ip,
            ["bash", learner.script_path],
        )
        for learner in learners
    ]
    # --tag-output: '[1,rank]<stdout>:' on each line in the tmux window.
    return mpmd_argv(mpirun, as_root, ranks, options=["--tag-output"])


def plan(worker_sets, flag_args, launch_dir, run_id, local, remote, mpirun, as_root):
    """Every launch of the run; `local`/`remote` are the Places of this host and the others."""

    clusters = [
        ClusterFile(
            posixpath.join(launch_dir, f"cluster-{ws.index}.txt"),
            cluster_file.text(
                ws.learner.host,
                [actor.host for actor in ws.actors],
                ws.evaluator.host if ws.evaluator else None,
            ),
        )
        for ws in worker_sets
    ]

    def launch(name, worker, task, cluster):
        place = remote if not worker.is_local else local
        return worker_launch(name, worker, task, cluster, flag_args, launch_dir, run_id, place)

    actors = [
        launch(f"actor-{ws.index}-{task}", actor, task, cluster)
        for ws, cluster in zip(worker_sets, clusters, strict=True)
        for task, actor in enumerate(ws.actors)
    ]
    evaluators = [
        launch(f"evaluator-{ws.index}", ws.evaluator, 0, cluster)
        for ws, cluster in zip(worker_sets, clusters, strict=True)
        if ws.evaluator
    ]
    learners = [
        launch(f"learner-{ws.index}", ws.learner, 0, cluster)
        for ws, cluster in zip(worker_sets, clusters, strict=True)
    ]
    mpirun_launch = Launch(
        name="learners",
        worker=None,
        cwd=local.repo_dir,
        env={RUN_ID_VARIABLE: run_id},
        argv=mpirun_argv(mpirun, as_root, learners),
        script_path=posixpath.join(launch_dir, "learners.sh"),
        log_path=posixpath.join(launch_dir, "mpirun.log"),
    )
    return Plan(actors, evaluators, learners, mpirun_launch, clusters)


def write_script(launch):
    os.makedirs(os.path.dirname(launch.script_path), exist_ok=True)
    with open(launch.script_path, "w") as f:
        f.write(launch.script())
    os.chmod(launch.script_path, 0o755)


def write_cluster_files(plan):
    """Writes every worker set's cluster file on this host, once, for the workers here."""
    for cluster in plan.cluster_files:
        os.makedirs(os.path.dirname(cluster.path), exist_ok=True)
        with open(cluster.path, "w") as f:
            f.write(cluster.text)


# tmux: local workers, one window each.


def tmux_server(socket_name):
    return libtmux.Server(socket_name=socket_name or None)


def open_window(server, session_name, launch):
    """Runs `launch`'s script in a new window of `session_name`, creating the session if need be.

    The window stays open after the worker exits (remain-on-exit), so its last lines stay
    readable and its exit status can be read back. Creating the window and setting that option
    are one tmux call, done before the server's event loop could see the script exit. (Opening
    a shell first and replacing it would kill it in the middle of its rc files.)
    """
    command = f"exec bash {shlex.quote(launch.script_path)}"
    if server.has_session(session_name):
        create = ["new-window", "-d", "-t", f"{session_name}:", "-n", launch.name, command]
    else:
        create = ["new-session", "-d", "-s", session_name, "-n", launch.name, command]
    target = f"{session_name}:{launch.name}"
    result = server.cmd(*create, ";", "set-option", "-w", "-t", target, "remain-on-exit", "on")
    if result.stderr:
        raise RuntimeError(f"tmux {' '.join(create[:-1])}: {' '.join(result.stderr)}")


def respawn_window(server, session_name, launch):
    """Runs `launch`'s script again in its (dead) window; reopens the window if it was closed.

    Never creates the session: if it is gone (the run was stopped), this raises RuntimeError
    rather than start a worker nobody would stop.
    """
    session = server.sessions.get(session_name=session_name, default=None)
    if session is None:
        raise RuntimeError(f"tmux session {session_name!r} is gone")
    if session.windows.get(window_name=launch.name, default=None) is None:
        open_window(server, session_name, launch)
        return
    command = f"exec bash {shlex.quote(launch.script_path)}"
    # -k: kill whatever still runs in the pane. The window keeps remain-on-exit.
    result = server.cmd("respawn-window", "-k", "-t", f"{session_name}:{launch.name}", command)
    if result.stderr:
        raise RuntimeError(f"tmux respawn-window {launch.name}: {' '.join(result.stderr)}")


def window_exit_status(server, session_name, window_name):
    """None while the window's process runs, else its exit status (or -signal if killed)."""
    session = server.sessions.get(session_name=session_name)
    pane = session.windows.get(window_name=window_name).panes[0]
    if pane.pane_dead != "1":
        return None
    if not (pane.pane_dead_status or pane.pane_dead_signal):
        # tmux 3.3 sometimes misses a SIGCHLD: the worker stays an unreaped zombie, its status
        # unknown, until another child of the server exits. Run one, so tmux reaps both.
        server.cmd("run-shell", "true")
        pane.refresh()
    if pane.pane_dead_signal:
        return -int(pane.pane_dead_signal)
    return int(pane.pane_dead_status or 0)


def wait_for_log(launch, timeout):
    """Waits (at most `timeout` s) for the `tee` of `launch`, an ended local worker, to finish
    its log.

    A local worker's output reaches its log through `tee` (see Launch.script), which can still
    be copying the worker's last lines when the worker's death is seen, or not even be started:
    its subshell, still named as the script ("bash <script>"), holds them in the pipe until it
    execs tee (same PID).
    """
    subshell, tee = ["bash", launch.script_path], ("tee", [launch.log_path])
    writers = []
    for process in psutil.process_iter(["name", "cmdline"]):
        cmdline = process.info["cmdline"] or []
        if cmdline == subshell or (process.info["name"], cmdline[-1:]) == tee:
            writers.append(process)
    psutil.wait_procs(writers, timeout=timeout)


def local_tail(launch, lines=15, timeout=5):
    """The last `lines` lines of the log of `launch`, an ended local worker (once its `tee` is
    done)."""
    wait_for_log(launch, timeout)
    with open(launch.log_path, errors="replace") as f:
        return "".join(collections.deque(f, lines))


def stop_tmux_session(server, session_name, timeout):
    """Kills the session, then SIGKILLs whatever of its processes outlives it by `timeout` s.

    Returns (processes that were running, those that needed SIGKILL).
    """
    session = server.sessions.get(session_name=session_name)
    processes = []
    for pane in session.panes:
        if pane.pane_dead == "1":
            continue
        try:
            process = psutil.Process(int(pane.pane_pid))
            processes += [process, *process.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    session.kill()
    _, alive = psutil.wait_procs(processes, timeout=timeout)
    for process in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(alive, timeout=timeout)
    return processes, alive


# SSH: remote workers, each a detached process group.


class UnknownHostKeyError(paramiko.SSHException):
    pass


class NoSftpError(paramiko.SSHException):
    """A remote sshd without the SFTP subsystem, which uploading a worker's script needs."""


class HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Rejects host keys missing from the known_hosts files, or accepts them with a warning."""

    def __init__(self, accept, known_hosts_files, warn):
        self._accept = accept
        self._files = known_hosts_files
        self._warn = warn

    def missing_host_key(self, client, hostname, key):
        key_text = f"{key.get_name()} {key.fingerprint}"
        if self._accept:
            self._warn(f"WARNING: accepting the unknown host key of {hostname} ({key_text})")
            return
        # The host is named by whoever reports the error (with the row), once.
        raise UnknownHostKeyError(
            f"its host key ({key_text}) is not in {' or '.join(self._files)}; check it and add "
            "it there (e.g. ssh-keyscan -p PORT HOST >> FILE), or pass --accept_unknown_host_keys"
        )


def ssh_connect(worker, known_hosts, accept_unknown, timeout, warn):
    """An SSHClient logged in as `worker`'s row says; host keys checked against known_hosts.

    Only the row's own credential is tried (its key or password; the ssh-agent only when it has
    neither), so a wrong one fails clearly instead of silently falling back to another.
    """
    client = paramiko.SSHClient()
    files = ["/etc/ssh/ssh_known_hosts", os.path.expanduser(known_hosts)]
    for path in files:
        if os.path.isfile(path):
            client.load_system_host_keys(path)
    client.set_missing_host_key_policy(HostKeyPolicy(accept_unknown, files, warn))
    try:
        client.connect(
            worker.ip,
            port=worker.ssh_port,
            username=worker.ssh_username,
            password=worker.password or None,  # Also the passphrase of an encrypted key.
            key_filename=worker.ssh_key_path or None,
            allow_agent=not (worker.password or worker.ssh_key_path),
            look_for_keys=False,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
        )
    except TimeoutError:  # The socket's own text is just 'timed out'.
        client.close()
        raise TimeoutError(f"no answer within {timeout:g} s") from None
    except paramiko.SSHException as error:
        cause = negotiation_failure(client.get_transport(), timeout)
        client.close()
        if cause is None:
            raise
        raise cause from error
    return client


def negotiation_failure(transport, timeout):
    """Why SSH's key exchange never finished, which paramiko's own error ('No existing session')
    hides: still under way after `timeout` s, or the transport's saved error (e.g. a reset).
    None when it finished (e.g. the login itself failed)."""
    if transport is None or transport.initial_kex_done:
        return None
    if transport.is_active():
        return TimeoutError(f"no key exchange within {timeout:g} s")
    return transport.get_exception()


def describe_error(error):
    """A one-line reason for an SSH failure; never contains the credential, nor the host: the
    caller names the worker, its row and its host, once."""
    if isinstance(error, UnknownHostKeyError | NoSftpError):
        return str(error)
    if isinstance(error, paramiko.BadHostKeyException):
        return (
            f"its host key ({error.key.get_name()} {error.key.fingerprint}) does NOT match its "
            f"known_hosts entry ({error.expected_key.fingerprint}): refusing to connect (the "
            "host was reinstalled, or someone is in the middle)"
        )
    if isinstance(error, paramiko.AuthenticationException):
        return f"authentication failed ({error})"
    if isinstance(error, TimeoutError):
        detail = str(error)
        return detail if "timed out" in detail else f"timed out: {detail or 'no answer'}"
    if isinstance(error, paramiko.ssh_exception.NoValidConnectionsError):
        # One error per address tried, each naming the host: their causes only.
        causes = dict.fromkeys(e.strerror or str(e) for e in error.errors.values())
        return f"cannot connect: {'; '.join(causes)}"
    if isinstance(error, ConnectionError | socket.gaierror):
        return f"cannot connect: {error}"
    if isinstance(error, EOFError):  # paramiko's, bare: the socket ended before SSH began.
        return "cannot connect: the host closed the connection before SSH began"
    return f"{type(error).__name__}: {error}"


def ssh_run(client, command, timeout):
    """Runs `command` in the remote login shell; returns (exit status, stdout, stderr)."""
    try:
        _, stdout, stderr = client.exec_command(command, timeout=timeout)
        out = stdout.read().decode(errors="replace")
        err = stderr.read().decode(errors="replace")
    except TimeoutError:
        raise TimeoutError(f"no answer within {timeout} s to: {command}") from None
    return stdout.channel.recv_exit_status(), out, err


def _check(result, what):
    status, out, err = result
    if status != 0:
        raise RuntimeError(f"{what} failed (exit status {status}): {(err or out).strip()}")
    return out


def _open_sftp(client):
    """An SFTP session over `client`; NoSftpError if the host's sshd has none."""
    try:
        return client.open_sftp()
    except paramiko.SSHException:
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise  # The connection itself is gone, not a subsystem missing.
        raise NoSftpError(
            "its sshd offers no SFTP subsystem, needed to upload the worker script (add a "
            "'Subsystem sftp' line to its sshd_config)"
        ) from None


def upload_script(client, launch, timeout, with_cluster_file=True):
    """Uploads the script and its worker set's cluster file (unless `with_cluster_file` is False:
    uploaded through `client` already)."""
    directory = posixpath.dirname(launch.script_path)
    _check(ssh_run(client, f"mkdir -p {shlex.quote(directory)}", timeout), f"mkdir {directory}")
    with _open_sftp(client) as sftp:
        sftp.putfo(io.BytesIO(launch.script().encode()), launch.script_path)
        if with_cluster_file:
            # Replaced whole (renamed over), never rewritten where a worker may be reading it.
            cluster = launch.cluster_file
            sftp.putfo(io.BytesIO(cluster.text.encode()), f"{cluster.path}.tmp")
            sftp.posix_rename(f"{cluster.path}.tmp", cluster.path)


def start_remote(client, launch, timeout, with_cluster_file=True):
    """Uploads the script and starts it detached in a new session; returns its PID.

    `with_cluster_file`: upload the worker set's cluster file too (upload_script).

    setsid makes the worker the leader of its own session and process group (PGID = PID), so it
    outlives the SSH connection and --stop can kill the whole group. A small bash parent (in a
    session of its own too) waits for the worker and writes its exit status (128 + N if signal N
    killed it) to `launch.status_path`, for `remote_exit_status`.
    """
    upload_script(client, launch, timeout, with_cluster_file)
    script, log = shlex.quote(launch.script_path), shlex.quote(launch.log_path)
    status = shlex.quote(launch.status_path)
    # fd 3 carries the worker's PID back to this SSH command and is closed everywhere else, so
    # the command's output ends as soon as the PID is out.
    parent = (
        f"setsid bash {script} 3>&- </dev/null >>{log} 2>&1 & echo $! >&3; exec 3>&-; "
        f"wait $!; echo $? >{status}.tmp; mv -f {status}.tmp {status}"
    )
    command = (
        f"rm -f {status}; setsid bash -c {shlex.quote(parent)} 3>&1 </dev/null >/dev/null 2>&1 &"
    )
    return int(_check(ssh_run(client, command, timeout), f"starting {launch.script_path}"))


def remote_alive(client, pid, timeout):
    return ssh_run(client, f"kill -0 {pid}", timeout)[0] == 0


def _is_runs_worker(pid, run_id):
    """A shell test: true while PID `pid` is this run's worker (IMPALA_RUN_ID=run_id in its
    environment), false once it ended or its PID serves another process."""
    marker = shlex.quote(f"{RUN_ID_VARIABLE}={run_id}")
    return f"tr '\\0' '\\n' </proc/{pid}/environ 2>/dev/null | grep -qxF {marker}"


def _await_status(status_path):
    """A shell loop waiting (2 s at most) for `status_path`: the worker's waiting parent writes
    its exit status a moment after the worker ends."""
    status = shlex.quote(status_path)
    return f"for i in $(seq 20); do [ -e {status} ] && break; sleep 0.1; done; "


def remote_exit_status(client, pid, run_id, status_path, timeout):
    """None while this run's worker `pid` (started by start_remote) runs; else how it ended.

    Returns its exit status, or -N if signal N killed it (as window_exit_status does), or the
    string 'exited (exit status unknown)' when nothing recorded it (its waiting parent was killed
    too, or the host restarted). A PID now used by another process (no IMPALA_RUN_ID=run_id in
    its environment) counts as ended.
    """
    status = shlex.quote(status_path)
    command = (
        f"if {_is_runs_worker(pid, run_id)}; then echo running; exit 0; fi; "
        f"{_await_status(status_path)}[ -e {status} ] && cat {status} || echo unknown"
    )
    out = _check(ssh_run(client, command, timeout), f"checking PID {pid}").strip()
    if out == "running":
        return None
    if out.isdigit():
        code = int(out)
        return -(code - 128) if code > 128 else code
    return "exited (exit status unknown)"


def remote_tail(client, path, timeout, lines=15):
    return ssh_run(client, f"tail -n {lines} {shlex.quote(path)}", timeout)[1]


def stop_remote(client, pid, run_id, status_path, timeout, ssh_timeout):
    """Stops the process group `pid` if its leader is still this run's worker.

    SIGTERM, then SIGKILL after `timeout` s; then waits (2 s at most) for its waiting parent to
    write its exit status to `status_path`, so that nothing of the run writes after the stop.
    Returns 'stopped', 'killed' or 'not running'. `kill -s SIG -- -PGID`: the form every login
    shell's kill reads as a process group (dash's refuses `kill -SIG -- -PGID`).
    """
    status_written = _await_status(status_path)
    command = (
        f"if {_is_runs_worker(pid, run_id)}; then "
        f"kill -s TERM -- -{pid}; "
        f"for i in $(seq {int(timeout * 10)}); do "
        f"kill -s 0 -- -{pid} 2>/dev/null || {{ {status_written}echo stopped; exit 0; }}; "
        f"sleep 0.1; done; "
        f"kill -s KILL -- -{pid}; {status_written}echo killed; "
        "else echo 'not running'; fi"
    )
    return _check(ssh_run(client, command, timeout + ssh_timeout), f"stopping PID {pid}").strip()
