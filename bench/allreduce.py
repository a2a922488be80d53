"""Per-step Horovod allreduce cost of the learners' gradients, against the train step itself.

Run under mpirun with 2 (or more) ranks:
  mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
      .venv/bin/python -m bench.allreduce [--agents=SimpleConvNetAgent,ResNetLSTMAgent]

For each agent (Atari shapes: 84x84x4 frames, 6 actions) every rank times, in the same run:
  - `allreduce`: summing a gradient-sized list of tensors across ranks inside a tf.function
    with one grouped allreduce, as the learner does every step (train_step.sum_over_ranks);
  - `train step`: the learner's full step (train_step.make_update: actor-critic loss, summed
    gradients, optimizer) with the default Config on a synthetic batch of B unrolls of T steps.
Rank 0 prints a table with both (median ms) and their ratio, then one JSON line.
"""

import faulthandler
import json
import signal
import time

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf
from absl import app, flags

import agents
import config as config_lib
import train_step
import unrolls
from tools import random_unrolls

flags.DEFINE_list("agents", ["SimpleConvNetAgent", "ResNetLSTMAgent"], "Agents to measure.")
flags.DEFINE_integer("batch_size", 32, "B of the synthetic train batch.")
flags.DEFINE_integer("unroll_length", 20, "T of the synthetic train batch.")
flags.DEFINE_integer("repeats", 20, "Timed repetitions (after 3 warm-up ones).")
flags.DEFINE_enum(
    "compression", "none", ["none", "fp16"], "Horovod's gradient compression for the allreduce."
)
flags.DEFINE_bool("train_step", True, "Also time the train step (ranks share this machine).")
flags.DEFINE_bool("xla", True, "Compile the timed train step with XLA (see step_choice.py).")
FLAGS = flags.FLAGS

NUM_ACTIONS, FRAME_SHAPE = 6, (84, 84, 4)


def median_ms(fn, repeats):
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    # Every rank reports the median of the slowest rank: a step is as slow as its slowest rank.
    return float(hvd.allreduce(tf.constant(np.median(times) * 1e3), op=hvd.Max, name="time"))


def measure(agent_name, rng):
    agent = agents.agent_factory(agent_name)(NUM_ACTIONS)
    unroll = random_unrolls.random_unroll(
        agent, (FRAME_SHAPE, np.uint8), NUM_ACTIONS, FLAGS.batch_size, FLAGS.unroll_length, rng
    )
    inputs = unrolls.to_time_major(unroll)
    agent.unroll(inputs.agent_outputs.action, inputs.env_outputs, inputs.agent_state)
    config = config_lib.Config()
    optimizer = train_step.make_optimizer(config, tf.Variable(config.learning_rate))
    train_step.create_optimizer_state(optimizer, agent)
    step = tf.function(train_step.make_update(agent, optimizer, config, hvd, FLAGS.xla))

    compression = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16}
    compression = compression[FLAGS.compression]

    @tf.function
    def allreduce(tensors):
        return hvd.grouped_allreduce(tensors, op=hvd.Sum, compression=compression)

    variables = agent.trainable_variables
    gradients = [tf.random.normal(v.shape) for v in variables]
    batch = tf.nest.map_structure(tf.convert_to_tensor, unroll)
    weights = tf.ones([FLAGS.batch_size])
    result = {
        "agent": agent_name,
        "parameters": int(sum(np.prod(v.shape) for v in variables)),
        "allreduce_ms": median_ms(lambda: allreduce(gradients), FLAGS.repeats),
    }
    if FLAGS.train_step:
        # The train step includes the allreduce (train_step.sum_over_ranks).
        result["train_step_ms"] = median_ms(lambda: step(batch, weights), FLAGS.repeats)
    return result


def main(argv):
    del argv
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # bench.scaling: a stuck run's stacks
    hvd.init()
    rng = np.random.default_rng(hvd.rank())
    results = [measure(name, rng) for name in FLAGS.agents]
    if hvd.rank() != 0:
        return
    print(
        f"{hvd.size()} ranks, B={FLAGS.batch_size}, T={FLAGS.unroll_length}, "
        f"compression {FLAGS.compression}"
    )
    print(f"{'agent':<22}{'parameters':>12}{'allreduce ms':>14}{'train step ms':>15}{'ratio':>8}")
    for r in results:
        line = f"{r['agent']:<22}{r['parameters']:>12,}{r['allreduce_ms']:>14.1f}"
        if "train_step_ms" in r:
            r["allreduce_per_train_step"] = r["allreduce_ms"] / r["train_step_ms"]
            line += f"{r['train_step_ms']:>15.1f}{r['allreduce_per_train_step']:>8.3f}"
        print(line)
    print(json.dumps({"ranks": hvd.size(), "compression": FLAGS.compression, "results": results}))


if __name__ == "__main__":
    app.run(main)
