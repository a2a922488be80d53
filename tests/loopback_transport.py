"""A learner's and an actor's Transport on real TF servers on loopback, in the test's process,
with a tiny unroll layout: shared by the transport and prefetcher tests."""

import collections

import numpy as np
import tensorflow as tf

import transport
import unrolls
from tools.local_cluster import free_ports

Element = collections.namedtuple("Element", "observation reward")
UNROLL_SPEC = unrolls.UnrollSpec(
    Element(tf.TensorSpec([3, 2, 2], tf.uint8), tf.TensorSpec([3], tf.float32))
)
PARAMETER_SPECS = [((2, 3), tf.float32), ((4,), tf.float32)]


def start_worker_set(parameter_specs, unroll_spec, actor_parameter_specs=None):
    """(learner's HOST:PORT, learner, actor): Transports of one worker set with these layouts
    on new loopback servers, queue of 8; the actor's parameters those of `parameter_specs`
    unless `actor_parameter_specs` (an actor of another agent) are given."""
    learner_port, actor_port = free_ports(2)
    learner_host = f"127.0.0.1:{learner_port}"
    spec = transport.cluster_spec(learner_host, [f"127.0.0.1:{actor_port}"])
    servers = [transport.start_server(spec, "learner", 0), transport.start_server(spec, "actor", 0)]
    learner = transport.Transport(servers[0], "learner", 0, parameter_specs, unroll_spec, 8)
    actor_specs = actor_parameter_specs or parameter_specs
    actor = transport.Transport(servers[1], "actor", 0, actor_specs, unroll_spec, 8)
    return learner_host, learner, actor


def start_learner_and_actor():
    """(learner, actor): start_worker_set with the tiny layout above."""
    _, learner, actor = start_worker_set(PARAMETER_SPECS, UNROLL_SPEC)
    return learner, actor


def unrolls(n, offset):
    """n distinct Elements (batch-major), their values shifted by `offset`."""
    observation = (np.arange(n * 12).reshape(n, 3, 2, 2) + offset).astype(np.uint8)
    reward = np.arange(n * 3, dtype=np.float32).reshape(n, 3) + offset
    return Element(observation, reward)
