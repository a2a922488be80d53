"""An actor: steps N environments with a local copy of the agent, streams unrolls to its learner.

Loop: pull the learner's parameters (one round trip), act T steps on all N environments with
batched inference (one `tf.function` call per step for all envs), push N unrolls (one enqueue).
With --parameter_refresh_steps=k the actor also pulls the newest parameters every k steps
inside an unroll.
The actor waits for its learner with a log line every few seconds, for at most
--learner_wait_secs; it reconnects the same way if the learner goes away mid-run (e.g. a
restarted learner resumes from its checkpoint), and exits 0 when the learner closes the queue
at the end of training.
"""

import time
import zlib

import numpy as np
import tensorflow as tf
from absl import logging

import environments
import transport
import unrolls
from agents import AgentOutput

# Errors of a call to the learner that mean it is not (or no longer) there, not initialised yet,
# or finished: a closed queue fails enqueues with Cancelled/OutOfRange, but a call cut by a
# restarting learner is cancelled too, so the learner's `finished` flag tells which it was.
_LEARNER_GONE = (
    tf.errors.UnavailableError,
    tf.errors.FailedPreconditionError,
    tf.errors.AbortedError,
    tf.errors.DeadlineExceededError,
    tf.errors.NotFoundError,
    tf.errors.InternalError,
    tf.errors.CancelledError,
    tf.errors.OutOfRangeError,
)


class LearnerUnreachableError(RuntimeError):
    """The learner did not answer within --learner_wait_secs."""


def actor_seed(seed, own_address):
    """A seed distinct per actor across all worker sets (task indices repeat between sets)."""
    return (seed * 1_000_003 + zlib.crc32(own_address.encode())) % (2**31 - 1)


class Actor:
    """Acts for one worker set.

    Args:
      config: config.Config.
      agent: the actor's local agent, variables created.
      transport: transport.Transport, actor side.
      env: vectorised environment of N envs (environments.create_vector_environment).
      name: for log lines, e.g. "actor 1 (127.0.0.1:9002)".
      learner_host: HOST:PORT of this worker set's learner.
    """

    _LOG_EVERY_SECS = 10

    def __init__(self, config, agent, transport, env, name, learner_host):
        self._config = config
        self._learner_host = learner_host
        self._agent = agent
        self._parameters = agent.trainable_variables  # Sonnet walks its modules at each access.
        self._transport = transport
        self._env = env
        self._name = name

    def _wait_for_learner(self):
        """Blocks until the learner answers with initialised parameters; returns them."""
        start = time.monotonic()
        last_log = -float("inf")
        while True:
            problem = "not listening"
            if transport.is_listening(self._learner_host):
                try:
                    return self._transport.pull_parameters()
                except _LEARNER_GONE as e:
                    problem = type(e).__name__
                    self._transport.reconnect()
            waited = time.monotonic() - start
            if waited > self._config.learner_wait_secs:
                raise LearnerUnreachableError(
                    f"{self._name}: learner {self._learner_host} not reachable/"
                    f"initialised after {waited:.0f} s (--learner_wait_secs): {problem}"
                )
            if time.monotonic() - last_log >= self._LOG_EVERY_SECS:
                logging.info(
                    "%s: waiting for learner %s (%s, %.0f s so far)",
                    self._name,
                    self._learner_host,
                    problem,
                    waited,
                )
                last_log = time.monotonic()
            time.sleep(1.0)

    def _load(self, parameters):
        for variable, value in zip(self._parameters, parameters, strict=True):
            variable.assign(value)

    def _refresh(self, version):
        """Loads the learner's newest parameters inside an unroll; returns their version.

        A learner that does not answer leaves the parameters as they are: the unroll goes on,
        and its enqueue at the round's end deals with a learner that is gone.
        """
        try:
            parameters, version = self._transport.pull_parameters()
        except _LEARNER_GONE:
            return version
        self._load(parameters)
        return version

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
        # tf.function's signature matching, ~0.25 of ~2.8 CPU ms per call at 8 games.
        act = tf.function(self._agent.__call__).get_concrete_function(
            agent_output.action, env_output, core_state
        )
        parameters, version = self._wait_for_learner()
        logging.info("%s: connected to learner %s", self._name, self._learner_host)
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
                self._transport.enqueue(tf.nest.flatten(unroll))
                parameters, version = self._transport.pull_parameters()
            except _LEARNER_GONE as e:
                if self._learner_finished():
                    logging.info("%s: learner finished training; exiting", self._name)
                    return 0
                logging.warning(
                    "%s: lost learner %s (%s); reconnecting",
                    self._name,
                    self._learner_host,
                    type(e).__name__,
                )
                parameters, version = self._wait_for_learner()
                logging.info("%s: reconnected to learner", self._name)
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

    def _learner_finished(self):
        try:
            return self._transport.training_finished()
        except tf.errors.OpError:
            return False


def create_env(config, own_address):
    return environments.create_vector_environment(
        config.level_name,
        num_envs=config.num_envs_per_actor,
        seed=actor_seed(config.seed, own_address),
        width=config.width,
        height=config.height,
        sticky_actions=config.sticky_actions,
    )
