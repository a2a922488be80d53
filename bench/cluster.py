"""Worker sets on this host for the benchmarks: experiment.py learners and actors as processes.

One learner runs alone (a single Horovod rank); several learners are the ranks of one MPMD
mpirun, as the frontend starts them. Actors are dealt round-robin to the worker sets. Every
process runs in its own process group with its own log file (tests/processes.py), and
`WorkerSets.close()` kills them all, children included, also when the benchmark fails.
"""

import contextlib
import os
import pathlib
import re
import sys
import time

import psutil
from absl import flags

import launcher
import training_flags
from tests import processes
from tests.netutil import free_ports

flags.DEFINE_float("max_load", 1.5, "Wait before each measurement until the 1-min load is below.")
flags.DEFINE_integer("load_wait_secs", 300, "Longest wait for --max_load per measurement.")
FLAGS = flags.FLAGS


def wait_for_quiet_machine():
    """Waits (bounded) for the 1-min load average to drop below --max_load; returns it.

    The machine may be shared: a measurement taken while other work runs says little.
    """
    deadline = time.monotonic() + FLAGS.load_wait_secs
    while os.getloadavg()[0] >= FLAGS.max_load and time.monotonic() < deadline:
        time.sleep(10)
    return round(os.getloadavg()[0], 2)


def forwarded_flags(overrides):
    """This process's training flags as `--name=value`, with `overrides` (name -> value) applied."""
    args = [
        arg
        for name, arg in zip(
            training_flags.TRAINING_FLAG_NAMES, training_flags.forwarded_flag_args(), strict=True
        )
        if name not in overrides
    ]
    return args + [f"--{name}={value}" for name, value in overrides.items()]


class WorkerSets:
    """`num_learners` worker sets sharing `num_actors` actors, started on loopback, free ports.

    Args:
      num_learners: learners (Horovod ranks); more than one runs under mpirun.
      num_actors: actors over all worker sets (at least one per learner).
      flag_args: training flags for every process (e.g. from `forwarded_flags`).
      log_dir: where `learners.log` and `actor-<i>-<j>.log` go.
    """

    def __init__(self, num_learners, num_actors, flag_args, log_dir):
        if not 1 <= num_learners <= num_actors:
            raise ValueError(
                f"{num_actors} actors for {num_learners} learners: every learner needs an actor"
            )
        log_dir = pathlib.Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.learners_log = log_dir / "learners.log"
        self.actors = []
        self.learners = None
        ports = iter(free_ports(num_learners + num_actors))
        clusters = []  # per worker set: its cluster flags and its number of actors
        for i in range(num_learners):
            learner_port = next(ports)
            actor_ports = [next(ports) for _ in range(i, num_actors, num_learners)]
            cluster_args = [
                f"--learner_host=127.0.0.1:{learner_port}",
                "--actor_hosts=" + ",".join(f"127.0.0.1:{p}" for p in actor_ports),
            ]
            clusters.append((cluster_args, len(actor_ports)))
        learner_argvs = [
            [sys.executable, processes.EXPERIMENT, *cluster_args, *flag_args, "--job_name=learner"]
            for cluster_args, _ in clusters
        ]
        try:
            if num_learners == 1:
                self.learners = processes.Process(learner_argvs[0], self.learners_log)
            else:
                self.learners = processes.Process(
                    launcher.mpmd_argv(
                        "mpirun", os.geteuid() == 0, [("localhost", a) for a in learner_argvs]
                    ),
                    self.learners_log,
                )
            for i, (cluster_args, set_actors) in enumerate(clusters):
                for task in range(set_actors):
                    argv = [sys.executable, processes.EXPERIMENT, *cluster_args, *flag_args]
                    argv += ["--job_name=actor", f"--task={task}"]
                    self.actors.append(processes.Process(argv, log_dir / f"actor-{i}-{task}.log"))
        except BaseException:
            self.close()
            raise

    def learner_log(self):
        return self.learners.log()

    def check_running(self):
        """Raises RuntimeError with the log's tail if any process has exited."""
        for process in [self.learners, *self.actors]:
            if process.popen.poll() is not None:
                raise RuntimeError(
                    f"{process.log_path.name}: exited with {process.popen.returncode}; log "
                    f"tail:\n{process.log()[-3000:]}"
                )

    def learner_processes(self):
        """psutil.Process of each learner (mpirun's ranks when there is more than one)."""
        return _experiment_processes(self.learners.popen.pid)

    def actor_processes(self):
        return [p for actor in self.actors for p in _experiment_processes(actor.popen.pid)]

    def close(self):
        """Kills every process group, then any rank that left mpirun's group."""
        started = [p for p in [*self.actors, self.learners] if p is not None]
        # psutil.Process objects, not PIDs: their kill() refuses a PID reused in the meantime.
        leftovers = [q for p in started for q in _experiment_processes(p.popen.pid)]
        for process in started:
            process.kill()
        for process in leftovers:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _experiment_processes(pid):
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


def peak_rss_mb(process):
    """Peak resident set size (VmHWM) of a live psutil.Process, in MiB."""
    status = pathlib.Path(f"/proc/{process.pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)[1]) / 1024
