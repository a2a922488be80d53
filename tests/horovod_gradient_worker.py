"""The summed-gradient check of horovod_test, in two modes.

mpirun -np 2 python -m tests.horovod_gradient_worker ranks OUT_DIR
    Each rank builds the learner's agent (MLPAgent, CartPole shapes) with its own random
    weights, takes rank 0's by broadcast, makes its own random batch (seeded by its rank) and
    runs the learner's `loss_gradients`, which sums over ranks with one grouped allreduce
    (train_step.sum_over_ranks). Saves weights and summed gradients to OUT_DIR/rank<r>.npz.
python -m tests.horovod_gradient_worker local OUT_DIR
    One process (one Horovod rank, nothing summed): loads rank 0's weights and computes the
    same loss's gradients on each rank's batch separately; saves them to OUT_DIR/local.npz.
"""

import sys

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

from tests.horovod_gradient_check import LOSS_CONFIG, build_agent, random_unroll
from train_step import loss_gradients

NUM_RANKS = 2


def gradients_on(agent, unroll):
    gradients, _, _, _ = tf.function(lambda u: loss_gradients(agent, u, LOSS_CONFIG, hvd))(unroll)
    return [g.numpy() for g in gradients]


def ranks(out_dir):
    tf.random.set_seed(100 + hvd.rank())  # different initial weights: the broadcast must fix it
    agent = build_agent()
    hvd.broadcast_variables(agent.variables, root_rank=0)
    gradients = gradients_on(agent, random_unroll(agent, seed=hvd.rank()))
    np.savez(
        f"{out_dir}/rank{hvd.rank()}.npz",
        **{f"weight{i}": v.numpy() for i, v in enumerate(agent.trainable_variables)},
        **{f"gradient{i}": g for i, g in enumerate(gradients)},
    )


def local(out_dir):
    assert hvd.size() == 1, "local mode runs without mpirun"
    agent = build_agent()
    weights = np.load(f"{out_dir}/rank0.npz")
    for i, variable in enumerate(agent.trainable_variables):
        variable.assign(weights[f"weight{i}"])
    saved = {}
    for rank in range(NUM_RANKS):
        gradients = gradients_on(agent, random_unroll(agent, seed=rank))
        saved.update({f"rank{rank}_gradient{i}": g for i, g in enumerate(gradients)})
    np.savez(f"{out_dir}/local.npz", **saved)


if __name__ == "__main__":
    hvd.init()
    {"ranks": ranks, "local": local}[sys.argv[1]](sys.argv[2])
