"""glibc's malloc set to keep freed memory for reuse, for TF's large short-lived tensors.

By default glibc serves each allocation above its mmap threshold (128 KiB, raised adaptively to
at most 32 MiB) with fresh pages from the kernel, and gives freed memory at the top of the heap
back to the kernel. A train step allocates and frees its batch, activations and gradients
(MBs each) anew at every step, so every step faults those pages in again and the kernel clears
them: 13 % of a learner's CPU in a perf profile (bench/README.md), ~6,000 page faults per
default batch. With both thresholds at 1 GiB, freed blocks stay in the heap and are reused:
~20 faults per batch (the learner's peak memory is unchanged; it no longer shrinks between
steps).
"""

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3
_KEEP_BYTES = 1 << 30


def keep_freed_memory():
    """Sets this process's malloc thresholds (above); False where the C library is not glibc."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl has no mallopt)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES) and mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES))
