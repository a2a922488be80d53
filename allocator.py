"""The workers' memory allocator: tcmalloc, preloaded by re-executing the process; else glibc's
malloc set to keep freed memory.

A worker allocates and frees large short-lived buffers all the time: the learner its batches,
activations and gradients (MBs each) at every step, its gRPC threads the unrolls and parameters
the actors send and fetch, the actors their unrolls. glibc's malloc, even with its thresholds
raised (`keep_freed_memory`), spent 2.5 % of a learner's CPU in `_int_malloc` alone in the
system against 0.7 % for the learner's step alone (perf). Under tcmalloc (gperftools' minimal
build, Debian's libtcmalloc-minimal4) 1 learner + 2 actors ran +7 % frames/s (7 interleaved
pairs, every pair faster; jemalloc: -4 % against tcmalloc), the learner's step alone the same
within the noise (bench/README.md).

The allocator must be in place before the first allocation, so `use_tcmalloc` re-executes the
process (same PID, argv and environment) with tcmalloc in LD_PRELOAD; entry points call it
first thing. IMPALA_ALLOCATOR=glibc keeps glibc's malloc.
"""

import ctypes
import ctypes.util
import os
import sys

TCMALLOC = "libtcmalloc_minimal.so.4"
ALLOCATOR_VARIABLE = "IMPALA_ALLOCATOR"  # "tcmalloc" (the default) or "glibc"
# Set on the re-executed process: a preload that failed is not retried forever.
_REEXECUTED_VARIABLE = "IMPALA_ALLOCATOR_REEXECUTED"

_M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3
_KEEP_BYTES = 1 << 30


def tcmalloc_loaded():
    """Whether tcmalloc is mapped into this process."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libtcmalloc" in line for line in maps)
    except OSError:
        return False


def _tcmalloc_installed():
    return ctypes.util.find_library("tcmalloc_minimal") is not None


def use_tcmalloc():
    """Makes this process run on tcmalloc: re-executes it with tcmalloc preloaded, unless it is
    loaded already, IMPALA_ALLOCATOR=glibc, or tcmalloc is not installed; in those cases glibc's
    malloc keeps freed memory (`keep_freed_memory`). Call it before anything else; returns the
    allocator's name ("tcmalloc" or "glibc") when it does not re-execute."""
    if tcmalloc_loaded():
        return "tcmalloc"
    wanted = os.environ.get(ALLOCATOR_VARIABLE, "tcmalloc")
    if wanted not in ("tcmalloc", "glibc"):
        sys.exit(f"{ALLOCATOR_VARIABLE}={wanted!r}: expected 'tcmalloc' or 'glibc'")
    if wanted == "tcmalloc" and _tcmalloc_installed() and _REEXECUTED_VARIABLE not in os.environ:
        preload = " ".join(filter(None, [os.environ.get("LD_PRELOAD"), TCMALLOC]))
        environment = dict(os.environ, LD_PRELOAD=preload, **{_REEXECUTED_VARIABLE: "1"})
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, sys.orig_argv, environment)
    keep_freed_memory()
    return "glibc"


def keep_freed_memory():
    """glibc's malloc set to keep freed memory for reuse.

    By default glibc serves each allocation above its mmap threshold (128 KiB, raised adaptively
    to at most 32 MiB) with fresh pages from the kernel, and gives freed memory at the top of
    the heap back to the kernel, so every train step faulted its buffers' pages in again and
    the kernel cleared them (13 % of a learner's CPU; ~6,000 page faults per default batch).
    With both thresholds at 1 GiB freed blocks stay in the heap and are reused (~20 faults per
    batch). Returns False where the C library is not glibc.
    """
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl has no mallopt)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES) and mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES))
