"""allocator.keep_freed_memory: a freed large block is reused, not faulted in afresh."""

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
