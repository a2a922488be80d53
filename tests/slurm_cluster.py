"""A one-node Slurm cluster for the Slurm launcher's tests: munged, slurmctld and slurmd of
Debian's `munge`, `slurmctld`, `slurmd` and `slurm-client` packages (scripts/setup.sh installs
them), run as this test's children with a configuration written to a temporary directory.

The node is `localhost`, with this machine's memory. It declares SLURM_CPUS CPUs whatever this
machine has (SlurmdParameters=config_overrides): a CPU is only a scheduling figure here, and a
run of a learner, two actors and an evaluator, one task each, shares this machine's cores just
as the other end-to-end tests' processes do. The daemons, and every process of every job (found
by the SLURM_CONF they inherit), are killed at the end, and the directory removed.

Het jobs are not run: on a single node slurmctld's backfill plans a het job's first component
on the whole node, and the other components then never fit beside it.
"""

import contextlib
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import psutil
import pytest

from tools import local_cluster

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "srun", "sinfo")
SLURM_CPUS = 8
START_TIMEOUT_SECS = 60


def skip_reason():
    """Why the cluster cannot run here (root, the packages), or None."""
    if os.geteuid() != 0:
        return "needs root to run slurmd"
    for tool in (*DAEMONS, *CLIENTS):
        if not shutil.which(tool):
            return f"{tool} is not installed (scripts/setup.sh installs Slurm and munge)"
    return None


def config(directory, ports):
    """slurm.conf's text: everything under `directory`, slurmctld and slurmd on `ports`."""
    memory_mib = psutil.virtual_memory().total // 2**20
    return "\n".join(
        [
            "ClusterName=impalatest",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ports[0]}",
            f"SlurmdPort={ports[1]}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={directory}/munge.socket",
            f"StateSaveLocation={directory}/state",
            f"SlurmdSpoolDir={directory}/spool",
            f"SlurmctldPidFile={directory}/slurmctld.pid",
            f"SlurmdPidFile={directory}/slurmd.pid",
            f"SlurmctldLogFile={directory}/slurmctld.log",
            f"SlurmdLogFile={directory}/slurmd.log",
            # No cgroups in a container: processes tracked by parentage, tasks not confined.
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerParameters=bf_interval=1",
            "MpiDefault=none",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            f"NodeName=localhost CPUs={SLURM_CPUS} RealMemory={memory_mib} State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


class Cluster:
    """The running cluster; `env` is what a Slurm client (and the frontend) needs."""

    def __init__(self):
        self.directory = pathlib.Path(tempfile.mkdtemp(prefix="slurm_"))
        self.conf = self.directory / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self._daemons = []
        for name in ("state", "spool"):
            (self.directory / name).mkdir()
        key = self.directory / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.conf.write_text(config(self.directory, local_cluster.free_ports(2)))

    def start(self):
        d = self.directory
        self._start(
            "munged",
            ["/usr/sbin/munged", "--foreground", "--force", f"--socket={d}/munge.socket"]
            + [f"--key-file={d}/munge.key", f"--log-file={d}/munged.log"]
            + [f"--pid-file={d}/munged.pid", f"--seed-file={d}/munged.seed"],
        )
        self._wait_for(lambda: (d / "munge.socket").exists(), "munged's socket")
        self._start("slurmctld", ["/usr/sbin/slurmctld", "-D", "-i"])
        self._start("slurmd", ["/usr/sbin/slurmd", "-D", "-N", "localhost"])
        self._wait_for(lambda: self.run("sinfo", "--noheader", "--format=%T") == "idle", "idle")

    def _start(self, name, argv):
        self._daemons.append(local_cluster.Process(argv, self.directory / f"{name}.out", self.env))

    def _wait_for(self, condition, what):
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while not condition():
            if time.monotonic() > deadline:
                logs = {p.name: p.read_text()[-2000:] for p in self.directory.glob("*.log")}
                raise AssertionError(f"no {what} after {START_TIMEOUT_SECS} s: {logs}")
            time.sleep(0.5)

    def run(self, *argv):
        """A Slurm client command's stdout, stripped ('' if it failed)."""
        result = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
        return result.stdout.strip() if result.returncode == 0 else ""

    def queue(self):
        """squeue's lines: the jobs not yet gone."""
        return self.run("squeue", "--noheader", "--format=%i %T")

    def processes(self):
        """Every process of this cluster: daemons, slurmstepd and jobs (their SLURM_CONF)."""
        found = []
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if process.environ().get("SLURM_CONF") == str(self.conf):
                    found.append(process)
        return found

    def close(self):
        self.run("scancel", "--full", "--user=root")
        for process in self._daemons:
            process.kill()
        for process in self.processes():
            with contextlib.suppress(psutil.Error):
                process.kill()
        shutil.rmtree(self.directory, ignore_errors=True)


def cluster_for_a_fixture():
    """Yields a started Cluster for a pytest fixture and closes it after. Where it cannot run
    the test is skipped; under CI, which runs as root with the packages, it fails."""
    reason = skip_reason()
    if reason and os.environ.get("CI"):
        pytest.fail(f"CI runs as root with Slurm installed and must run the Slurm tests: {reason}")
    if reason:
        pytest.skip(reason)
    cluster = Cluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
