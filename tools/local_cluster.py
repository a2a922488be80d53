"""Worker processes on this host: what the tests and the benchmarks start and always clean up.

  - `Process`: one child in its own process group, its output in a log file, waited for with a
    bound, killed with its children;
  - `free_ports`, `cluster_flags`: loopback addresses for a worker set, never fixed ports, and
    never one another caller on this host was just handed;
  - `WorkerSets`: learners (several: the ranks of one MPMD mpirun, as the frontend starts
    them) and actors dealt round-robin to them, each experiment.py in its own process.

It ships (rather than living under tests/) because the benchmarks use it too, and it is the
shortest way to start a whole local run from Python.
"""

import contextlib
import fcntl
import json
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil

from frontend import launcher, slurm_hosts

REPO = pathlib.Path(__file__).resolve().parent.parent
EXPERIMENT = str(REPO / "experiment.py")


class TerminatedError(SystemExit):
    """This process got SIGTERM or SIGHUP (raised so that `with WorkerSets(...)` cleans up)."""


def exit_cleanly_on_termination():
    """Turns SIGTERM and SIGHUP into a TerminatedError in the main thread.

    By default they end a Python process at once, skipping `finally` and `__exit__`, which
    would leave its workers (in process groups of their own) training on as orphans; `timeout`,
    batch schedulers and closed terminals send exactly these.
    """

    def terminate(signum, _frame):
        raise TerminatedError(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, terminate)


EPHEMERAL_PORT_RANGE = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range")
# The lowest port free_ports hands out: above the registered services most hosts run.
LOWEST_FREE_PORT = 10000


def ephemeral_ports():
    """The `(low, high)` source ports the kernel gives outgoing connections (Linux defaults
    if /proc does not say)."""
    try:
        low, high = map(int, EPHEMERAL_PORT_RANGE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


# The ports free_ports handed out lately, host-wide: concurrent callers (the suite's pytest
# workers, a benchmark beside them) draw from one range, and a port stays free until its server
# binds it, seconds later.
PORT_CLAIMS = pathlib.Path(tempfile.gettempdir(), f"impala-free-ports-{os.getuid()}.json")
# Longer than any test's or benchmark's servers take to bind, or to bind again after a restart.
PORT_CLAIM_SECS = 2 * 3600


@contextlib.contextmanager
def _port_claims():
    """The host's unexpired claims, {port: unix time}, under an exclusive lock on PORT_CLAIMS;
    what the caller adds is written back."""
    with open(PORT_CLAIMS, "a+") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # released when the file closes
        file.seek(0)
        try:
            claims = {int(port): t for port, t in json.loads(file.read() or "{}").items()}
        except ValueError:  # a write cut short: start afresh, each port is still bound once first
            claims = {}
        now = time.time()
        claims = {port: t for port, t in claims.items() if now - t < PORT_CLAIM_SECS}
        yield claims
        file.seek(0)
        file.truncate()
        file.write(json.dumps(claims))


def free_ports(count, attempts=1000):
    """`count` distinct TCP ports that were free on 127.0.0.1 a moment ago and that no caller on
    this host was handed in the last PORT_CLAIM_SECS.

    They lie below the kernel's ephemeral range: a port the kernel picked for `bind(port 0)`
    can be handed out again as the source port of any outgoing connection (an actor polling
    its learner, a gRPC channel) before our server binds it, and the server then fails with
    "address in use". They lie below the Slurm jobs' TF ports too, which a job on this host
    takes by its id without asking (frontend/slurm_hosts.py). Ports are drawn at random, each
    is bound once to check that no one listens on it, and the ones handed out are claimed in
    PORT_CLAIMS, which concurrent callers skip.
    """
    low, _ = ephemeral_ports()
    high = min(low, slurm_hosts.PORT_BASE)
    if high - LOWEST_FREE_PORT < 100 * count:
        raise RuntimeError(
            f"{EPHEMERAL_PORT_RANGE}: the ephemeral range starts at {low}, leaving too few "
            f"ports in [{LOWEST_FREE_PORT}, {high}) for {count} servers"
        )
    draw = random.Random()  # seeded from the OS: concurrent test processes differ
    with _port_claims() as claims:
        ports = _bindable_ports(count, attempts, draw, high, skip=claims)
        claims.update(dict.fromkeys(ports, time.time()))
    return ports


def _bindable_ports(count, attempts, draw, high, skip):
    """`count` distinct ports of [LOWEST_FREE_PORT, high) not in `skip` that 127.0.0.1 binds."""
    sockets = {}
    try:
        for _ in range(attempts):
            port = draw.randrange(LOWEST_FREE_PORT, high)
            if port in sockets or port in skip:
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            sockets[port] = s
            if len(sockets) == count:
                return list(sockets)
        raise RuntimeError(f"found {len(sockets)} of {count} free ports in {attempts} draws")
    finally:
        for s in sockets.values():
            with contextlib.suppress(OSError):
                s.close()


def cluster_flags(num_actors, evaluator=False):
    """`--learner_host` and `--actor_hosts` (and `--evaluator_host`) of one worker set on free
    loopback ports."""
    learner_port, *actor_ports = free_ports(1 + num_actors + evaluator)
    flags = [f"--learner_host=127.0.0.1:{learner_port}"]
    if evaluator:
        flags.append(f"--evaluator_host=127.0.0.1:{actor_ports.pop()}")
    return [*flags, "--actor_hosts=" + ",".join(f"127.0.0.1:{p}" for p in actor_ports)]


class Process:
    """One child process whose stdout+stderr go to `log_path`."""

    def __init__(self, argv, log_path, env=None):
        self.log_path = pathlib.Path(log_path)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in kill()/wait().
        child_env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
        child_env.update(env or {})
        self.popen = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=child_env,
            start_new_session=True,  # its own process group: kill() reaches its children too
        )

    def log(self):
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout):
        """Exit code; raises AssertionError (with the log's tail) if still running at timeout."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.popen.args[:4]}... still running after {timeout} s; log tail:\n"
                + self.log()[-3000:]
            ) from None
        finally:
            self._log.flush()

    def wait_for_log(self, text, timeout, count=1):
        """Waits (bounded) until `text` is `count` times in the log; fails early on exit."""
        deadline = time.monotonic() + timeout
        while self.log().count(text) < count:
            finished = self.popen.poll() is not None
            if finished or time.monotonic() > deadline:
                if self.log().count(text) >= count:  # written just before it exited
                    return
                state = "exited" if finished else f"still running after {timeout} s"
                raise AssertionError(
                    f"{text!r} not {count}x in the log ({state}); tail:\n{self.log()[-3000:]}"
                )
            time.sleep(0.5)

    def signal(self, signum):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signum)

    def kill(self):
        self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        self._log.close()


class WorkerSets:
    """`num_learners` worker sets sharing `num_actors` actors, started on loopback, free ports.

    One learner runs alone (a single Horovod rank); several are the ranks of one MPMD mpirun.
    Actor k joins worker set k % num_learners, as the frontend deals them; with `evaluator`,
    worker set 0 has an evaluator too.

    Args:
      num_learners: learners (Horovod ranks).
      num_actors: actors over all worker sets (at least one per learner).
      flag_args: training flags for every process (e.g. `config.flag_args(config)`).
      log_dir: where `learners.log`, `actor-<i>-<j>.log` and `evaluator.log` go.
      evaluator: whether worker set 0 has an evaluator.
    """

    def __init__(self, num_learners, num_actors, flag_args, log_dir, evaluator=False):
        if not 1 <= num_learners <= num_actors:
            raise ValueError(
                f"{num_actors} actors for {num_learners} learners: every learner needs an actor"
            )
        log_dir = pathlib.Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.learners_log = log_dir / "learners.log"
        self.actors = []
        self.learners = None
        self.evaluator = None
        # Per worker set: its cluster flags and its number of actors.
        clusters = [
            (cluster_flags(len(range(i, num_actors, num_learners)), evaluator and i == 0), i)
            for i in range(num_learners)
        ]
        learner_argvs = [
            [sys.executable, EXPERIMENT, *cluster, *flag_args, "--job_name=learner"]
            for cluster, _ in clusters
        ]
        try:
            if num_learners == 1:
                self.learners = Process(learner_argvs[0], self.learners_log)
            else:
                argv = launcher.mpmd_argv(
                    "mpirun", os.geteuid() == 0, [("localhost", a) for a in learner_argvs]
                )
                self.learners = Process(argv, self.learners_log)
            for cluster, i in clusters:
                for task in range(len(range(i, num_actors, num_learners))):
                    argv = [sys.executable, EXPERIMENT, *cluster, *flag_args]
                    argv += ["--job_name=actor", f"--task={task}"]
                    self.actors.append(Process(argv, log_dir / f"actor-{i}-{task}.log"))
            if evaluator:
                argv = [sys.executable, EXPERIMENT, *clusters[0][0], *flag_args]
                self.evaluator = Process([*argv, "--job_name=evaluator"], log_dir / "evaluator.log")
        except BaseException:
            self.close()
            raise

    def learner_log(self):
        return self.learners.log()

    def check_running(self):
        """Raises RuntimeError with the log's tail if any process has exited."""
        for process in self._started():
            if process.popen.poll() is not None:
                raise RuntimeError(
                    f"{process.log_path.name}: exited with {process.popen.returncode}; log "
                    f"tail:\n{process.log()[-3000:]}"
                )

    def _started(self):
        return [p for p in [self.learners, *self.actors, self.evaluator] if p is not None]

    def learner_processes(self):
        """psutil.Process of each learner (mpirun's ranks when there is more than one)."""
        return experiment_processes(self.learners.popen.pid)

    def actor_processes(self):
        return [p for actor in self.actors for p in experiment_processes(actor.popen.pid)]

    def pause(self):
        """Stops every worker (SIGSTOP; mpirun itself runs on): none runs until resume(). A
        benchmark times other work on the same cores in between."""
        self._signal_workers(signal.SIGSTOP)

    def resume(self):
        self._signal_workers(signal.SIGCONT)

    def _signal_workers(self, signum):
        for process in [*self.learner_processes(), *self.actor_processes()]:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signum)

    def close(self):
        """Kills every process group, then any rank that left mpirun's group."""
        started = self._started()
        # psutil.Process objects, not PIDs: their kill() refuses a PID reused in the meantime.
        leftovers = [q for p in started for q in experiment_processes(p.popen.pid)]
        for process in started:
            process.kill()
        for process in leftovers:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def run_processes(run_id):
    """Every process on this machine (namespaces included) the frontend started for the run
    `run_id` (its launch scripts export it): what the tests and bench/chaos.py look for."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get(launcher.RUN_ID_VARIABLE) == run_id:
                found.append(process)
    return found


def experiment_processes(pid):
    """psutil.Process of `pid` and of its descendants that run experiment.py."""
    try:
        root = psutil.Process(pid)
        candidates = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    found = []
    for process in candidates:
        with contextlib.suppress(psutil.NoSuchProcess):
            if any(arg.endswith("experiment.py") for arg in process.cmdline()):
                found.append(process)
    return found
