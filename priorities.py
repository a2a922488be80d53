"""Who gets a shared host's cores first: the learner, the bottleneck; actors take the rest.
And which cores: several learners on one host each keep a share of them to themselves.

Alone, the default learner's step keeps ~1.8 of 2 cores busy, its threads (TF's kernel and
inter-op pools) handing work to one another many times per minibatch. Beside any other
runnable process under the normal policy it loses about twice that process's CPU: a thread it
wakes finds its core busy and waits for it. Measured (bench/README.md): a spinning process at
SCHED_IDLE beside the learner's batch step cut its batches per second by 16 % (6.8-7.3 alone,
5.7-6.2 beside it); under SCHED_FIFO the step made 7.4 beside a spinning process. Hence:
  - an actor lowers its niceness (--actor_niceness) before it starts its threads; the
    evaluator runs under SCHED_IDLE, on CPU nothing else wants;
  - a learner puts the threads it starts from then on under SCHED_FIFO (--learner_realtime),
    so that a waking learner thread takes its core at once and actors run on what it leaves;
  - learners sharing a host each run on a share of its cores of their own (--pin_learners):
    they meet at every minibatch's allreduce, and a learner whose threads the other's had
    pushed off a core made both wait (2 learners + 2 actors on 2 cores: +10 % frames/s).
"""

import contextlib
import os

from absl import logging

# The kernel's real-time throttling: real-time threads get at most this many microseconds of
# every sched_rt_period_us (by default 950000 of 1000000) on each core; -1 disables it.
_RT_RUNTIME_PATH = "/proc/sys/kernel/sched_rt_runtime_us"
_REALTIME_PRIORITY = 1  # the lowest: above every normal thread, below the kernel's own.


def run_when_idle(worker):
    """Puts this `worker` (the evaluator) under SCHED_IDLE before it starts its TF and
    environment threads, which inherit it: it runs only on CPU that nothing else of the host
    wants, so that it cannot slow training."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    logging.info("%s: SCHED_IDLE scheduling (only CPU nothing else wants)", worker)


def lower_priority(worker, niceness):
    """Adds `niceness` to this `worker`'s (an actor, the evaluator; os.nice) before it starts its
    TF and environment threads, which inherit it: a learner on the same host gets the cores
    first, and the worker still gets every core that no learner wants."""
    os.nice(niceness)
    logging.info("%s: niceness %d", worker, os.getpriority(os.PRIO_PROCESS, 0))


def _realtime_throttled():
    try:
        with open(_RT_RUNTIME_PATH) as f:
            return int(f.read()) > 0
    except (OSError, ValueError):
        return False


def raise_learner_priority(enabled):
    """Puts the calling thread, and with it every thread it starts from now on, under
    SCHED_FIFO at priority 1 (if `enabled`); returns whether it did.

    Call it after hvd.init() and before the first TF op: Horovod's threads, started by
    hvd.init(), keep the normal policy (its background thread polls with sched_yield while a
    rank waits for its peers, which under SCHED_FIFO would keep everything normal off that
    core), while TF's pools, created at the first op, inherit the real-time one. Refused, with
    a log line saying why, without CAP_SYS_NICE or without the kernel's real-time throttling
    (which keeps 5 % of every core for normal threads even if a real-time one spins).
    """
    if not enabled:
        return False
    if not _realtime_throttled():
        logging.info(
            "learner: keeps the normal scheduling policy: the kernel's real-time throttling is "
            "off (%s is not positive), and without it a real-time learner could take every core",
            _RT_RUNTIME_PATH,
        )
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(_REALTIME_PRIORITY))
    except PermissionError:
        logging.info(
            "learner: keeps the normal scheduling policy: SCHED_FIFO needs CAP_SYS_NICE "
            "(--learner_realtime=false says this is meant)"
        )
        return False
    logging.info("learner: real-time scheduling, SCHED_FIFO priority %d", _REALTIME_PRIORITY)
    return True


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
    the host; returns the cores it runs on.

    Call it after hvd.init() and before the first TF op, so that TF's pools start on those
    cores (and size themselves to them). Horovod's background thread is pinned too: left on
    every core, its polling while a rank waits for its peer ran on the other learner's core
    (2 learners + 2 actors on 2 cores: +10 % frames/s with it pinned, +1 % without).
    """
    cores = sorted(os.sched_getaffinity(0))
    own = learner_cores(cores, local_rank, learners_on_host)
    if not enabled or own == cores:
        return cores
    for thread in os.listdir("/proc/self/task"):  # Linux keeps an affinity per thread.
        with contextlib.suppress(ProcessLookupError):  # A thread that has ended since.
            os.sched_setaffinity(int(thread), own)
    logging.info(
        "learner: runs on cores %s of %s, its share with %d learners on this host",
        own,
        cores,
        learners_on_host,
    )
    return own
