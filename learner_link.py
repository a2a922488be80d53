"""A client's link to its worker set's learner (an actor, the evaluator): the newest parameters,
waiting for a learner that is not (or no longer) there, and telling one that finished training
from one that went away.

A client waits for its learner with a log line every few seconds, for at most
--learner_wait_secs, at start and whenever the learner goes away mid-run (a restarted learner
resumes from its checkpoint); then it gives up with LearnerUnreachableError
(exit_codes.EXIT_LEARNER_LOST, for the frontend's supervisor to restart it). A learner that
answers with another agent (another --agent_name, or another --level_name's actions) is
AgentMismatchError at once, naming both. An actor whose learner's parameters, once they moved,
stay at one version for --learner_wait_secs while its unrolls wait (a learner stopped, frozen or
stuck, which still holds its port) gives up the same way (StallWatch). Only a learner that
reached its frame budget says training is over (transport's `finished` flag): the client then
exits 0.
"""

import time

import tensorflow as tf
from absl import logging

import transport

# Errors of a call to the learner that mean it is not (or no longer) there, not initialised yet,
# or finished: a closed queue fails enqueues with Cancelled/OutOfRange, but a call cut by a
# restarting learner is cancelled too, so the learner's `finished` flag tells which it was.
LEARNER_GONE = (
    tf.errors.UnavailableError,
    tf.errors.FailedPreconditionError,
    tf.errors.AbortedError,
    tf.errors.DeadlineExceededError,
    tf.errors.NotFoundError,
    tf.errors.InternalError,
    tf.errors.CancelledError,
    tf.errors.OutOfRangeError,
)

_LOG_EVERY_SECS = 10
# A call to the learner outlives the stall deadline by this much: when it times out, the
# parameters have been still for the whole --learner_wait_secs.
_CALL_MARGIN_SECS = 1.0


class LearnerUnreachableError(RuntimeError):
    """The learner did not answer within --learner_wait_secs."""


class AgentMismatchError(RuntimeError):
    """The learner trains another agent than this client's (parameters of other shapes)."""


class StallWatch:
    """An actor's watch on its learner's parameter version (`saw` each one it pulls).

    A learner that trains publishes a new version with every batch; one whose version stays put
    for `wait_secs` while the actor's calls wait on it (a full queue, a learner that answers
    nothing) is stalled: `check` then raises LearnerUnreachableError, as for a lost learner.
    The watch counts only once the version has moved since the actor (re)connected: before its
    first step a learner waits for every rank's first batch and compiles its step, which on a
    slow host outlasts a short wait (its own timeouts end a learner stuck there).

    Args:
      wait_secs: --learner_wait_secs.
      name, learner_host: for the error, e.g. "actor 1 (127.0.0.1:9002)", "127.0.0.1:9000".
      clock: time.monotonic, or a test's fake.
    """

    def __init__(self, wait_secs, name, learner_host, clock=time.monotonic):
        self._wait_secs = wait_secs
        self._name, self._learner_host = name, learner_host
        self._clock = clock
        self.restart()

    def restart(self):
        """(Re)connected: the watch waits for the version to move before it counts."""
        self._version, self._since, self._trained = None, self._clock(), False

    def saw(self, version):
        if version != self._version:
            self._trained = self._trained or self._version is not None
            self._version, self._since = version, self._clock()

    def still_secs(self):
        """Seconds since the version last moved (or since `restart`)."""
        return self._clock() - self._since

    def call_timeout_secs(self):
        """How long the next call to the learner may wait: past the moment the version will
        have been still for `wait_secs` (a whole `wait_secs` before it first moved)."""
        left = self._wait_secs - self.still_secs() if self._trained else self._wait_secs
        return max(0.0, left) + _CALL_MARGIN_SECS

    def check(self):
        """Raises LearnerUnreachableError if the version, once it moved, has been still for
        `wait_secs`."""
        still = self.still_secs()
        if self._trained and still >= self._wait_secs:
            raise LearnerUnreachableError(
                f"{self._name}: learner {self._learner_host}'s parameters stayed at version "
                f"{self._version} for {still:.0f} s (--learner_wait_secs={self._wait_secs}) "
                "while this actor's unrolls waited: the learner is stopped, frozen or stuck"
            )


class LearnerLink:
    """The client side of one worker set's transport, seen from `name` (for log lines).

    Args:
      transport: transport.Transport of an actor or the evaluator.
      learner_host: HOST:PORT of the worker set's learner.
      wait_secs: --learner_wait_secs.
      name: e.g. "actor 1 (127.0.0.1:9002)".
    """

    def __init__(self, transport_, learner_host, wait_secs, name):
        self.transport = transport_
        self.learner_host = learner_host
        self._wait_secs = wait_secs
        self._name = name

    def wait_for_parameters(self):
        """Blocks until the learner answers with published parameters; returns them
        (transport.Published). Raises LearnerUnreachableError after --learner_wait_secs."""
        start = time.monotonic()
        last_log = -float("inf")
        while True:
            problem = "no TF server answering"
            if transport.is_serving(self.learner_host):
                try:
                    self._check_agent()
                    return self.transport.pull_parameters()
                except LEARNER_GONE as e:
                    problem = type(e).__name__
                    self.transport.reconnect()
            waited = time.monotonic() - start
            if waited > self._wait_secs:
                raise LearnerUnreachableError(
                    f"{self._name}: learner {self.learner_host} not reachable/"
                    f"initialised after {waited:.0f} s (--learner_wait_secs): {problem}"
                )
            if time.monotonic() - last_log >= _LOG_EVERY_SECS:
                logging.info(
                    "%s: waiting for learner %s (%s, %.0f s so far)",
                    self._name,
                    self.learner_host,
                    problem,
                    waited,
                )
                last_log = time.monotonic()
            time.sleep(1.0)

    def _check_agent(self):
        """Raises AgentMismatchError unless the learner's agent is this client's (the learner's
        signature: FailedPreconditionError before it initialised)."""
        theirs, ours = self.transport.learner_signature(), self.transport.agent_signature
        if theirs != ours:
            raise AgentMismatchError(
                f"{self._name}: learner {self.learner_host} trains "
                f"{transport.signature_summary(theirs)}, this process has "
                f"{transport.signature_summary(ours)}: give every worker of the set the same "
                "--agent_name, --level_name, --width, --height and --normalize_input"
            )

    def parameters_after_loss(self, error):
        """After a call to the learner failed with `error` (one of LEARNER_GONE): None if the
        learner finished training, else its parameters once it is back (wait_for_parameters)."""
        if self.learner_finished():
            logging.info("%s: learner finished training; exiting", self._name)
            return None
        logging.warning(
            "%s: lost learner %s (%s); reconnecting",
            self._name,
            self.learner_host,
            type(error).__name__,
        )
        published = self.wait_for_parameters()
        logging.info("%s: reconnected to learner", self._name)
        return published

    def take_final_parameters(self):
        """Tells the learner, which serves until then, that this client holds the parameters
        that end training; a learner already gone needs no word."""
        try:
            self.transport.take_final_parameters()
        except LEARNER_GONE as e:
            logging.info(
                "%s: learner gone before the final parameters' receipt (%s)",
                self._name,
                type(e).__name__,
            )

    def learner_finished(self):
        try:
            return self.transport.training_finished()
        except tf.errors.OpError:
            return False
