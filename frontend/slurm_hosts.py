"""Inside a Slurm job: on which host each task of the job (or of one het-job component) runs,
and the TF ports the job's workers take, all from the job's environment.

Slurm hands a job its nodes as a compressed list (SLURM_JOB_NODELIST, `node[01-03],gpu7`) and its
tasks per node as a compressed count (SLURM_TASKS_PER_NODE, `2(x2),1`: two tasks on each of the
first two nodes, one on the third); a het job's component k has the same variables with the
suffix `_HET_GROUP_k`. Tasks fill the nodes in order (Slurm's default block distribution), so
task i runs on the node of the i-th slot.
"""

import re
import subprocess

# The TF ports of a job: a block of `workers` ports from PORT_BASE, placed by the job's id so
# that jobs with neighbouring ids (running at the same time, maybe on one node) get disjoint
# blocks; ids wrap around after PORT_SPAN // workers jobs. Below Linux's ephemeral ports
# (32768 on, by default), which the system hands out to outgoing connections.
PORT_BASE = 20000
PORT_SPAN = 12000

_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


class SlurmEnvironmentError(RuntimeError):
    """The job's environment lacks a variable, or holds one Slurm would not write."""


def suffix(group):
    """The variables' suffix for het-job component `group`; '' (None) for a homogeneous job."""
    return "" if group is None else f"_HET_GROUP_{group}"


def variable(environ, name, group=None):
    """The value of Slurm's variable `name` (of het-job component `group`, unless None)."""
    key = name + suffix(group)
    if key not in environ:
        raise SlurmEnvironmentError(f"${key} is not set: not inside a Slurm job (or component)?")
    return environ[key]


def tasks_per_node(text):
    """`2(x2),1` -> [2, 2, 1]: the tasks on each node, in node order."""
    counts = []
    for part in text.split(","):
        match = _COUNT.match(part.strip())
        if match is None:
            raise SlurmEnvironmentError(f"{text!r} is not a tasks-per-node list like 2(x3),1")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def expand_nodelist(nodelist):
    """`node[01-02],gpu7` -> ['node01', 'node02', 'gpu7'], by Slurm's own `scontrol`."""
    result = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
    )
    return result.stdout.split()


def task_hosts(environ, group=None):
    """The host of each task of the job (or of het-job component `group`), in task order."""
    nodes = expand_nodelist(variable(environ, "SLURM_JOB_NODELIST", group))
    counts = tasks_per_node(variable(environ, "SLURM_TASKS_PER_NODE", group))
    if len(counts) != len(nodes):
        raise SlurmEnvironmentError(f"{len(nodes)} nodes but tasks for {len(counts)}: {counts}")
    return [node for node, count in zip(nodes, counts, strict=True) for _ in range(count)]


def first_port(environ, workers):
    """The first of the job's `workers` TF ports (one per worker, consecutive)."""
    job_id = int(variable(environ, "SLURM_JOB_ID"))
    return PORT_BASE + (job_id % (PORT_SPAN // workers)) * workers
