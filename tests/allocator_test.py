"""allocator: a freed large block is reused, not faulted in afresh (glibc); workers re-execute
themselves on tcmalloc."""

import os
import subprocess
import sys
import textwrap

import local_cluster

_REPEATED_ALLOCATIONS = """
import resource
import numpy as np
import allocator
if {keep}:
    assert allocator.keep_freed_memory()
# 64 MiB, above glibc's largest adaptive mmap threshold (32 MiB): by default each such block
# is mapped afresh and its pages faulted in (and cleared by the kernel) at first touch.
np.ones(1 << 23).sum()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    np.ones(1 << 23).sum()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults_of_ten_allocations(keep):
    """Minor page faults of ten allocate-touch-free cycles of 64 MiB, in a fresh process."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_REPEATED_ALLOCATIONS.format(keep=keep))],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(result.stdout)


def test_freed_large_blocks_are_reused_instead_of_faulted_in_again():
    default, kept = page_faults_of_ten_allocations(False), page_faults_of_ten_allocations(True)
    # By default every cycle faults the block in again (16,384 4-KiB pages; fewer with
    # transparent huge pages); kept, the first block's pages serve all ten.
    assert default >= 10 * 32, default
    assert kept < default / 10, (kept, default)


_ALLOCATOR_OF_THIS_PROCESS = """
import os
import allocator
print(os.getpid(), allocator.use_tcmalloc(), allocator.tcmalloc_loaded())
"""


def allocator_of_a_process(**environment):
    """(PID seen by the caller, PID printed after use_tcmalloc, its answer, tcmalloc mapped) of a
    fresh process that calls allocator.use_tcmalloc() first thing."""
    process = subprocess.Popen(
        [sys.executable, "-c", _ALLOCATOR_OF_THIS_PROCESS],
        cwd=local_cluster.REPO,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, **environment),
    )
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    pid, name, loaded = output.split()
    return process.pid, int(pid), name, loaded == "True"


def test_a_worker_re_executes_itself_on_tcmalloc_keeping_its_pid():
    caller_pid, own_pid, name, loaded = allocator_of_a_process()
    # The same process (mpirun, tmux and the supervisor know workers by PID), now on tcmalloc.
    assert (own_pid, name, loaded) == (caller_pid, "tcmalloc", True)


def test_impala_allocator_glibc_keeps_glibc():
    _, _, name, loaded = allocator_of_a_process(IMPALA_ALLOCATOR="glibc")
    assert (name, loaded) == ("glibc", False)


def test_the_entry_point_logs_its_allocator():
    result = subprocess.run(
        [sys.executable, "experiment.py", "--mode=test", "--logdir=/nonexistent/impala"],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2  # no checkpoint there: a usage error, after the log line
    assert "memory allocator: tcmalloc" in result.stderr, result.stderr[-2000:]
