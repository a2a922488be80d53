"""The learner beside model actors on the same cores: how near the limit can a system get?

  .venv/bin/python -m bench.corun [--variants=best,own] [--window_secs=20] [training flags]

(from the repository root; ~3 min per variant here). bench/throughput.py's limit counts every
core busy with the cheapest work; in a system the learner's kernel threads share the cores
with the actors, and their batch step slows when anything else runs. This measures, in one run:

1. the limit's stages alone: env_raw (bench.stages), inference_best's configuration (batch
   64 with and without XLA, the cheaper, one kernel thread, in a process of its own) and the
   learner stage (the batch step as configured, this process, with the thread pools of a
   learner whose actors share its host, under SCHED_FIFO as a learner's threads run:
   --learner_realtime, host_tuning.py);
   before the variants and again after them, the cheaper of the two each (the machine
   drifts, by 10 % in minutes here);
2. for each variant, the learner stage again beside --actors model actors: processes at
   the normal policy and --actor_niceness with one kernel thread, each stepping ale-py's
   AtariVectorEnv (--num_envs_per_actor games, random actions) and running the agent's
   forward pass on its frames; none of the system's transport, queue or Python loop. Each
   actor may run ahead of what the learner consumed (trained steps / uses, shared among the
   actors) by one round of its games' unrolls (N x T agent steps), as a full queue lets a
   real actor; then it waits. The learner in turn waits for the agent steps its next step
   trains on, as on an empty queue.
   Variants of the model actors' inference:
     best  the limit's: batch 64, with XLA if that was the cheaper, once per 64 / N steps
     own   the actors' own: batch N (--num_envs_per_actor), no XLA, after every step

Each variant's rate is the learner's trained steps/s / uses in agent steps/s, against
  limit = cores / (env_raw + inference_best + uses x learner alone)   [agent steps/s]
from this run's stages: `best` says how near the limit any system of this learner can get on
these cores, `own` what the actors' inference batch costs of that. Printed: a table and, last,
one JSON line.
"""

import host_tuning

if __name__ == "__main__":
    # The stages are timed on the workers' allocator (host_tuning.py): re-executes at once.
    host_tuning.use_allocator(reexecute=True)

import json
import multiprocessing
import os
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

import config as config_lib
import environments
import experiment
import train_step
from bench import stages

flags.DEFINE_list("variants", ["best", "own"], "Model actors' inference: best, own.")
flags.DEFINE_integer("actors", 2, "Model actors.")
flags.DEFINE_float("window_secs", 20.0, "Length of each measured window.")
flags.DEFINE_integer("windows", 3, "Measured windows per variant (after one warm-up window).")
config_lib.define_flags()
FLAGS = flags.FLAGS

BEST_BATCH = 64  # inference_best's batch on this machine (bench/README.md)
# How long a model actor that is ahead of the learner (or the learner that is ahead of the
# actors) sleeps before it looks again.
_THROTTLE_SECS = 0.002


def _model_actor(config, inference, index, allowance, produced, ready, start):
    """A model actor's process: sets ready[index] once warm, then from `start` on acts while
    produced[index] (its agent steps) <= allowance.value; `inference` = (batch, XLA or not)."""
    # Spawned from the real-time learner stage's process: back to the normal policy, as an
    # actor of the system runs, before its threads start.
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    host_tuning.tune_actor(config)
    agent, _, num_actions, _ = experiment.build_agent(config)
    settings = environments.AtariSettings(
        config.level_name, False, config.width, config.height, config.sticky_actions
    )
    num_envs = config.num_envs_per_actor
    env = environments.ale_vector_env(settings, num_envs, num_threads=1)
    env.reset(seed=config.seed + index)
    rng = np.random.default_rng(config.seed + index)
    batch, jit = inference
    act = tf.function(agent.__call__, jit_compile=jit)
    observation = env.step(rng.integers(0, num_actions, num_envs, np.int32))[0]
    # Inference reads frames of the games' shape [batch, H, W, 4]; the games' own frames,
    # tiled to the batch (what the network computes does not depend on their values).
    frames = np.resize(observation.transpose(0, 2, 3, 1), (batch, *observation.shape[2:], 4))
    zeros = np.zeros(batch, np.float32)
    inputs = environments.StepOutput(
        zeros,
        environments.StepOutputInfo(zeros, np.zeros(batch, np.int32), np.zeros(batch, bool)),
        np.zeros(batch, bool),
        frames,
    )
    state = {"action": np.zeros(batch, np.int32), "core": agent.initial_state(batch)}
    steps_per_inference = max(1, batch // num_envs)

    def round_of_batch():  # batch agent steps: the games stepped, one forward pass
        for _ in range(steps_per_inference):
            env.step(rng.integers(0, num_actions, num_envs, np.int32))
        output, state["core"] = act(state["action"], inputs, state["core"])
        state["action"] = tf.nest.map_structure(lambda t: t.numpy(), output).action
        return steps_per_inference * num_envs

    for _ in range(10):  # traced, and warm
        round_of_batch()
    ready[index] = 1
    start.wait()
    while True:
        if produced[index] > allowance.value:
            time.sleep(_THROTTLE_SECS)
            continue
        produced[index] += round_of_batch()


def _learner_step(config):
    """The learner stage's batch step on a synthetic batch as configured -> (step(): one batch
    step, the agent steps it trains on)."""
    agent, observation_spec, num_actions, _ = experiment.build_agent(config)
    rng = np.random.default_rng(config.seed)
    batch = stages.learner_batch(agent, config, observation_spec, num_actions, rng)
    batch_step, _ = train_step.single_process_step(agent, config)
    weights = np.ones(len(batch.parameter_version), np.float32)

    def step():
        train_step.train_in_minibatches(batch_step, batch, weights, config.minibatch_unrolls, rng)

    return step, weights.size * config.unroll_length


def _windows(step, steps_per_call):
    """bench.stages.steps_per_second of the learner's `step` with this run's windows."""
    return stages.steps_per_second(step, steps_per_call, FLAGS.window_secs, FLAGS.windows)


def corun(config, variant, best_jit, step, steps_per_call, uses):
    """The learner's `step` beside FLAGS.actors model actors of `variant` (`best`: with XLA
    as `best_jit` says) -> dict of figures; the actors' cores are the rest of the machine's
    (nothing else runs)."""
    inference = (BEST_BATCH, best_jit) if variant == "best" else (config.num_envs_per_actor, False)
    spawn = multiprocessing.get_context("spawn")
    allowance = spawn.Value("d", 0.0, lock=False)
    produced = spawn.Array("d", FLAGS.actors, lock=False)
    ready = spawn.Array("d", FLAGS.actors, lock=False)
    start = spawn.Event()
    actors = [
        spawn.Process(
            target=_model_actor,
            args=(config, inference, i, allowance, produced, ready, start),
            daemon=True,
        )
        for i in range(FLAGS.actors)
    ]
    for actor in actors:
        actor.start()
    try:
        while min(ready) == 0:  # the learner keeps running while the actors warm up
            step()
            if not all(actor.is_alive() for actor in actors):
                raise RuntimeError(f"a model actor of variant {variant!r} exited")
        # One round of each actor's unrolls ahead of its share of what the learner consumed.
        slack = config.num_envs_per_actor * config.unroll_length
        trained = 0

        def throttled_step():
            nonlocal trained
            # No step on agent steps not yet acted, as a learner waits on its queue (and a
            # real-time one would otherwise train on while its actors starve).
            while sum(produced) < (trained + steps_per_call) / uses:
                time.sleep(_THROTTLE_SECS)
            step()
            trained += steps_per_call
            allowance.value = trained / uses / FLAGS.actors + slack

        allowance.value = slack
        start.set()
        figures = _windows(throttled_step, steps_per_call)
    finally:
        for actor in actors:
            actor.terminate()
            actor.join(10)
    return {
        "variant": variant,
        "agent_steps_per_s": figures["rate"] / uses,
        "learner_trained_steps_per_s": figures["rate"],
        "learner_cpu_ms": figures["cpu_ms"],
        "learner_cores": figures["cores"],
        "actor_cores": figures["other_cores"],
        "actor_cpu_ms": 1e3 * figures["other_cores"] / (figures["mean_rate"] / uses),
    }


def _limit_stages(config, step, steps_per_call):
    """The limit's stages alone -> (env_raw CPU ms per agent step, {XLA or not: inference's at
    BEST_BATCH}, the learner `step`'s _windows figures)."""
    env_raw = stages.env_raw(config, 2.0, 3)["cpu_ms"]
    candidates = [(BEST_BATCH, True), (BEST_BATCH, False)]
    inference = stages.in_fresh_process(
        stages.inference_with_threads,
        config,
        host_tuning.thread_pools(config, "actor"),
        candidates,
        2.0,
        3,
    )
    inference = {jit: inference[(BEST_BATCH, jit)]["cpu_ms"] for _, jit in candidates}
    return env_raw, inference, _windows(step, steps_per_call)


def main(argv):
    del argv
    config = config_lib.from_flags()
    if not environments.atari_id(config.level_name):
        raise app.UsageError(f"--level_name={config.level_name}: bench.corun needs an Atari game")
    unknown = set(FLAGS.variants) - {"best", "own"}
    if unknown:
        raise app.UsageError(f"--variants: unknown {sorted(unknown)}; choose from best, own")
    uses = stages.uses_per_agent_step(config)
    # The learner stage's process, tuned as a learner whose actors share its host; every stage
    # alone runs under its scheduling too, where it changes nothing (nothing else runs).
    realtime = host_tuning.tune_learner(config, 0, 1, actors_on_host=True)
    step, steps_per_call = _learner_step(config)
    before = _limit_stages(config, step, steps_per_call)
    best_jit = min(before[1], key=before[1].get)  # the model actors' `best` inference
    rows = [
        corun(config, variant, best_jit, step, steps_per_call, uses) for variant in FLAGS.variants
    ]
    after = _limit_stages(config, step, steps_per_call)
    # The cheaper of the two measurements of each stage: a shared machine only slows one down.
    env_raw = min(before[0], after[0])
    inference_best = min(*before[1].values(), *after[1].values())
    alone = min(before[2], after[2], key=lambda figures: figures["cpu_ms"])
    limit = os.cpu_count() * 1e3 / (env_raw + inference_best + uses * alone["cpu_ms"])
    best_actors = "XLA" if best_jit else "plain"
    print(
        f"stages alone, CPU ms per agent step: env_raw {env_raw:.3f}, inference_best "
        f"{inference_best:.3f} (batch {BEST_BATCH}, an actor's thread pools; the best actors' "
        f"{best_actors}), "
        f"learner {alone['cpu_ms']:.3f} per trained step ({alone['rate']:.0f} trained steps/s, "
        f"{alone['cores']:.2f} cores, {'SCHED_FIFO' if realtime else 'normal policy'}); uses "
        f"{uses:g}; limit {limit:.0f} agent steps/s"
    )
    print("variant  agent steps/s  /limit  learner cores  learner ms  actor cores  actor ms")
    for row in rows:
        row["over_limit"] = row["agent_steps_per_s"] / limit
        print(
            f"{row['variant']:7s}  {row['agent_steps_per_s']:13.0f}  {row['over_limit']:6.2f}  "
            f"{row['learner_cores']:13.2f}  {row['learner_cpu_ms']:10.3f}  "
            f"{row['actor_cores']:11.2f}  {row['actor_cpu_ms']:8.3f}"
        )
    print(
        json.dumps(
            {
                "env_raw_cpu_ms": env_raw,
                "inference_best_cpu_ms": inference_best,
                "inference_best_xla": best_jit,
                "learner_cpu_ms": alone["cpu_ms"],
                "learner_alone_trained_steps_per_s": alone["rate"],
                "learner_realtime": realtime,
                "uses": uses,
                "limit": limit,
                "rows": rows,
            }
        )
    )


if __name__ == "__main__":
    app.run(main)
