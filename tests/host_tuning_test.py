"""host_tuning.py: the learner's real-time policy (auto/on/off) for the threads it starts, and its
refusals; the learners' shares of a host's cores; the workers' TF thread pools; the memory
allocator (a freed large block reused, workers re-executed on tcmalloc); one log line per role.

Each case that changes a scheduling policy or an affinity runs in a Python process of its own: a
thread's policy cannot be undone by an unprivileged thread, and the test process must keep its
own."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import config
import host_tuning
from tools import local_cluster

# Starts a thread (as hvd.init() starts Horovod's), makes {call}, starts another (as TF starts
# its pools), prints what the call returned and {inspect} of each thread (0: the main one).
_CHILD = """
import json, os, threading
from absl import logging as absl_logging
absl_logging.set_verbosity(absl_logging.INFO)
import config
import host_tuning

def started_thread():
    ready, ids = threading.Event(), []
    threading.Thread(target=lambda: (ids.append(threading.get_native_id()), ready.set(),
                                     threading.Event().wait()), daemon=True).start()
    ready.wait(10)
    return ids[0]

before = started_thread()
result = {call}
after = started_thread()
inspect = {inspect}
print(json.dumps({{"result": result, "main": inspect(0), "before": inspect(before),
                  "after": inspect(after)}}))
"""


def run_child(call, inspect, prefix=()):
    result = subprocess.run(
        [*prefix, sys.executable, "-c", _CHILD.format(call=call, inspect=inspect)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=local_cluster.REPO,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def run_raising_child(setting, actors_on_host, prefix=()):
    """raise_learner_priority(setting, actors_on_host) -> {"result": [whether, the choice], and
    each thread's scheduling policy}."""
    return run_child(
        f"host_tuning.raise_learner_priority({setting!r}, {actors_on_host})",
        "os.sched_getscheduler",
        prefix,
    )


@pytest.mark.parametrize(
    "setting, actors_on_host, expected",
    [
        ("auto", True, (True, "its actors share this host")),
        ("auto", False, (False, "its actors run on other hosts")),
        ("on", True, (True, "--learner_realtime=on")),
        ("on", False, (True, "--learner_realtime=on")),
        ("off", True, (False, "--learner_realtime=off")),
        ("off", False, (False, "--learner_realtime=off")),
    ],
)
def test_the_learner_runs_real_time_when_its_actors_share_its_host_or_the_flag_says_so(
    setting, actors_on_host, expected
):
    assert host_tuning.realtime_policy(setting, actors_on_host) == expected


NO_SYS_NICE = ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice", "--"]


@pytest.mark.parametrize(
    "setting, prefix, result, policy",
    [
        # The tests run as root (README), with the kernel's default real-time throttling:
        # threads started after the call run real-time, earlier ones stay normal.
        (
            "auto",
            [],
            [True, "scheduling SCHED_FIFO priority 1 (its actors share this host)"],
            os.SCHED_FIFO,
        ),
        # Without CAP_SYS_NICE the learner says so and stays normal.
        (
            "on",
            NO_SYS_NICE,
            [False, "scheduling normal (SCHED_FIFO needs CAP_SYS_NICE)"],
            os.SCHED_OTHER,
        ),
    ],
)
def test_a_learner_meant_to_run_real_time_does_so_from_the_call_on_if_it_may(
    setting, prefix, result, policy
):
    policies, log = run_raising_child(setting, True, prefix)
    expected = {"result": result, "main": policy, "before": os.SCHED_OTHER, "after": policy}
    assert policies == expected, log


@pytest.mark.parametrize(
    "setting, actors_on_host, reason",
    [("off", True, "--learner_realtime=off"), ("auto", False, "its actors run on other hosts")],
)
def test_a_learner_not_meant_to_run_real_time_changes_nothing_and_says_why(
    setting, actors_on_host, reason
):
    policies, log = run_raising_child(setting, actors_on_host)
    assert policies["result"] == [False, f"scheduling normal ({reason})"], log
    assert {policies["main"], policies["after"]} == {os.SCHED_OTHER}


@pytest.mark.parametrize("setting", ["-1\n", "0\n", "", "unreadable"])
def test_without_real_time_throttling_the_learner_stays_normal(tmp_path, monkeypatch, setting):
    # Throttling off (-1), no real-time time at all (0) or unknown: a spinning real-time
    # thread could hold a core for good, or never run.
    path = tmp_path / "sched_rt_runtime_us"
    path.write_text(setting)
    monkeypatch.setattr(host_tuning, "_RT_RUNTIME_PATH", str(path))
    realtime, choice = host_tuning.raise_learner_priority("on", True)
    assert not realtime
    assert os.sched_getscheduler(0) == os.SCHED_OTHER
    assert choice.startswith("scheduling normal (SCHED_FIFO needs the kernel's real-time throttl")


@pytest.mark.parametrize(
    "cores, local_rank, learners, share",
    [
        ([0, 1], 0, 2, [0]),
        ([0, 1], 1, 2, [1]),
        ([0, 1, 2, 3], 1, 2, [2, 3]),
        ([0, 1, 2], 1, 2, [1]),  # the odd core is left to the actors
        ([4, 6], 1, 2, [6]),  # the host's usable cores, not 0..n-1
        ([0, 1], 0, 1, [0, 1]),
        ([0, 1], 2, 3, [0, 1]),  # more learners than cores: each keeps every core
    ],
)
def test_each_learner_on_a_host_gets_an_equal_share_of_its_cores(
    cores, local_rank, learners, share
):
    assert host_tuning.learner_cores(cores, local_rank, learners) == share


def run_pinning_child(enabled):
    """pin_learner(enabled) as the last of as many learners as the host has cores -> {"result":
    [its cores, the choice], and each thread's cores}."""
    return run_child(
        f"host_tuning.pin_learner({enabled}, len(os.sched_getaffinity(0)) - 1, "
        "len(os.sched_getaffinity(0)))",
        "lambda thread: sorted(os.sched_getaffinity(thread))",
    )


def test_a_pinned_learner_runs_every_thread_on_its_share_of_the_cores():
    cores = sorted(os.sched_getaffinity(0))  # 2 in CI: the child takes the last one.
    share = host_tuning.learner_cores(cores, len(cores) - 1, len(cores))
    choice = f"cores {share} of {cores} ({len(cores)} learners on this host)"
    if share == cores:
        choice = f"cores {cores} (the only learner on this host)"
    threads, log = run_pinning_child(True)
    # Horovod's thread (started before) included: its polling stays off the other learner's core.
    assert threads == {"result": [share, choice], "main": share, "before": share, "after": share}
    assert not log  # the choice is for the role's one line, which tune_learner logs


def test_an_unpinned_learner_keeps_every_core():
    cores = sorted(os.sched_getaffinity(0))
    choice = f"cores {cores} (--nopin_learners)"
    if len(cores) == 1:
        choice = f"cores {cores} (the only learner on this host)"
    threads, log = run_pinning_child(False)
    assert threads == {"result": [cores, choice], "main": cores, "before": cores, "after": cores}
    assert not log


@pytest.mark.parametrize(
    "cores, job_name, learners_on_host, actors_on_host, expected",
    [
        (2, "actor", 1, True, 1),
        (8, "actor", 1, False, 1),
        (2, "learner", 1, False, 2),  # actors elsewhere: every core
        (2, "learner", 1, True, 1),  # actors beside it: one core's worth left to them
        (8, "learner", 1, True, 7),
        (2, "learner", 2, True, 1),  # the share is one core: never fewer than one thread
        (2, "learner", 2, False, 1),
        (8, "learner", 2, True, 3),
        (2, "learner", 4, True, 1),  # more learners than cores
    ],
)
def test_kernel_threads_are_the_workers_share_of_the_cores(
    monkeypatch, cores, job_name, learners_on_host, actors_on_host, expected
):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    settings = config.Config()
    kernel_threads = host_tuning.kernel_threads
    assert kernel_threads(settings, job_name, learners_on_host, actors_on_host) == expected
    pinned = config.Config(intra_op_threads=3)  # the flag, when set, wins
    assert kernel_threads(pinned, job_name, learners_on_host, actors_on_host) == 3


@pytest.mark.parametrize(
    "learner_host, actor_hosts, expected",
    [
        ("127.0.0.1:8000", ["127.0.0.1:8001"], True),
        ("localhost:8000", ["127.0.0.2:8001"], True),  # both loopback
        ("LOCALHOST:8000", ["127.0.0.1:8001"], True),
        ("10.0.0.1:8000", ["10.0.0.2:8001", "10.0.0.1:8002"], True),
        ("10.0.0.1:8000", ["10.0.0.2:8001", "10.0.0.3:8002"], False),
        ("10.0.0.1:8000", ["127.0.0.1:8001"], False),
        ("learner.example:8000", ["Learner.example:8001"], True),
        ("10.0.0.1:8000", [], False),
    ],
)
def test_actors_share_host_compares_the_hosts_of_the_addresses(learner_host, actor_hosts, expected):
    assert host_tuning.actors_share_host(learner_host, actor_hosts) is expected


def test_a_learner_logs_every_choice_in_one_line():
    """tune_learner as learner 0 of 2 on this host, its actors beside it: one line with its
    scheduling, cores, TF pools and allocator (this child is no entry point: glibc)."""
    cores = sorted(os.sched_getaffinity(0))
    share = host_tuning.learner_cores(cores, 0, 2)
    kernel = host_tuning.kernel_threads(config.Config(), "learner", 2, True)
    _, log = run_child(
        "host_tuning.tune_learner(config.Config(), 0, 2, actors_on_host=True)",
        "os.sched_getscheduler",
    )
    pinned = f"cores {share} of {cores} (2 learners on this host)"
    if share == cores:
        pinned = f"cores {cores} (2 learners on this host, more than cores)"
    assert (
        "learner host tuning: scheduling SCHED_FIFO priority 1 (its actors share this host) | "
        f"{pinned} | TF threads: {kernel} kernel, default scheduling | torso float32 "
        "(--torso_dtype=float32) | allocator glibc's malloc, "
        "keeping freed memory (not an entry point, which re-executes onto tcmalloc)" in log
    ), log
    assert log.count("host tuning:") == 1


def test_native_bfloat16_is_read_from_the_first_processors_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu amx_bf16 avx512f avx512_bf16\n\n"
        "processor\t: 1\nflags\t\t: fpu amx_int8\n"
    )
    assert host_tuning.native_bfloat16(cpuinfo) == ["avx512_bf16", "amx_bf16"]
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_tile\n")
    assert host_tuning.native_bfloat16(cpuinfo) == []


@pytest.mark.parametrize(
    "setting, flags, expected",
    [
        ("auto", "avx2 avx512_bf16", ("bfloat16", "torso bfloat16 (the CPU has avx512_bf16)")),
        ("auto", "avx2", ("float32", "torso float32 (no native bfloat16 in the CPU)")),
        ("float32", "avx512_bf16", ("float32", "torso float32 (--torso_dtype=float32)")),
        ("bfloat16", "avx2", ("bfloat16", "torso bfloat16 (--torso_dtype=bfloat16)")),
    ],
)
def test_the_torso_dtype_auto_follows_the_cpu_and_the_others_the_flag(
    tmp_path, setting, flags, expected
):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu {flags}\n")
    assert host_tuning.torso_dtype(setting, cpuinfo) == expected


_REPEATED_ALLOCATIONS = """
import resource
import numpy as np
import host_tuning
if {keep}:
    assert host_tuning.keep_freed_memory()
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
import host_tuning
print(os.getpid(), host_tuning.use_allocator(reexecute=True), host_tuning.tcmalloc_loaded())
"""


def allocator_of_a_process(**environment):
    """(PID seen by the caller, PID printed after use_allocator, its answer, tcmalloc mapped) of
    a fresh process that calls host_tuning.use_allocator(reexecute=True) first thing."""
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


def test_the_entry_point_logs_its_actors_tuning_on_tcmalloc_in_one_line():
    # An actor tunes its host share before it builds its agent, whose unknown level then ends it.
    result = subprocess.run(
        [
            sys.executable,
            "experiment.py",
            "--job_name=actor",
            "--task=0",
            "--actor_hosts=localhost:1",
            "--level_name=NoSuchLevel-v0",
        ],
        cwd=local_cluster.REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]  # the usage error, after the line
    niceness = min(19, os.nice(0) + 10)
    assert (
        f"actor host tuning: niceness {niceness} (--actor_niceness=10) | TF threads: 1 kernel, "
        "1 scheduling | torso float32 (--torso_dtype=float32) | allocator tcmalloc\n"
        in result.stderr
    ), result.stderr[-2000:]
