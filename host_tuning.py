"""How each worker uses its host: scheduling, cores, TF thread pools and memory allocator.

One entry call per role, before the role's first TF op, makes every choice and logs them in one
line (`<role> host tuning: ... | ... `, a refusal with its reason):
  tune_learner    the scheduling policy of the threads it starts from then on (--learner_realtime),
                  its share of the host's cores when other learners share it (--pin_learners),
                  its TF thread pools;
  tune_actor      its niceness (--actor_niceness) and TF thread pools;
  tune_evaluator  SCHED_IDLE and one thread in each TF pool;
and each logs its agent's torso dtype (torso_dtype: --torso_dtype, 'auto' by the host's CPU).
Before them, first thing in the process and before TensorFlow is imported, `use_allocator`
puts a worker on tcmalloc.

Why: the learner is the bottleneck of the default configuration. Its step's threads (TF's
kernel and inter-op pools) hand work to one another many times per minibatch, and a thread it
wakes that finds its core busy waits for it. So the learner gets a shared host's cores first and
the actors take the rest; learners sharing a host each keep a share of its cores of their own,
as they wait for one another at every minibatch's allreduce. Workers allocate and free large
short-lived buffers all the time (batches, activations, gradients, unrolls, parameters), which
tcmalloc reuses where glibc's malloc returns them to the kernel. The measurements behind each
choice: docs/performance.md.

TensorFlow is imported only where the pools are sized: this module is imported before it.
"""

import contextlib
import ctypes
import ctypes.util
import ipaddress
import os
import sys

from absl import logging

# The memory allocator.
TCMALLOC = "libtcmalloc_minimal.so.4"
ALLOCATOR_VARIABLE = "IMPALA_ALLOCATOR"  # "tcmalloc" (the default) or "glibc"
# Set on the re-executed process: a preload that failed is not retried forever.
_REEXECUTED_VARIABLE = "IMPALA_ALLOCATOR_REEXECUTED"
_M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3
_KEEP_BYTES = 1 << 30

# The kernel's real-time throttling: real-time threads get at most this many microseconds of
# every sched_rt_period_us on each core, the rest is left to normal ones; -1 disables it.
_RT_RUNTIME_PATH = "/proc/sys/kernel/sched_rt_runtime_us"
_REALTIME_PRIORITY = 1  # the lowest: above every normal thread, below the kernel's own.
# Flags of /proc/cpuinfo that say the CPU computes in bfloat16 itself (AVX-512 BF16, AMX).
NATIVE_BFLOAT16 = ("avx512_bf16", "amx_bf16")


def tune_learner(config, local_rank, learners_on_host, actors_on_host):
    """Tunes this learner, Horovod's local rank `local_rank` of the `learners_on_host` learners
    on its host, whose worker set's actors share the host if `actors_on_host`
    (actors_share_host); logs one line; returns whether its threads run under SCHED_FIFO.

    Call it after hvd.init() and before the first TF op: Horovod's threads, started by
    hvd.init(), keep the normal policy (its background thread polls with sched_yield while a
    rank waits for its peers, which under SCHED_FIFO would keep everything normal off that
    core), while TF's pools, created at the first op, inherit the real-time one and start on
    the learner's cores."""
    realtime, scheduling = raise_learner_priority(config.learner_realtime, actors_on_host)
    pools = size_thread_pools(thread_pools(config, "learner", learners_on_host, actors_on_host))
    _, cores = pin_learner(config.pin_learners, local_rank, learners_on_host)
    _log("learner", scheduling, cores, pools, torso_dtype(config.torso_dtype)[1])
    return realtime


def tune_actor(config):
    """Tunes this actor before it starts its TF and environment threads, which inherit its
    niceness (--actor_niceness); logs one line."""
    _log(
        "actor",
        lower_priority(config.actor_niceness),
        size_thread_pools(thread_pools(config, "actor")),
        torso_dtype(config.torso_dtype)[1],
    )


def tune_evaluator(config):
    """Tunes this evaluator before it starts its TF and environment threads, which inherit
    SCHED_IDLE: it runs only on CPU nothing else of the host wants, so that it cannot slow
    training; logs one line."""
    idle = run_when_idle()
    pools = size_thread_pools(thread_pools(config, "evaluator"))
    _log("evaluator", idle, pools, torso_dtype(config.torso_dtype)[1])


def _log(role, *choices):
    logging.info("%s host tuning: %s", role, " | ".join([*choices, allocator_choice()]))


def realtime_policy(setting, actors_on_host):
    """(whether a learner runs its threads under SCHED_FIFO, why) for --learner_realtime
    `setting`: 'on' always, 'off' never, 'auto' when `actors_on_host` (its worker set's actors
    share its host: the processes it must take the cores from first)."""
    if setting == "auto":
        if actors_on_host:
            return True, "its actors share this host"
        return False, "its actors run on other hosts"
    return setting == "on", f"--learner_realtime={setting}"


def _realtime_throttled():
    try:
        with open(_RT_RUNTIME_PATH) as f:
            return int(f.read()) > 0
    except (OSError, ValueError):
        return False


def raise_learner_priority(setting, actors_on_host):
    """Puts the calling thread, and with it every thread it starts from now on, under
    SCHED_FIFO at priority 1 if realtime_policy says so; returns (whether it did, the choice
    for the log line).

    Refused, with the reason in the choice, without CAP_SYS_NICE or without the kernel's
    real-time throttling (which keeps part of every core for normal threads even if a
    real-time one spins)."""
    wanted, reason = realtime_policy(setting, actors_on_host)
    if not wanted:
        return False, f"scheduling normal ({reason})"
    if not _realtime_throttled():
        return False, (
            f"scheduling normal (SCHED_FIFO needs the kernel's real-time throttling, and "
            f"{_RT_RUNTIME_PATH} is not positive)"
        )
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(_REALTIME_PRIORITY))
    except PermissionError:
        return False, "scheduling normal (SCHED_FIFO needs CAP_SYS_NICE)"
    return True, f"scheduling SCHED_FIFO priority {_REALTIME_PRIORITY} ({reason})"


def native_bfloat16(cpuinfo="/proc/cpuinfo"):
    """The flags of NATIVE_BFLOAT16 the first processor of `cpuinfo` has, in that order."""
    with open(cpuinfo) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "flags":
                return [flag for flag in NATIVE_BFLOAT16 if flag in value.split()]
    return []


def torso_dtype(setting, cpuinfo="/proc/cpuinfo"):
    """(the agent's torso dtype, the choice for the log line) for --torso_dtype `setting`:
    'auto' is bfloat16 where this host's CPU computes it natively (native_bfloat16)."""
    if setting != "auto":
        return setting, f"torso {setting} (--torso_dtype={setting})"
    flags = native_bfloat16(cpuinfo)
    if flags:
        return "bfloat16", f"torso bfloat16 (the CPU has {', '.join(flags)})"
    return "float32", "torso float32 (no native bfloat16 in the CPU)"


def run_when_idle():
    """Puts this process under SCHED_IDLE; returns the choice for the log line."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    return "scheduling SCHED_IDLE (only CPU nothing else wants)"


def lower_priority(niceness):
    """Adds `niceness` to this process's (os.nice), so that a learner on the same host gets the
    cores first while this process still gets every core no learner wants; returns the choice
    for the log line."""
    os.nice(niceness)
    return f"niceness {os.getpriority(os.PRIO_PROCESS, 0)} (--actor_niceness={niceness})"


def learner_cores(cores, local_rank, learners_on_host):
    """The cores learner `local_rank` of the `learners_on_host` learners on a host runs on: an
    equal, consecutive share of `cores` (the host's usable ones, sorted); all of them if there
    are more learners than cores (then none would get a core of its own)."""
    share = len(cores) // learners_on_host
    if share == 0:
        return list(cores)
    return list(cores[local_rank * share : (local_rank + 1) * share])


def pin_learner(enabled, local_rank, learners_on_host):
    """Restricts every thread of this learner's process, and every thread started from now on,
    to its share of the host's cores (learner_cores), if `enabled` and other learners share
    the host; returns (the cores it runs on, the choice for the log line).

    Call it before the first TF op, so that TF's pools start on those cores. Horovod's
    background thread is pinned too: left on every core, its polling while a rank waits for its
    peer would run on the other learner's core."""
    cores = sorted(os.sched_getaffinity(0))
    own = learner_cores(cores, local_rank, learners_on_host)
    if learners_on_host == 1:
        return cores, f"cores {cores} (the only learner on this host)"
    if not enabled:
        return cores, f"cores {cores} (--nopin_learners)"
    if own == cores:
        return cores, f"cores {cores} ({learners_on_host} learners on this host, more than cores)"
    for thread in os.listdir("/proc/self/task"):  # Linux keeps an affinity per thread.
        with contextlib.suppress(ProcessLookupError):  # A thread that has ended since.
            os.sched_setaffinity(int(thread), own)
    return own, f"cores {own} of {cores} ({learners_on_host} learners on this host)"


def actors_share_host(learner_host, actor_hosts):
    """Whether any of `actor_hosts` (HOST:PORT) runs on `learner_host`'s host: the same HOST, or
    both loopback. Names and addresses are not resolved: a host named one way for the learner
    and another way for an actor counts as another host."""
    import transport  # Imports TensorFlow, which this module must not at import.

    def host_of(address, flag_name):
        host = transport.parse_host_port(address, flag_name)[0].lower()
        try:
            return "loopback" if ipaddress.ip_address(host).is_loopback else host
        except ValueError:  # a name, not an address
            return "loopback" if host == "localhost" else host

    learner = host_of(learner_host, "learner_host")
    return any(host_of(address, "actor_hosts") == learner for address in actor_hosts)


def kernel_threads(config, job_name, learners_on_host=1, actors_on_host=False):
    """TF kernel (intra-op) threads of a worker: --intra_op_threads, or (0) its share of the
    cores it may run on, so that the workers sharing them do not preempt one another: 1 for
    an actor (its inference batch is too small to split, and the cores are its environments'
    and the learners'); for a learner the cores divided by `learners_on_host`, one fewer (at
    least 1) when `actors_on_host` (its worker set's actors share the host), as a kernel pool
    as wide as the cores splits every op and its threads then wait for one another's shards,
    CPU the actors lose. The evaluator always takes one: its games must not slow training."""
    if job_name == "evaluator":
        return 1
    if config.intra_op_threads:
        return config.intra_op_threads
    if job_name == "actor":
        return 1
    share = max(1, len(os.sched_getaffinity(0)) // learners_on_host)
    return max(1, share - 1) if actors_on_host else share


def scheduling_threads(job_name):
    """TF's inter-op (scheduling) threads of a worker; 0: TF's default, one per core.

    One for an actor or the evaluator: inference is a chain of small ops, which one thread runs
    in turn instead of handing each to a pool thread that must be woken. The learner's step
    has independent ops to run side by side."""
    return 0 if job_name == "learner" else 1


def thread_pools(config, job_name, learners_on_host=1, actors_on_host=False):
    """(kernel threads, scheduling threads) of a worker: kernel_threads, scheduling_threads."""
    return (
        kernel_threads(config, job_name, learners_on_host, actors_on_host),
        scheduling_threads(job_name),
    )


def size_thread_pools(pools):
    """Sizes this process's TF kernel and scheduling thread pools to `pools` (thread_pools';
    0: TF's default), before the process's first TF op; returns the choice for the log line."""
    import tensorflow as tf  # Here: the allocator must be chosen before TF is imported.

    tf.config.threading.set_intra_op_parallelism_threads(pools[0])
    tf.config.threading.set_inter_op_parallelism_threads(pools[1])
    return f"TF threads: {pools[0]} kernel, {pools[1] or 'default'} scheduling"


def tcmalloc_loaded():
    """Whether tcmalloc is mapped into this process."""
    try:
        with open("/proc/self/maps") as maps:
            return any("libtcmalloc" in line for line in maps)
    except OSError:
        return False


def _tcmalloc_installed():
    return ctypes.util.find_library("tcmalloc_minimal") is not None


def _wanted_allocator():
    wanted = os.environ.get(ALLOCATOR_VARIABLE, "tcmalloc")
    if wanted not in ("tcmalloc", "glibc"):
        sys.exit(f"{ALLOCATOR_VARIABLE}={wanted!r}: expected 'tcmalloc' or 'glibc'")
    return wanted


def use_allocator(reexecute):
    """Puts this process on tcmalloc if `reexecute` (an entry point: a worker, a benchmark):
    re-executes it (same PID, argv and environment) with tcmalloc in LD_PRELOAD, as the
    allocator must be in place before the first allocation; unless it is loaded already,
    IMPALA_ALLOCATOR=glibc, or tcmalloc is not installed. Otherwise (and in an importer: tests)
    glibc's malloc keeps freed memory (`keep_freed_memory`). Call it first thing, before
    TensorFlow is imported; returns the allocator's name ("tcmalloc" or "glibc") when it does
    not re-execute."""
    if tcmalloc_loaded():
        return "tcmalloc"
    wanted = _wanted_allocator()
    if (
        reexecute
        and wanted == "tcmalloc"
        and _tcmalloc_installed()
        and _REEXECUTED_VARIABLE not in os.environ
    ):
        preload = " ".join(filter(None, [os.environ.get("LD_PRELOAD"), TCMALLOC]))
        environment = dict(os.environ, LD_PRELOAD=preload, **{_REEXECUTED_VARIABLE: "1"})
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, sys.orig_argv, environment)
    keep_freed_memory()
    return "glibc"


def keep_freed_memory():
    """glibc's malloc set to keep freed memory for reuse.

    By default glibc serves each allocation above its mmap threshold with fresh pages from the
    kernel, and gives freed memory at the top of the heap back to the kernel, so every train
    step would fault its buffers' pages in again and the kernel clear them. With both
    thresholds at 1 GiB freed blocks stay in the heap and are reused. Returns False where the
    C library is not glibc.
    """
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl has no mallopt)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _KEEP_BYTES) and mallopt(_M_TRIM_THRESHOLD, _KEEP_BYTES))


def allocator_choice():
    """This process's allocator, and why when it is not tcmalloc, for the log line."""
    if tcmalloc_loaded():
        return "allocator tcmalloc"
    if os.environ.get(ALLOCATOR_VARIABLE, "tcmalloc") != "tcmalloc":
        reason = f"{ALLOCATOR_VARIABLE}={os.environ[ALLOCATOR_VARIABLE]}"
    elif not _tcmalloc_installed():
        reason = f"{TCMALLOC} is not installed"
    elif _REEXECUTED_VARIABLE in os.environ:
        reason = f"preloading {TCMALLOC} failed"
    else:
        reason = "not an entry point, which re-executes onto tcmalloc"
    return f"allocator glibc's malloc, keeping freed memory ({reason})"
