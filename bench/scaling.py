"""Multi-learner scaling beyond one host, projected from gradient allreduces over shaped links.

  .venv/bin/python -m bench.scaling [--rates=1gbit,10gbit] [--rtts_ms=0.2,2]

(as root, from the repository root; ~10 minutes). Learner hosts are network namespaces
(network_namespaces.VethNamespace, routed through this machine), each link shaped with tc's
token bucket (`tbf`) at --rates in both directions, as a host's NIC would be. For each rate, rank
count and Horovod option, bench/allreduce.py runs under one mpirun with one rank per namespace
(each namespace a "remote" host whose orted mpirun starts through a launcher script, as it
would over ssh) and MPI restricted to TCP over those links, and reports the median
allreduce of each agent's gradients (SimpleConvNetAgent and ResNetLSTMAgent, Atari shapes).
Horovod options measured: the defaults (tensor fusion on, 64 MiB buffer), fusion off
(HOROVOD_FUSION_THRESHOLD=0), and fp16 gradient compression (hvd.Compression.fp16).

Round trips: this machine's kernel has no netem qdisc (tc: "Specified qdisc kind is unknown"),
so the links' own round trip is loopback's (~0.02 ms) and the --rtts_ms are added with the
ring allreduce's latency term: 2 (n - 1) messages in sequence, each paying one one-way delay,
(n - 1) x RTT in all.

Projection, for k learners each on a host of its own (its actors elsewhere): the measured
allreduce of 2 and 4 ranks fits the ring's bandwidth term, t(n) = c + 2 (n - 1) / n x X (c the
fixed cost, X the time to move the gradients once), which extrapolates to 8 and 16 ranks; one
learner's step time is bench/allreduce.py's train step with one rank on this machine; then
  efficiency(k) = step / (step + allreduce(k)),   frames/s(k) = k x B T 4 / (step + allreduce(k)).
Printed: the measured table, the projection and, last, one JSON line.
"""

import contextlib
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import tempfile

import psutil
from absl import app, flags

from tools import local_cluster, network_namespaces

flags.DEFINE_list("rates", ["1gbit", "10gbit"], "Link rates (tc tbf syntax).")
flags.DEFINE_list("rtts_ms", ["0.2", "2"], "Round trips added by the ring model (ms).")
flags.DEFINE_list("agents", ["SimpleConvNetAgent", "ResNetLSTMAgent"], "Agents measured.")
flags.DEFINE_list("options", ["default", "fusion off", "fp16"], "Horovod options measured.")
flags.DEFINE_list("learners", ["1", "2", "4", "8", "16"], "Learner counts of the projection.")
flags.DEFINE_integer("repeats", 10, "Timed allreduces per measurement (bench/allreduce.py).")
flags.DEFINE_integer("batch_size", 32, "B of one learner's step (its train step, the projection).")
flags.DEFINE_integer("unroll_length", 20, "T of one learner's step.")
FLAGS = flags.FLAGS

OPTIONS = {  # name: (extra mpirun arguments, bench/allreduce.py flags)
    "default": ([], []),
    "fusion off": (["-x", "HOROVOD_FUSION_THRESHOLD=0"], []),
    "fp16": ([], ["--compression=fp16"]),
}
RANKS = (2, 4)  # rank counts measured, one namespace each; the ring fit uses both
FRAMES_PER_AGENT_STEP = 4
# The original Horovod IMPALA tweak's published scale-up (agent steps/s by learner count).
PUBLISHED = {1: 5800, 4: 18800}
# mpirun's launcher for the namespaces: "agent HOST COMMAND" runs COMMAND in the namespace that
# holds HOST's address, as ssh would on a real host.
# Each "host" keeps Open MPI's session directory in a directory of its own, as a real host's
# /tmp: the orteds of one job share this machine's host name and /tmp otherwise, and then race
# to create the same directories (one in ~5 jobs had a daemon fail with "File exists" or
# crash in hwloc's topology sharing, and mpirun waited for it forever).
RSH_AGENT = """#!/bin/sh
host=$1; shift
for ns in $(ip netns list | cut -d' ' -f1); do
  if ip -n "$ns" -4 -o addr show | grep -q " inet $host/"; then
    tmp="$(dirname "$0")/$ns"
    mkdir -p "$tmp"
    exec ip netns exec "$ns" env OMPI_MCA_orte_tmpdir_base="$tmp" sh -c "$*"
  fi
done
echo "no network namespace holds $host" >&2
exit 1
"""
# One run of bench/allreduce.py takes 10-60 s here; one that runs longer is stuck.
RUN_TIMEOUT_SECS = 300
STACKS_SECS = 5  # A stuck run's wait for its ranks' stacks.
_JSON_LINE = re.compile(r"^\{.*\"results\".*\}$", re.MULTILINE)


def allreduce_bench(extra_flags, mpirun_args=(), namespaces=(), rsh_agent=None):
    """bench/allreduce.py's JSON: under mpirun with one rank per namespace (started through the
    `rsh_agent` script), or without namespaces one plain rank."""
    command = [
        sys.executable,
        "-m",
        "bench.allreduce",
        f"--agents={','.join(FLAGS.agents)}",
        f"--repeats={FLAGS.repeats}",
        f"--batch_size={FLAGS.batch_size}",
        f"--unroll_length={FLAGS.unroll_length}",
        *extra_flags,
    ]
    if namespaces:
        command = [
            "mpirun",
            "--allow-run-as-root",
            "--oversubscribe",
            "--bind-to",
            "none",
            # Each namespace is a "remote" host: its orted starts there through RSH_AGENT and
            # its rank talks to the others over the shaped links only (TCP, no shared memory).
            *("--mca", "plm_rsh_agent", rsh_agent),
            *("--mca", "plm_rsh_no_tree_spawn", "1"),
            # mpirun's end: only the namespaces' own /24s, not other tests' veths, which come
            # and go in 10.0.0.0/8 here (inside a namespace, its veth is the only one).
            *("--mca", "oob_tcp_if_include", _subnets(namespaces)),
            *("--mca", "btl", "tcp,self"),
            *("--mca", "btl_tcp_if_include", "10.0.0.0/8"),
            *("-H", ",".join(ns.ip for ns in namespaces)),
            *("-np", str(len(namespaces))),
            *mpirun_args,
            *command,
        ]
    # From the root, which `-m` puts on sys.path for bench.allreduce's imports.
    run = subprocess.Popen(
        command, cwd=local_cluster.REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = run.communicate(timeout=RUN_TIMEOUT_SECS)
    except subprocess.TimeoutExpired:
        stdout, stderr = _stacks_then_kill(run, namespaces)
        raise RuntimeError(
            f"{' '.join(command[:12])} ... still running after {RUN_TIMEOUT_SECS} s (its ranks'"
            f" stacks last):\n{stdout[-2000:]}\n{stderr[-12000:]}"
        ) from None
    if run.returncode != 0 or not _JSON_LINE.search(stdout):
        raise RuntimeError(
            f"{' '.join(command[:12])} ... exited {run.returncode}:\n{stdout[-2000:]}\n"
            f"{stderr[-3000:]}"
        )
    return json.loads(_JSON_LINE.findall(stdout)[-1])


def _subnets(namespaces):
    """The /24s of `namespaces`' links, comma-separated, as Open MPI's *_if_include take them."""
    return ",".join(str(ipaddress.ip_interface(f"{ns.ip}/24").network) for ns in namespaces)


def _stacks_then_kill(run, namespaces):
    """A stuck run's (stdout, stderr), with every rank's Python stacks (SIGUSR1: bench/allreduce.py
    dumps them, and orted forwards them to mpirun's stderr), after which it is killed."""
    for ns in namespaces:  # the ranks: not mpirun's children (their orteds daemonize)
        for pid in network_namespaces.run("ip", "netns", "pids", ns.name).split():
            with contextlib.suppress(psutil.NoSuchProcess):
                rank = psutil.Process(int(pid))
                if "bench.allreduce" in " ".join(rank.cmdline()):
                    rank.send_signal(signal.SIGUSR1)
    with contextlib.suppress(subprocess.TimeoutExpired):
        return run.communicate(timeout=STACKS_SECS)
    run.kill()
    return run.communicate()


def shape_links(namespaces, rate):
    """tbf at `rate` on both ends of every namespace's veth (egress each way)."""
    for ns in namespaces:
        for iface, namespace in ((ns.host_iface, None), (ns.ns_iface, ns.name)):
            network_namespaces.run(
                "tc", "qdisc", "replace", "dev", iface, "root", "tbf", "rate", rate,
                "burst", "512kb", "latency", "50ms", namespace=namespace,
            )  # fmt: skip


@contextlib.contextmanager
def learner_hosts(count):
    """(`count` namespaces routed through this machine, the path of the RSH_AGENT script);
    IPv4 forwarding is on meanwhile."""
    tag = f"{os.getpid() % 100000:05d}"
    hosts = []
    with open(network_namespaces.IP_FORWARD) as f:
        forwarding = f.read().strip()
    try:
        with open(network_namespaces.IP_FORWARD, "w") as f:
            f.write("1")
        for i in range(count):
            hosts.append(
                network_namespaces.VethNamespace(f"impb-{tag}-{i}", f"ibh{tag}{i}", f"ibn{tag}{i}")
            )
        with tempfile.TemporaryDirectory(prefix="impala_bench_scaling_") as directory:
            agent = os.path.join(directory, "rsh_agent.sh")
            with open(agent, "w") as f:
                f.write(RSH_AGENT)
            os.chmod(agent, 0o755)
            yield hosts, agent
    finally:
        for host in hosts:
            host.close()
        with open(network_namespaces.IP_FORWARD, "w") as f:
            f.write(forwarding)


def ring_fit(measured):
    """{n: ms} for n = 2 and 4 -> (c, X) of t(n) = c + 2 (n - 1) / n X."""
    t2, t4 = measured[2], measured[4]
    bandwidth = 2 * (t4 - t2)  # t4 - t2 = (1.5 - 1) X
    return t2 - bandwidth, bandwidth


def project(step_ms, fit, rtt_ms, learners):
    """(allreduce ms, efficiency, frames/s) of `learners` learners."""
    if learners == 1:
        allreduce_ms = 0.0
    else:
        fixed, bandwidth = fit
        allreduce_ms = fixed + 2 * (learners - 1) / learners * bandwidth + (learners - 1) * rtt_ms
    frames = FLAGS.batch_size * FLAGS.unroll_length * FRAMES_PER_AGENT_STEP
    return (
        allreduce_ms,
        step_ms / (step_ms + allreduce_ms),
        learners * frames / ((step_ms + allreduce_ms) / 1e3),
    )


def main(argv):
    del argv
    reason = network_namespaces.skip_reason("tc", "mpirun")
    if reason:
        raise app.UsageError(f"bench.scaling cannot run here: {reason}")
    unknown = set(FLAGS.options) - set(OPTIONS)
    if unknown:
        raise app.UsageError(f"--options: unknown {sorted(unknown)}; known: {list(OPTIONS)}")
    local_cluster.exit_cleanly_on_termination()  # SIGTERM/SIGHUP still remove the namespaces
    print("one learner's train step (one rank, this machine)...", flush=True)
    step_ms = {r["agent"]: r["train_step_ms"] for r in allreduce_bench([])["results"]}

    measured = []  # rows: agent, rate, option, ranks, allreduce ms
    with learner_hosts(max(RANKS)) as (hosts, rsh_agent):
        for rate in FLAGS.rates:
            shape_links(hosts, rate)
            for option in FLAGS.options:
                mpirun_args, bench_flags = OPTIONS[option]
                for n in RANKS:
                    print(f"allreduce: {rate}, {option}, {n} ranks...", flush=True)
                    result = allreduce_bench(
                        ["--notrain_step", *bench_flags], mpirun_args, hosts[:n], rsh_agent
                    )
                    for r in result["results"]:
                        measured.append(
                            dict(
                                agent=r["agent"],
                                parameters=r["parameters"],
                                rate=rate,
                                option=option,
                                ranks=n,
                                allreduce_ms=r["allreduce_ms"],
                            )
                        )

    print(f"\nB={FLAGS.batch_size}, T={FLAGS.unroll_length}; one learner's step: " + ", ".join(
        f"{agent} {ms:.0f} ms" for agent, ms in step_ms.items()
    ))  # fmt: skip
    print("\nmeasured allreduce (median ms; links shaped with tbf, loopback round trip):")
    print(f"  {'agent':<20}{'parameters':>12}{'rate':>8}{'option':>12}{'ranks':>6}{'ms':>9}")
    for m in measured:
        print(
            f"  {m['agent']:<20}{m['parameters']:>12,}{m['rate']:>8}{m['option']:>12}"
            f"{m['ranks']:>6}{m['allreduce_ms']:>9.1f}"
        )

    projection = []
    for m in measured:
        if m["ranks"] != 2:
            continue
        four = next(
            x["allreduce_ms"]
            for x in measured
            if (x["agent"], x["rate"], x["option"], x["ranks"])
            == (m["agent"], m["rate"], m["option"], 4)
        )
        fit = ring_fit({2: m["allreduce_ms"], 4: four})
        for rtt in map(float, FLAGS.rtts_ms):
            for k in map(int, FLAGS.learners):
                allreduce_ms, efficiency, frames = project(step_ms[m["agent"]], fit, rtt, k)
                projection.append(
                    dict(
                        agent=m["agent"], rate=m["rate"], option=m["option"], rtt_ms=rtt,
                        learners=k, allreduce_ms=allreduce_ms, efficiency=efficiency,
                        frames_per_s=frames, agent_steps_per_s=frames / FRAMES_PER_AGENT_STEP,
                    )
                )  # fmt: skip
    print(
        "\nprojection (k learners, each on its own host; efficiency = step / (step + allreduce)):"
    )
    print(
        f"  {'agent':<20}{'rate':>8}{'option':>12}{'RTT ms':>8}{'k':>4}{'allreduce ms':>14}"
        f"{'efficiency':>12}{'agent steps/s':>15}{'x one learner':>15}"
    )
    for p in projection:
        single = next(
            q["agent_steps_per_s"]
            for q in projection
            if (q["agent"], q["rate"], q["option"], q["rtt_ms"], q["learners"])
            == (p["agent"], p["rate"], p["option"], p["rtt_ms"], 1)
        )
        p["speedup"] = p["agent_steps_per_s"] / single
        print(
            f"  {p['agent']:<20}{p['rate']:>8}{p['option']:>12}{p['rtt_ms']:>8g}{p['learners']:>4}"
            f"{p['allreduce_ms']:>14.1f}{p['efficiency']:>12.2f}{p['agent_steps_per_s']:>15.0f}"
            f"{p['speedup']:>15.2f}"
        )
    published = PUBLISHED[4] / PUBLISHED[1]
    print(
        f"\npublished (the original Horovod IMPALA tweak): 1 -> 4 learners {PUBLISHED[1]} -> "
        f"{PUBLISHED[4]} agent steps/s (x{published:.2f}), flat beyond 6"
    )
    print(
        json.dumps(
            {"step_ms": step_ms, "measured": measured, "projection": projection,
             "published": PUBLISHED}
        )
    )  # fmt: skip


if __name__ == "__main__":
    app.run(main)
