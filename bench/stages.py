"""The system's stages, each timed alone in this process: the project's own, and the raw limit.

Two sets, measured in the same run (bench/throughput.py prints both):
  own stages, as the system runs them:
    env             the actors' vector environment (actor.create_env), random actions;
    inference       tf.function(agent.__call__) at batch --num_envs_per_actor, outputs to
                    numpy, as the actor calls it (in a process of its own, with an actor's
                    TF thread pools: host_tuning.thread_pools);
    learner         the learner's batch step (train_step.train_batch) on a synthetic batch as
                    the configuration trains it: B + round(B x replay ratio) unrolls of T
                    steps (B without replay), numpy arrays as dequeued, in minibatches of
                    one learner's share of --minibatch_unrolls (one_of_learners), with XLA
                    as --xla says (auto: the cheaper), with the learner's thread pools
                    (`learner_pools`: host_tuning.thread_pools);
  the limit, stages no implementation choice of this project can move:
    env_raw         ale-py's AtariVectorEnv alone (same game, preprocessing and frame stack,
                    num_threads = cores, random actions, no wrapper of ours); for other
                    environments, the env stage;
    inference_best  the agent's forward pass, outputs to numpy, at the cheapest of batch
                    8/16/32/64, with and without XLA, with an actor's thread pools and with
                    one kernel thread per core (TF's default scheduling pool);
    learner_best    the learner stage at the cheapest of with and without XLA (the two
                    measured in turn, window by window), with one kernel thread per core and
                    with one kernel thread (and with the learner's pools);
  and the fastest of those learner variants, with the machine to itself:
    learner_fastest the most trained steps/s (not the least CPU): no system with one learner
                    on this machine trains faster than its step alone, so rate / uses bounds
                    its agent steps/s (`learner_ceiling`; several learners:
                    bench/learner_ranks.py).
Each stage gives steps/s (best window) and CPU ms per step (all this process's threads): agent
steps acted for env and inference, agent steps trained on for the learner. A configuration
trains on each agent step `uses` = (B + replayed) / B times, so on a saturated machine an
agent step costs at least env + inference + uses x learner CPU ms, and (`bounds`)
  limit = cores / (env_raw + inference_best + uses x learner_best)   [agent steps/s];
the same bound from the own stages is `cpu_ceiling`, and `ceiling` = 1 / (1/env + 1/inference
+ uses/learner) is their rate run one after another. `packing_bound` is the most any system of
the own actor stages and the learner's measured forms reaches with every core busy.
"""

import concurrent.futures
import dataclasses
import functools
import multiprocessing
import os
import time

import numpy as np
import psutil
import tensorflow as tf

import config as config_lib
import environments
import host_tuning
import replay
import roles
import train_step
from actor import create_env
from tools import random_unrolls

INFERENCE_BATCHES = (8, 16, 32, 64)
# This process's TF thread pools: one kernel thread per core, TF's default scheduling pool.
DEFAULT_POOLS = (os.cpu_count(), 0)
# One kernel thread, TF's default scheduling pool: the learner step's cheapest here (its ops
# unsplit; 0.55-0.59 CPU ms per trained step against 0.67-0.70 with a thread per core).
ONE_KERNEL_THREAD = (1, 0)


def cpu_seconds(processes):
    """CPU seconds the processes used so far; None for the whole machine (all cores)."""
    if processes is None:
        times = psutil.cpu_times()
        return times.user + times.nice + times.system + times.irq + times.softirq + times.steal
    return sum(p.cpu_times().user + p.cpu_times().system for p in processes)


def steps_per_second(step, steps_per_call, window_secs, repeats):
    """Best rate of `step()` over `repeats` windows after a warm-up window (tracing).

    The best, not the median: other work on a shared machine only ever slows a window down.
    Returns a dict: `rate` (agent steps/s), `mean_rate` (over all the windows), `cpu_ms` (CPU
    milliseconds this process spent per agent step, all its threads), `cores` (this process's)
    and `other_cores` (cores the rest of the machine used).
    """
    return steps_per_second_in_turn({"": step}, steps_per_call, window_secs, repeats)[""]


def steps_per_second_in_turn(steps, steps_per_call, window_secs, repeats):
    """steps_per_second of each of `steps` ({name: step}), their windows taken in turn, so that
    a change in the machine's load weighs on every variant alike. -> {name: dict}."""

    def window(step):
        calls, start = 0, time.perf_counter()
        while time.perf_counter() - start < window_secs:
            step()
            calls += 1
        return calls * steps_per_call, time.perf_counter() - start

    for step in steps.values():
        window(step)
    totals = {
        name: {"steps": 0, "secs": 0.0, "own": 0.0, "other": 0.0, "rates": []} for name in steps
    }
    for _ in range(repeats):
        for name, step in steps.items():
            machine, own = cpu_seconds(None), time.process_time()
            calls_steps, secs = window(step)
            own = time.process_time() - own
            total = totals[name]
            total["other"] += cpu_seconds(None) - machine - own
            total["own"] += own
            total["steps"] += calls_steps
            total["secs"] += secs
            total["rates"].append(calls_steps / secs)
    return {
        name: {
            "rate": max(total["rates"]),
            "mean_rate": total["steps"] / total["secs"],
            "cpu_ms": 1e3 * total["own"] / total["steps"],
            "cores": total["own"] / total["secs"],
            "other_cores": total["other"] / total["secs"],
        }
        for name, total in totals.items()
    }


# tf.function of each (agent, XLA or not), traced once per batch: stages timed again and again
# (LimitStages) are not traced again.
_inference_functions = {}


def _env_output(env_output, batch):
    """The first env output's arrays tiled to `batch` environments (inference inputs)."""
    return tf.nest.map_structure(lambda x: np.resize(x, (batch, *np.shape(x)[1:])), env_output)


def _inference(agent, env_output, batch, jit_compile, window_secs, repeats):
    act = _inference_functions.setdefault(
        (id(agent), jit_compile), tf.function(agent.__call__, jit_compile=jit_compile)
    )
    inputs = _env_output(env_output, batch)
    state = {"action": np.zeros([batch], np.int32), "core": agent.initial_state(batch)}

    def inference_step():
        agent_output, state["core"] = act(state["action"], inputs, state["core"])
        state["action"] = tf.nest.map_structure(lambda t: t.numpy(), agent_output).action

    return steps_per_second(inference_step, batch, window_secs, repeats)


def inference_with_threads(config, pools, candidates, window_secs, repeats):
    """{(batch, jit_compile): _inference's figures} of `candidates`, timed with TF's thread
    `pools` (host_tuning.thread_pools). Run it in a fresh process."""
    host_tuning.size_thread_pools(pools)
    agent, _, _, _ = roles.build_agent(config)
    env = create_env(config, "bench")
    try:
        env_output = env.initial()
    finally:
        env.close()
    return {
        candidate: _inference(agent, env_output, *candidate, window_secs, repeats)
        for candidate in candidates
    }


def learner_batch(agent, config, observation_spec, num_actions, rng):
    """A synthetic batch as the learner of `config` trains on: B + round(B x replay ratio)
    random unrolls [N, T+1, ...] (B without replay), numpy arrays as dequeued."""
    return random_unrolls.random_unroll(
        agent,
        observation_spec,
        num_actions,
        config.batch_size + replay.replayed_per_batch(config),
        config.unroll_length,
        rng,
    )


def _learner(config, hvd, agent, observation_spec, num_actions, window_secs, repeats):
    """The batch step, plain and with XLA, measured in turn -> {"plain": ..., "xla": ...}
    (each its own optimizer, so the agent's variables are all they share)."""
    steps = {}
    for name, xla in (("plain", False), ("xla", True)):
        steps[name], trained_per_call = learner_step(
            config, hvd, agent, observation_spec, num_actions, xla
        )
    return steps_per_second_in_turn(steps, trained_per_call, window_secs, repeats)


def learner_with_threads(config, pools, window_secs, repeats):
    """_learner's figures of `config`'s batch step with TF's thread `pools`, without Horovod.
    Run it in a fresh process."""
    host_tuning.size_thread_pools(pools)
    agent, observation_spec, num_actions, _ = roles.build_agent(config)
    hvd = train_step.SingleProcess
    return _learner(config, hvd, agent, observation_spec, num_actions, window_secs, repeats)


def child_process():
    """An executor of one spawned process: a stage timed with other TF thread pools than this
    process's (TF's pools are per process) runs there."""
    spawn = multiprocessing.get_context("spawn")
    return concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn)


def in_fresh_process(function, *args):
    """function(*args) in a child_process that ends with it."""
    with child_process() as process:
        return process.submit(function, *args).result()


def env_raw(config, window_secs, repeats):
    """ale-py's AtariVectorEnv alone, configured as environments.AtariVectorEnvironment does,
    stepped by as many threads as cores."""
    settings = environments.AtariSettings(
        config.level_name, False, config.width, config.height, config.sticky_actions
    )
    env = environments.ale_vector_env(
        settings, config.num_envs_per_actor, num_threads=os.cpu_count()
    )
    env.reset(seed=config.seed)
    num_actions, rng = int(env.single_action_space.n), np.random.default_rng(config.seed)
    try:
        return steps_per_second(
            lambda: env.step(rng.integers(0, num_actions, config.num_envs_per_actor, np.int32)),
            config.num_envs_per_actor,
            window_secs,
            repeats,
        )
    finally:
        env.close()


def measure(
    config,
    hvd,
    agent,
    observation_spec,
    num_actions,
    window_secs,
    repeats,
    learner_pools=DEFAULT_POOLS,
):
    """Every stage of the module docstring, timed alone; returns {name: steps_per_second dict},
    with the configuration each `*_best` stage chose. `learner_pools`: the learner's TF thread
    pools in the system (host_tuning.thread_pools); pools other than this process's are timed
    in a process of their own."""
    rng = np.random.default_rng(config.seed)
    stages = {}
    env = create_env(config, "bench")
    env_output = env.initial()
    try:
        stages["env"] = steps_per_second(
            lambda: env.step(rng.integers(0, num_actions, config.num_envs_per_actor)),
            config.num_envs_per_actor,
            window_secs,
            repeats,
        )
    finally:
        env.close()
    own_inference = (config.num_envs_per_actor, False)  # the actor's batch, no XLA
    candidates = [(size, jit) for size in INFERENCE_BATCHES for jit in (False, True)]
    actor_pools = host_tuning.thread_pools(config, "actor")
    in_actor_pool = in_fresh_process(
        inference_with_threads,
        config,
        actor_pools,
        [own_inference, *(c for c in candidates if c != own_inference)],
        window_secs,
        repeats,
    )
    stages["inference"] = in_actor_pool[own_inference]

    learner = {
        DEFAULT_POOLS: _learner(
            config, hvd, agent, observation_spec, num_actions, window_secs, repeats
        )
    }
    for pools in dict.fromkeys([ONE_KERNEL_THREAD, learner_pools]):
        if pools not in learner:
            learner[pools] = in_fresh_process(
                learner_with_threads, config, pools, window_secs, repeats
            )
    steps = {
        (pools, xla): dict(figures[name], xla=xla, threads=pools[0], scheduling_threads=pools[1])
        for pools, figures in learner.items()
        for name, xla in (("plain", False), ("xla", True))
    }
    stages["learner_best"] = min(steps.values(), key=lambda s: s["cpu_ms"])
    stages["learner_fastest"] = max(steps.values(), key=lambda s: s["rate"])
    # As configured; --xla=auto keeps the cheaper (step_choice.py).
    own = {"on": steps[learner_pools, True], "off": steps[learner_pools, False]}
    stages["learner"] = own.get(config.xla) or min(own.values(), key=lambda s: s["cpu_ms"])

    if environments.atari_id(config.level_name):
        stages["env_raw"] = env_raw(config, window_secs, repeats)
    else:
        stages["env_raw"] = dict(stages["env"], note="not Atari: the env stage")
    # The same candidates with this process's pools, one kernel thread per core (unless an
    # actor's pools are those already).
    measured = {(*c, actor_pools): figures for c, figures in in_actor_pool.items()}
    if actor_pools != DEFAULT_POOLS:
        for size, jit in candidates:
            measured[(size, jit, DEFAULT_POOLS)] = _inference(
                agent, env_output, size, jit, window_secs, repeats
            )
    (size, jit, pools), best = min(measured.items(), key=lambda c: c[1]["cpu_ms"])
    stages["inference_best"] = dict(
        best, batch=size, xla=jit, threads=pools[0], scheduling_threads=pools[1]
    )
    return stages


class LimitStages:
    """The limit's stages at the configurations `measure` chose for them, kept ready to be timed
    again and again (bench.throughput's paired rounds, each beside a window of the system).

    Args:
      config, hvd, agent: as for `measure` (the learner stage trains `agent`'s variables).
      observation_spec, num_actions: of `config`'s environment.
      chosen: `measure`'s result: inference_best's batch, XLA and thread pools, learner_best's
        XLA and thread pools (each stage with pools other than this process's is timed in a
        child process of its own).
    """

    def __init__(self, config, hvd, agent, observation_spec, num_actions, chosen):
        self._config = config
        rng = np.random.default_rng(config.seed)
        if environments.atari_id(config.level_name):
            settings = environments.AtariSettings(
                config.level_name, False, config.width, config.height, config.sticky_actions
            )
            self._env = environments.ale_vector_env(
                settings, config.num_envs_per_actor, num_threads=os.cpu_count()
            )
            self._env.reset(seed=config.seed)
            num_envs = config.num_envs_per_actor
            self._env_step = lambda: self._env.step(
                rng.integers(0, num_actions, num_envs, np.int32)
            )
        else:  # as `measure`: the env stage stands in for env_raw
            self._env = create_env(config, "bench")
            self._env.initial()
            self._env_step = lambda: self._env.step(
                rng.integers(0, num_actions, config.num_envs_per_actor)
            )
        best = chosen["inference_best"]
        self._inference = (
            best["batch"],
            best["xla"],
            (best["threads"], best["scheduling_threads"]),
        )
        # An inference with other thread pools than this process's runs in a child of its own.
        self._child = None
        if self._inference[2] != DEFAULT_POOLS:
            self._child = child_process()
        learner = chosen["learner_best"]
        self._learner = (learner["xla"], (learner["threads"], learner["scheduling_threads"]))
        # So does the learner stage, in another (the two children's pools differ).
        self._learner_child = None
        if self._learner[1] == DEFAULT_POOLS:
            self._learner_step, self._trained_per_step = learner_step(
                config, hvd, agent, observation_spec, num_actions, self._learner[0]
            )
        else:
            self._learner_child = child_process()

    def time(self, window_secs):
        """{stage: CPU ms per agent step} of env_raw, inference_best and learner_best, each over
        one window after a warm-up one (the system that ran before left the caches cold)."""
        figures = {
            "env_raw": steps_per_second(
                self._env_step, self._config.num_envs_per_actor, window_secs, 1
            )
        }
        if self._child is None:
            figures["inference_best"] = _timed_inference(
                self._config, None, *self._inference[:2], window_secs
            )
        else:
            figures["inference_best"] = self._child.submit(
                _timed_inference,
                self._config,
                self._inference[2],
                *self._inference[:2],
                window_secs,
            ).result()
        if self._learner_child is None:
            figures["learner_best"] = steps_per_second(
                self._learner_step, self._trained_per_step, window_secs, 1
            )
        else:
            figures["learner_best"] = self._learner_child.submit(
                _timed_learner, self._config, *self._learner, window_secs
            ).result()
        return {stage: figures[stage]["cpu_ms"] for stage in figures}

    def close(self):
        self._env.close()
        for child in (self._child, self._learner_child):
            if child is not None:
                child.shutdown()


def learner_step(config, hvd, agent, observation_spec, num_actions, xla):
    """(step(): the learner stage's batch step, with XLA or not, on a synthetic batch of
    `config`'s; the agent steps it trains on per call)."""
    rng = np.random.default_rng(config.seed)
    batch = learner_batch(agent, config, observation_spec, num_actions, rng)
    weights = np.ones(len(batch.parameter_version), np.float32)
    optimizer = train_step.make_optimizer(config, tf.Variable(config.learning_rate))
    train_step.create_optimizer_state(optimizer, agent)
    function = train_step.make_batch_step(
        agent,
        optimizer,
        dataclasses.replace(config, xla="on" if xla else "off"),
        hvd,
        train_step.value_target_moments(config),
    )
    unrolls = config_lib.learner_minibatch_unrolls(config.minibatch_unrolls, hvd.size())
    step = functools.partial(
        train_step.train_in_minibatches, function, batch, weights, unrolls, rng
    )
    return step, weights.size * config.unroll_length


def one_of_learners(config, num_learners):
    """`config` as one of `num_learners` learners trains, for its step timed in one process:
    minibatches of its share of --minibatch_unrolls (config.learner_minibatch_unrolls)."""
    share = config_lib.learner_minibatch_unrolls(config.minibatch_unrolls, num_learners)
    return dataclasses.replace(config, minibatch_unrolls=share)


# The learner stage's step of _timed_learner, built once per process.
_learner_state = {}


def _timed_learner(config, xla, pools, window_secs):
    """The learner stage's figures over one window (after a warm-up one), without Horovod; the
    first call in a process sizes its thread `pools` and builds the step, later calls reuse it."""
    if not _learner_state:
        host_tuning.size_thread_pools(pools)
        agent, observation_spec, num_actions, _ = roles.build_agent(config)
        _learner_state["step"] = learner_step(
            config, train_step.SingleProcess, agent, observation_spec, num_actions, xla
        )
    return steps_per_second(*_learner_state["step"], window_secs, 1)


# The agent and inputs of _timed_inference, built once per process.
_inference_state = {}


def _timed_inference(config, pools, batch, jit_compile, window_secs):
    """_inference's figures of one window (after a warm-up one); the first call in a process
    sizes its thread pools (None: as they are) and builds the agent, later calls reuse it."""
    if not _inference_state:
        if pools is not None:
            host_tuning.size_thread_pools(pools)
        agent, _, _, _ = roles.build_agent(config)
        env = create_env(config, "bench")
        try:
            _inference_state.update(agent=agent, env_output=env.initial())
        finally:
            env.close()
    return _inference(
        _inference_state["agent"],
        _inference_state["env_output"],
        batch,
        jit_compile,
        window_secs,
        1,
    )


def better_of(first, second):
    """{name: the better of first[name] and second[name]} of the stages of two `measure` calls:
    the one with the lower CPU ms per step, for learner_fastest the higher rate (other keys are
    dropped)."""

    def better(name):
        if name == "learner_fastest":
            return max(first[name], second[name], key=lambda stage: stage["rate"])
        return min(first[name], second[name], key=lambda stage: stage["cpu_ms"])

    return {name: better(name) for name, stage in first.items() if isinstance(stage, dict)}


def bounds(stages, uses, learner_forms):
    """Agent steps/s bounds of a configuration that trains on each agent step `uses` times:
    `limit` from the raw stages, and from the project's own the `cpu_ceiling` (cores busy),
    the `ceiling` (stages one after another; a stage alone may leave cores idle), the
    `learner_ceiling` (the configuration's learners alone on this host) and the
    `packing_bound` (see packing_bound: every core busy, the learners in their measured forms).

    Args:
      stages: {stage name: figures} of `measure` (better_of).
      uses: trainings of each agent step (replay.uses_per_agent_step).
      learner_forms: [(trained steps/s, CPU ms per trained step)] of the configuration's
        learners alone on this host, the ways they can run (one: learner_best's and
        learner_fastest's; several: their ranks under mpirun, bench.learner_ranks).
    """

    def cpu_bound(env, inference, learner):
        cpu_ms = stages[env]["cpu_ms"] + stages[inference]["cpu_ms"]
        return 1e3 * os.cpu_count() / (cpu_ms + uses * stages[learner]["cpu_ms"])

    own_rates = (stages["env"]["rate"], stages["inference"]["rate"], stages["learner"]["rate"])
    actor_ms = stages["env"]["cpu_ms"] + stages["inference"]["cpu_ms"]
    return {
        "limit": cpu_bound("env_raw", "inference_best", "learner_best"),
        "cpu_ceiling": cpu_bound("env", "inference", "learner"),
        "ceiling": 1 / (1 / own_rates[0] + 1 / own_rates[1] + uses / own_rates[2]),
        "learner_ceiling": max(rate for rate, _ in learner_forms) / uses,
        "packing_bound": packing_bound(actor_ms, learner_forms, uses, os.cpu_count()),
    }


def packing_bound(actor_ms, learner_forms, uses, cores):
    """The most agent steps/s of a system whose actors cost `actor_ms` CPU ms per agent step
    (their own stages alone, env + inference) and whose learners run in one of
    `learner_forms` [(trained steps/s, CPU ms per trained step)], or alternate between two of
    them, with all `cores` busy and nothing lost to sharing them.

    The limit counts the learner at its cheapest form's CPU, but that form may not be fast
    enough: one learner on one kernel thread trains at most learner_best's rate, and a faster
    form (two kernel threads) costs more CPU per trained step. Running learners at trained
    steps/s r between two forms (r1, c1 cores) and (r2, c2 cores) by alternating them costs
    c1 + (c2 - c1) (r - r1) / (r2 - r1) cores; below the slowest form, proportionally less.
    A system of these stages on this machine, however well scheduled, reaches no more.
    """
    rates, cpu_ms = zip(*sorted(learner_forms), strict=True)
    form_cores = [rate * ms / 1e3 for rate, ms in zip(rates, cpu_ms, strict=True)]
    trained = np.linspace(0.0, rates[-1], 10_001)  # trained steps/s, up to the fastest form
    learner_cores = np.interp(trained, (0.0, *rates), (0.0, *form_cores))
    agent_steps = trained / uses
    fits = agent_steps * actor_ms / 1e3 + learner_cores <= cores
    return float(agent_steps[fits].max())
