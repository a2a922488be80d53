"""What an update costs the learner: its Adam against Sonnet's, and a batch in minibatches.

  .venv/bin/python -m bench.update_cost [--agent_name=SimpleConvNetAgent] [--updates=200]

  adam         train_step.FusedAdam (TF's fused kernel) and Sonnet's Adam update copies of the
               agent's variables with the same random gradients (as tf.function, as the
               learner's step runs them): CPU ms per update of each, their ratio, and the
               largest difference between the two copies after the timed updates (they must
               agree);
  minibatches  the learner's train step on the configuration's batch (B + round(B x replay
               ratio) random unrolls of T steps) in one step and in minibatches of 4, 2 and 1
               unrolls (train_step.train_in_minibatches): CPU ms per batch, and its ratio to
               one step.

CPU ms count all threads of this process, so a busy machine inflates every figure alike; the
ratios are what to read.
"""

import functools
import time

import numpy as np
import sonnet as snt
import tensorflow as tf
from absl import app, flags

import config as config_lib
import experiment
import train_step
from bench import stages

flags.DEFINE_integer("updates", 200, "Timed Adam updates per optimizer.")
flags.DEFINE_integer("batches", 10, "Timed batches per minibatch size.")
config_lib.define_flags()
FLAGS = flags.FLAGS
MINIBATCH_UNROLLS = (0, 4, 2, 1)  # 0: the whole batch in one step


def cpu_ms_per_call(function, calls):
    function()  # traces, creates slots
    start = time.process_time()
    for _ in range(calls):
        function()
    return 1e3 * (time.process_time() - start) / calls


def adam_costs(agent, config, rng):
    gradients = [
        tf.constant(rng.normal(scale=1e-2, size=v.shape), tf.float32)
        for v in agent.trainable_variables
    ]
    copies, times = {}, {}
    for name, optimizer in (
        ("sonnet", snt.optimizers.Adam(config.learning_rate, epsilon=config.epsilon)),
        ("fused", train_step.FusedAdam(config.learning_rate, epsilon=config.epsilon)),
    ):
        variables = copies[name] = [tf.Variable(v) for v in agent.trainable_variables]
        apply = tf.function(functools.partial(optimizer.apply, gradients, variables))
        times[name] = cpu_ms_per_call(apply, FLAGS.updates)
    difference = max(
        float(tf.reduce_max(tf.abs(a - b)))
        for a, b in zip(copies["sonnet"], copies["fused"], strict=True)
    )
    return times, difference


def minibatch_costs(agent, config, observation_spec, num_actions, rng):
    batch = stages.learner_batch(agent, config, observation_spec, num_actions, rng)
    weights = np.ones(len(batch.parameter_version), np.float32)
    step, _ = train_step.single_process_step(agent, config)
    return len(weights), {
        size: cpu_ms_per_call(
            lambda size=size: train_step.train_in_minibatches(step, batch, weights, size, rng),
            FLAGS.batches,
        )
        for size in MINIBATCH_UNROLLS
    }


def main(argv):
    del argv
    config = config_lib.from_flags()
    agent, observation_spec, num_actions, _ = experiment.build_agent(config)
    rng = np.random.default_rng(config.seed)
    parameters = sum(int(np.prod(v.shape)) for v in agent.trainable_variables)
    times, difference = adam_costs(agent, config, rng)
    print(
        f"adam: {config.agent_name} ({parameters:,} parameters), {FLAGS.updates} updates: "
        f"Sonnet's {times['sonnet']:.2f} CPU ms/update, fused {times['fused']:.2f} "
        f"(x{times['sonnet'] / times['fused']:.2f} less); largest difference after them "
        f"{difference:.1e}"
    )
    num_unrolls, costs = minibatch_costs(agent, config, observation_spec, num_actions, rng)
    print(
        f"minibatches: a batch of {num_unrolls} unrolls of {config.unroll_length} steps, in "
        + ", ".join(
            f"{'one step' if size == 0 else f'minibatches of {size}'}: {ms:.0f} CPU ms "
            f"(x{ms / costs[0]:.2f})"
            for size, ms in costs.items()
        )
    )


if __name__ == "__main__":
    app.run(main)
