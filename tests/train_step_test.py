"""The learner's optimizer set-up: creating its state up front changes no later update."""

import dataclasses

import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf

import config as config_lib
import train_step


def linear_and_gradients():
    """A built snt.Linear(3) on [2, 4] inputs and one fixed gradient per variable."""
    module = snt.Linear(3, w_init=tf.constant_initializer(0.5))
    module(tf.ones([2, 4]))
    rng = np.random.default_rng(0)
    gradients = [tf.constant(rng.normal(size=v.shape), tf.float32) for v in module.variables]
    return module, gradients


@pytest.mark.parametrize("optimizer_name", ["adam", "rmsprop"])
def test_the_first_steps_after_create_optimizer_state_are_a_fresh_optimizers(optimizer_name):
    """Three updates with slots made by create_optimizer_state equal three of an optimizer that
    made its slots lazily (Adam: its bias correction counts real steps only)."""
    config = dataclasses.replace(config_lib.Config(), optimizer=optimizer_name)
    results = []
    for prepare in (True, False):
        module, gradients = linear_and_gradients()
        optimizer = train_step.make_optimizer(config, tf.Variable(config.learning_rate))
        if prepare:
            train_step.create_optimizer_state(optimizer, module)
            assert [v.numpy().tolist() for v in module.variables] == [
                v.numpy().tolist() for v in linear_and_gradients()[0].variables
            ], "the zero update moved a variable"
        for _ in range(3):
            optimizer.apply(gradients, module.variables)
        results.append([v.numpy() for v in module.variables])
    for prepared, fresh in zip(*results, strict=True):
        np.testing.assert_allclose(prepared, fresh, rtol=1e-6, atol=1e-9)
