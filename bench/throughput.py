"""Throughput of the whole system against the ceiling its three stages allow on this machine.

  .venv/bin/python -m bench.throughput [--quick] [training flags] [--actors=2 --learners=1]

(from the repository root). Every training flag (the fields of config.Config) is accepted and
forwarded to the workers; defaults: Pong, SimpleConvNetAgent, T=20, B=32, 8 environments per
actor.

In one run, each stage alone in this process (agent steps/s, best of repeated windows):
  env        the actors' vector environment (actor.create_env), random actions;
  inference  tf.function(agent.__call__) at batch --num_envs_per_actor, outputs to numpy, as
             the actor calls it;
  learner    the learner's train step (train_step.train_step: V-trace loss, gradients,
             optimizer) on synthetic
             batches of B unrolls of T steps, fed as numpy arrays as dequeued.
All stages share the same cores, so an agent step costs at least the sum of the stages' times:
  ceiling = 1 / (1/env + 1/inference + 1/learner).
A stage alone may leave cores idle (batch-8 inference does), which the stages running side by
side fill, so the system can beat that ceiling. The bound of a saturated machine counts CPU time:
  CPU ceiling = cores / (CPU time per agent step of env + inference + learner).
Then the real system (experiment.py learners and actors as processes on loopback, several
learners under one mpirun) runs for a window after a warm-up; its rate is read from the
learner's `frames N` log lines (absl timestamps) at the start and end of the window: frames
consumed by the learners over all ranks. Printed: a table and, last, one JSON line.
"""

import datetime
import functools
import json
import os
import re
import tempfile
import time

import horovod.tensorflow as hvd
import numpy as np
import psutil
import tensorflow as tf
from absl import app, flags

import config as config_lib
import local_cluster
import train_step
import unrolls
from actor import create_env
from bench import cluster
from experiment import build_agent

flags.DEFINE_integer("actors", 2, "Actors (over all learners) of the default configuration.")
flags.DEFINE_integer("learners", 1, "Learners of the default configuration.")
flags.DEFINE_list("table_actors", ["1", "2", "4"], "Actor counts of the full table.")
flags.DEFINE_list("table_learners", ["1", "2"], "Learner counts of the full table.")
flags.DEFINE_bool("quick", False, "Short run: fewer repeats, shorter windows, default row only.")
FLAGS = flags.FLAGS

# (seconds per stage window, stage repeats, system warm-up seconds, system window seconds)
FULL = (5.0, 5, 30, 60)
QUICK = (2.0, 3, 15, 20)
LOG_SECS = 2  # The learner's log interval: the resolution of the system window.
STARTUP_TIMEOUT_SECS = 600


def steps_per_second(step, steps_per_call, window_secs, repeats):
    """Best rate of `step()` over `repeats` windows after a warm-up window (tracing).

    The best, not the median: other work on a shared machine only ever slows a window down.
    Returns a dict: `rate` (agent steps/s), `cpu_ms` (CPU milliseconds this process spent per
    agent step, all its threads) and `other_cores` (cores the rest of the machine used).
    """

    def window():
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < window_secs:
            step()
            calls += 1
        return calls * steps_per_call, time.perf_counter() - start

    window()
    machine, own, start = cpu_seconds(None), time.process_time(), time.perf_counter()
    windows = [window() for _ in range(repeats)]
    own = time.process_time() - own
    other = (cpu_seconds(None) - machine - own) / (time.perf_counter() - start)
    return {
        "rate": max(steps / secs for steps, secs in windows),
        "cpu_ms": 1e3 * own / sum(steps for steps, _ in windows),
        "other_cores": other,
    }


def measure_stages(config, window_secs, repeats):
    """Agent steps/s of the env, inference and learner stages, each alone in this process."""
    num_envs, rng = config.num_envs_per_actor, np.random.default_rng(config.seed)
    agent, observation_spec, num_actions, frames_per_step = build_agent(config)
    stages = {"load_average": cluster.wait_for_quiet_machine()}

    env = create_env(config, "bench")
    env_output = env.initial()
    try:
        stages["env"] = steps_per_second(
            lambda: env.step(rng.integers(0, num_actions, num_envs)), num_envs, window_secs, repeats
        )
    finally:
        env.close()

    act = tf.function(agent.__call__)  # what Actor does with its agent
    state = {"action": np.zeros([num_envs], np.int32), "core": agent.initial_state(num_envs)}

    def inference_step():
        agent_output, state["core"] = act(state["action"], env_output, state["core"])
        state["action"] = tf.nest.map_structure(lambda t: t.numpy(), agent_output).action

    stages["inference"] = steps_per_second(inference_step, num_envs, window_secs, repeats)

    optimizer = train_step.make_optimizer(config, tf.Variable(config.learning_rate))
    train_step.create_optimizer_state(optimizer, agent)
    step = tf.function(functools.partial(train_step.train_step, agent, optimizer, config, hvd))
    batch = unrolls.random_unroll(
        agent, observation_spec, num_actions, config.batch_size, config.unroll_length, rng
    )
    stages["learner"] = steps_per_second(
        lambda: step(batch)["total"].numpy(),
        config.batch_size * config.unroll_length,
        window_secs,
        repeats,
    )
    names = ("env", "inference", "learner")
    stages["ceiling"] = 1 / sum(1 / stages[name]["rate"] for name in names)
    # The same bound from CPU time: all cores busy, each agent step costing its stages' CPU.
    stages["cpu_ceiling"] = 1e3 * os.cpu_count() / sum(stages[name]["cpu_ms"] for name in names)
    return stages, frames_per_step


_PROGRESS_LINE = re.compile(
    r"^I(\d{4}) (\d\d:\d\d:\d\d\.\d+) .*\] frames (\d+) \(.*\| queue (\d+)/", re.MULTILINE
)


def progress_points(log):
    """(unix time, global frames, queue size) of each of rank 0's progress log lines."""
    year = datetime.date.today().year
    return [
        (
            datetime.datetime.strptime(f"{year}{day} {clock}", "%Y%m%d %H:%M:%S.%f").timestamp(),
            int(frames),
            int(queue),
        )
        for day, clock, frames, queue in _PROGRESS_LINE.findall(log)
    ]


def cpu_seconds(processes):
    """CPU seconds the processes used so far; None for the whole machine (all cores)."""
    if processes is None:
        times = psutil.cpu_times()
        return times.user + times.nice + times.system + times.irq + times.softirq + times.steal
    return sum(p.cpu_times().user + p.cpu_times().system for p in processes)


def measure_system(
    config, num_learners, num_actors, frames_per_step, warmup_secs, window_secs, run_dir
):
    """Runs the real system; its agent steps/s over the window, CPU use and peak RSS."""
    load_average = cluster.wait_for_quiet_machine()
    flag_args = cluster.worker_flags(
        config,
        logdir=os.path.join(run_dir, "logdir"),
        total_environment_frames=10**12,
        log_secs=LOG_SECS,
    )
    with local_cluster.WorkerSets(num_learners, num_actors, flag_args, run_dir) as workers:
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECS
        while len(progress_points(workers.learner_log())) < 2:  # the first step is tracing
            workers.check_running()
            if time.monotonic() > deadline:
                raise RuntimeError(f"no learner progress after {STARTUP_TIMEOUT_SECS} s")
            time.sleep(1)
        time.sleep(warmup_secs)
        learners, actors = workers.learner_processes(), workers.actor_processes()
        cpu_before = [cpu_seconds(group) for group in (learners, actors, None)]
        start = time.time()
        time.sleep(window_secs)
        end = time.time()
        cpu_after = [cpu_seconds(group) for group in (learners, actors, None)]
        learner_rss = max(cluster.peak_rss_mb(p) for p in learners)
        actor_rss = max(cluster.peak_rss_mb(p) for p in actors)
        # From the last progress line before the window to the last one in it (or, should a
        # learner step take longer than the window, to the first one after it).
        while not (later := [p for p in progress_points(workers.learner_log()) if p[0] > start]):
            workers.check_running()
            if time.time() > start + STARTUP_TIMEOUT_SECS:
                raise RuntimeError(f"no learner progress in {STARTUP_TIMEOUT_SECS} s: {run_dir}")
            time.sleep(1)
        points = progress_points(workers.learner_log())
    first = [p for p in points if p[0] <= start][-1]
    last = [p for p in later if p[0] <= end][-1] if later[0][0] <= end else later[0]
    (t0, frames0, _), (t1, frames1, _) = first, last
    window = [p for p in points if t0 <= p[0] <= t1]
    frames_per_second = (frames1 - frames0) / (t1 - t0)
    cores = [
        (after - before) / (end - start)
        for before, after in zip(cpu_before, cpu_after, strict=True)
    ]
    return {
        "learners": num_learners,
        "actors": num_actors,
        "load_average": load_average,
        "agent_steps_per_s": frames_per_second / frames_per_step,
        "frames_per_s": frames_per_second,
        "mean_queue": float(np.mean([queue for _, _, queue in window])),
        # CPU cores busy over the window: the learners, the actors, and anything else.
        "learner_cores": cores[0],
        "actor_cores": cores[1],
        "other_cores": cores[2] - cores[0] - cores[1],
        "learner_peak_rss_mb": learner_rss,
        "actor_peak_rss_mb": actor_rss,
    }


def table_rows():
    rows = [(FLAGS.learners, FLAGS.actors)]
    if not FLAGS.quick:
        for learners in map(int, FLAGS.table_learners):
            for actors in map(int, FLAGS.table_actors):
                if actors >= learners and (learners, actors) not in rows:
                    rows.append((learners, actors))
    return rows


def main(argv):
    del argv
    hvd.init()  # one rank: the learner's train step runs without mpirun
    local_cluster.exit_cleanly_on_termination()
    config = config_lib.from_flags(FLAGS)
    stage_secs, repeats, warmup_secs, window_secs = QUICK if FLAGS.quick else FULL
    work_dir = tempfile.mkdtemp(prefix="impala_bench_throughput_")  # kept: the workers' logs
    print(f"logs and summaries in {work_dir}", flush=True)
    stages, frames_per_step = measure_stages(config, stage_secs, repeats)
    results = [
        measure_system(
            config,
            learners,
            actors,
            frames_per_step,
            warmup_secs,
            window_secs,
            os.path.join(work_dir, f"system_{learners}l_{actors}a"),
        )
        for learners, actors in table_rows()
    ]
    for row in results:
        row["achieved_over_ceiling"] = row["agent_steps_per_s"] / stages["ceiling"]
        row["achieved_over_cpu_ceiling"] = row["agent_steps_per_s"] / stages["cpu_ceiling"]

    print(
        f"{FLAGS.level_name}, {FLAGS.agent_name}, T={FLAGS.unroll_length}, B={FLAGS.batch_size}, "
        f"{FLAGS.num_envs_per_actor} envs per actor, {os.cpu_count()} cores "
        f"({'quick' if FLAGS.quick else 'full'} mode)"
    )
    print(f"\nstages alone (1-min load {stages['load_average']}):")
    print(f"  {'stage':<12}{'steps/s':>9}{'CPU ms/step':>13}{'other cores':>13}")
    for name in ("env", "inference", "learner"):
        rate, cpu_ms, other_cores = (stages[name][key] for key in ("rate", "cpu_ms", "other_cores"))
        print(f"  {name:<12}{rate:>9.0f}{cpu_ms:>13.3f}{other_cores:>13.2f}")
    print(f"  {'ceiling':<12}{stages['ceiling']:>9.0f}   = 1 / (1/env + 1/inference + 1/learner)")
    print(f"  {'CPU ceiling':<12}{stages['cpu_ceiling']:>9.0f}   = cores / sum of CPU ms per step")
    print(
        f"\n{'learners':>8}{'actors':>7}{'load':>6}{'steps/s':>9}{'frames/s':>10}{'/ceiling':>9}"
        f"{'/CPU ceiling':>13}{'queue':>7}{'learner cores':>14}{'actor cores':>12}"
        f"{'other cores':>12}{'learner RSS':>12}{'actor RSS':>10}"
    )
    for r in results:
        print(
            f"{r['learners']:>8}{r['actors']:>7}{r['load_average']:>6.2f}"
            f"{r['agent_steps_per_s']:>9.0f}{r['frames_per_s']:>10.0f}"
            f"{r['achieved_over_ceiling']:>9.2f}{r['achieved_over_cpu_ceiling']:>13.2f}"
            f"{r['mean_queue']:>7.1f}"
            f"{r['learner_cores']:>14.2f}{r['actor_cores']:>12.2f}{r['other_cores']:>12.2f}"
            f"{r['learner_peak_rss_mb']:>10.0f}MB{r['actor_peak_rss_mb']:>8.0f}MB"
        )
    config = {
        "level_name": FLAGS.level_name,
        "agent_name": FLAGS.agent_name,
        "unroll_length": FLAGS.unroll_length,
        "batch_size": FLAGS.batch_size,
        "num_envs_per_actor": FLAGS.num_envs_per_actor,
        "cores": os.cpu_count(),
        "quick": FLAGS.quick,
    }
    print(json.dumps({"config": config, "stages": stages, "system": results}))


if __name__ == "__main__":
    app.run(main)
