"""Several learners' train step alone on this host: the most trained steps/s L Horovod ranks
reach here with nothing beside them (bench.throughput's learner ceiling of an L-learner row).

  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
      .venv/bin/python -m bench.learner_ranks [training flags] [--calls=20 --repeats=3]

or, from Python, `measure(config, ranks)`, which starts that mpirun and returns its figures.

Each rank sizes TF's thread pools as a learner whose actors share its host
(host_tuning.thread_pools: the host's cores divided among the ranks), builds the configured batch
step (train_step.make_batch_step, gradients summed over the ranks every minibatch) on a synthetic
batch of the configuration's unrolls, plain and with XLA, and times `--repeats` runs of
`--calls` batch steps of each after two warm-up calls. A count of calls, not a time window:
every minibatch allreduces, so all ranks must make the same calls. Rank 0 prints one JSON line:
the ranks' trained steps/s summed, at the best run of each variant, and the faster variant's.
"""

import json
import os
import sys
import time

import horovod.tensorflow as hvd
import numpy as np
from absl import app, flags

import config as config_lib
import host_tuning
import roles
from bench import cluster, stages
from frontend import launcher
from tools import local_cluster

config_lib.define_flags()
flags.DEFINE_integer("calls", 20, "Batch steps per timed run.", lower_bound=1)
flags.DEFINE_integer("repeats", 3, "Timed runs of each variant (the best counts).", lower_bound=1)
FLAGS = flags.FLAGS
TIMEOUT_SECS = 600


def measure(config, ranks, log_path, repeats=3, calls=20):
    """This module's JSON figures of `ranks` learners of `config` alone, under one mpirun on
    this host (its output in `log_path`); raises RuntimeError with the log's tail if it fails.

    It runs as a local_cluster.Process: in a process group of its own, so that no rank outlives
    a timeout or a stopped benchmark, and with Python's copy of the environment (after
    hvd.init() the C one also holds this process's MPI singleton, under which a new mpirun
    exits with 1, saying nothing)."""
    argv = [sys.executable, "-m", "bench.learner_ranks", *cluster.worker_flags(config)]
    argv += [f"--repeats={repeats}", f"--calls={calls}"]
    command = launcher.mpmd_argv("mpirun", os.geteuid() == 0, [("localhost", argv)] * ranks)
    process = local_cluster.Process(command, log_path)
    try:
        exit_code = process.wait(TIMEOUT_SECS)
    finally:
        process.kill()
    log = process.log()
    lines = [line for line in log.splitlines() if line.startswith("{")]
    if exit_code != 0 or not lines:
        raise RuntimeError(
            f"bench.learner_ranks on {ranks} ranks exited with {exit_code}:\n{log[-9000:]}"
        )
    return json.loads(lines[-1])


def best_rate(step, trained_per_call, calls, repeats):
    """This rank's best trained steps/s over `repeats` runs of `calls` calls of step()."""
    for _ in range(2):  # tracing, then a call on warm caches
        step()
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        best = max(best, calls * trained_per_call / (time.perf_counter() - start))
    return best


def main(argv):
    del argv
    hvd.init()
    config = config_lib.from_flags(FLAGS)
    pools = host_tuning.thread_pools(config, "learner", hvd.size(), actors_on_host=True)
    host_tuning.size_thread_pools(pools)
    agent, observation_spec, num_actions, _ = roles.build_agent(config)
    rates = {}
    for name, xla in (("plain", False), ("xla", True)):
        step, trained_per_call = stages.learner_step(
            config, hvd, agent, observation_spec, num_actions, xla
        )
        rates[name] = best_rate(step, trained_per_call, FLAGS.calls, FLAGS.repeats)
    summed = hvd.allreduce(np.array(list(rates.values())), op=hvd.Sum, name="rates").numpy()
    if hvd.rank() == 0:
        summed_rates = {
            f"{name}_rate": rate for name, rate in zip(rates, summed.tolist(), strict=True)
        }
        print(
            json.dumps(
                {
                    "ranks": hvd.size(),
                    "threads": pools[0],
                    "scheduling_threads": pools[1],
                    **summed_rates,
                    "rate": max(summed_rates.values()),
                    "xla": summed_rates["xla_rate"] > summed_rates["plain_rate"],
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    app.run(main)
