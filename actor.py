"""An actor: steps N environments with a local copy of the agent, streams unrolls to its learner.

Loop: pull the learner's parameters (one round trip), act T steps on all N environments with
batched inference (one `tf.function` call per step for all envs), push N unrolls (one enqueue).
With --parameter_refresh_steps=k the actor also pulls the newest parameters every k steps
inside an unroll.
Waiting for the learner, reconnecting to a restarted one and giving up are learner_link.py's
(a learner whose parameters, once they moved, stay still for --learner_wait_secs while the
actor's unrolls wait is given up on too: learner_link.StallWatch); the actor exits 0 when the
learner says it reached its frame budget.
"""

import time
import zlib

import numpy as np
import tensorflow as tf
from absl import logging

import environments
import unrolls
from agents import AgentOutput
from learner_link import LEARNER_GONE, StallWatch


def actor_seed(seed, own_address):
    """A seed distinct per actor across all worker sets (task indices repeat between sets)."""
    return (seed * 1_000_003 + zlib.crc32(own_address.encode())) % (2**31 - 1)


class Actor:
    """Acts for one worker set.

    Args:
      config: config.Config.
      agent: the actor's local agent, variables created.
      link: learner_link.LearnerLink of this actor.
      env: vectorised environment of N envs (environments.create_vector_environment).
      name: for log lines, e.g. "actor 1 (127.0.0.1:9002)".
    """

    _LOG_EVERY_SECS = 10

    def __init__(self, config, agent, link, env, name):
        self._config = config
        self._agent = agent
        # All of them, the input statistics too. Sonnet walks its modules at each access.
        self._parameters = agent.variables
        self._link = link
        self._transport = link.transport
        self._env = env
        self._name = name
        self._stall = StallWatch(config.learner_wait_secs, name, link.learner_host)

    def _load(self, parameters):
        for variable, value in zip(self._parameters, parameters, strict=True):
            variable.assign(value)

    def _refresh(self, version):
        """Loads the learner's newest parameters inside an unroll; returns their version.

        A learner that does not answer leaves the parameters as they are: the unroll goes on,
        and its enqueue at the round's end deals with a learner that is gone.
        """
        try:
            published = self._transport.pull_parameters(self._stall.call_timeout_secs())
        except LEARNER_GONE:
            return version
        self._load(published.parameters)
        return published.version

    def run(self):
        """Acts until the learner finishes; returns the process exit code."""
        num_envs = self._config.num_envs_per_actor
        env_output = self._env.initial()
        agent_output = AgentOutput(
            action=np.zeros([num_envs], np.int32),
            policy_logits=np.zeros([num_envs, self._env.num_actions], np.float32),
            baseline=np.zeros([num_envs], np.float32),
        )
        core_state = self._agent.initial_state(num_envs)
        # Traced once for these inputs' shapes and dtypes: a concrete function's call skips
        # tf.function's signature matching, which costs CPU at every step.
        act = tf.function(self._agent.__call__).get_concrete_function(
            agent_output.action, env_output, core_state
        )
        parameters, version, _ = self._link.wait_for_parameters()
        logging.info("%s: connected to learner %s", self._name, self._link.learner_host)
        self._stall.restart()
        refresh_steps = self._config.parameter_refresh_steps
        rounds_sent, last_log, steps_at_log = 0, time.monotonic(), 0
        while True:
            self._load(parameters)
            initial_state = tf.nest.map_structure(np.asarray, core_state)
            env_steps, agent_steps = [env_output], [agent_output]
            versions = []  # The parameters' version at each step.
            for step in range(self._config.unroll_length):
                if refresh_steps and step and step % refresh_steps == 0:
                    version = self._refresh(version)
                versions.append(version)
                agent_output, core_state = act(agent_output.action, env_output, core_state)
                agent_output = tf.nest.map_structure(lambda t: t.numpy(), agent_output)
                env_output = self._env.step(agent_output.action)
                env_steps.append(env_output)
                agent_steps.append(agent_output)
            unroll = unrolls.Unroll(
                agent_state=initial_state,
                env_outputs=unrolls.stack_steps(env_steps),
                agent_outputs=unrolls.stack_steps(agent_steps),
                parameter_version=np.full([num_envs], round(np.mean(versions)), np.int64),
            )
            try:
                self._transport.enqueue(tf.nest.flatten(unroll), self._stall.call_timeout_secs())
                parameters, version, _ = self._transport.pull_parameters(
                    self._stall.call_timeout_secs()
                )
            except LEARNER_GONE as e:
                self._stall.check()
                published = self._link.parameters_after_loss(e)
                if published is None:
                    return 0
                parameters, version, _ = published
                self._stall.restart()
            self._stall.saw(version)
            rounds_sent += 1  # one unroll of each environment
            if time.monotonic() - last_log >= self._LOG_EVERY_SECS:
                steps = rounds_sent * num_envs * self._config.unroll_length
                logging.info(
                    "%s: %d unrolls sent, %.0f agent steps/s, parameter version %d",
                    self._name,
                    rounds_sent * num_envs,
                    (steps - steps_at_log) / (time.monotonic() - last_log),
                    version,
                )
                last_log, steps_at_log = time.monotonic(), steps


def create_env(config, own_address):
    return environments.create_vector_environment(
        config.level_name,
        num_envs=config.num_envs_per_actor,
        seed=actor_seed(config.seed, own_address),
        width=config.width,
        height=config.height,
        sticky_actions=config.sticky_actions,
    )
