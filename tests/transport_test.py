"""Transport over real TF servers on loopback: a learner and an actor, each with its own graph,
session and server (in one test process; experiment_test runs them as separate processes)."""

import socket

import numpy as np
import pytest
import tensorflow as tf

import transport
from tests.loopback_transport import UNROLL_SPEC, start_learner_and_actor, unrolls
from tools.local_cluster import free_ports


@pytest.fixture(scope="module")
def learner_and_actor():
    learner, actor = start_learner_and_actor()
    yield learner, actor
    learner.session.close()
    actor.session.close()


def test_parameters_and_unrolls_cross_between_processes_roles(learner_and_actor):
    learner, actor = learner_and_actor
    with pytest.raises(tf.errors.FailedPreconditionError):
        actor.pull_parameters()  # the learner has not initialised its state yet

    learner.initialize()
    with pytest.raises(tf.errors.FailedPreconditionError, match="not published"):
        actor.pull_parameters()  # initialised to zeros: not the learner's parameters yet
    published = [np.full((2, 3), 1.5, np.float32), np.arange(4, dtype=np.float32)]
    assert learner.publish(published, frames=640) == 1
    pulled, version, frames = actor.pull_parameters()
    assert (version, frames) == (1, 640)
    assert actor.published_frames() == 640
    for want, got in zip(published, pulled, strict=True):
        np.testing.assert_array_equal(got, want)

    first, second = unrolls(3, 0), unrolls(2, 100)
    actor.enqueue(tf.nest.flatten(first))
    actor.enqueue(tf.nest.flatten(second))
    assert learner.queue_size() == 5
    batch = UNROLL_SPEC.pack(learner.dequeue(4, timeout_ms=5000))
    np.testing.assert_array_equal(
        batch.observation, np.concatenate([first.observation, second.observation[:1]])
    )
    np.testing.assert_array_equal(batch.reward, np.concatenate([first.reward, second.reward[:1]]))
    assert learner.queue_size() == 1

    for _ in range(3):  # one unroll left: each wait for the rest times out...
        with pytest.raises(tf.errors.DeadlineExceededError):
            learner.dequeue(4, timeout_ms=200)
    third = unrolls(3, 200)
    actor.enqueue(tf.nest.flatten(third))
    batch = UNROLL_SPEC.pack(learner.dequeue(4, timeout_ms=5000))
    np.testing.assert_array_equal(  # ...and loses nothing: the next batch starts with it
        batch.observation, np.concatenate([second.observation[1:], third.observation])
    )
    assert learner.queue_size() == 0

    assert not actor.training_finished()
    learner.finish()
    assert actor.training_finished()
    with pytest.raises(tf.errors.CancelledError):
        actor.enqueue(tf.nest.flatten(first))


def test_bad_addresses_name_the_flag_and_value():
    with pytest.raises(transport.AddressError, match=r"--learner_host: 'nohost' is not HOST:PORT"):
        transport.cluster_spec("nohost", [])
    with pytest.raises(transport.AddressError, match=r"--actor_hosts: 'a:99999'"):
        transport.cluster_spec("a:1", ["a:99999"])


@pytest.mark.parametrize("address", ["::1:8000", "[::1]:8000", "2001:db8::10:8000"])
def test_ipv6_hosts_are_refused_naming_the_flag(address):
    with pytest.raises(transport.AddressError) as error:
        transport.parse_host_port(address, "learner_host")
    assert str(error.value) == (
        f"--learner_host: {address!r}: IPv6 is not supported; use an IPv4 address or a host name"
    )
    assert transport.parse_host_port("learner.example:8000", "learner_host") == (
        "learner.example",
        8000,
    )


def test_port_in_use_is_reported_before_the_server_aborts():
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        spec = transport.cluster_spec(f"127.0.0.1:{port}", [])
        with pytest.raises(
            transport.AddressError, match=rf"port {port} of 127.0.0.1:{port} is in use"
        ):
            transport.start_server(spec, "learner", 0)


class _DeliveredTwice:
    """Wraps a real session: its next `failures` run() calls fail as TF fails a gRPC request
    that arrived twice (which heavy load causes), then it runs everything normally. The error
    goes through the session's own error handling (`_do_call`), which rewrites some of them."""

    def __init__(
        self, session, failures, message="The same RunGraph (Worker) request was received twice."
    ):
        self._session = session
        self.failures = failures
        self._message = message

    def run(self, fetches, feed_dict=None, options=None):
        if self.failures:
            self.failures -= 1

            def deliver_twice():
                raise tf.errors.AbortedError(None, None, self._message)

            return self._session._do_call(deliver_twice)
        return self._session.run(fetches, feed_dict, options=options)


def test_learner_retries_a_request_the_server_saw_twice(learner_and_actor):
    learner, actor = learner_and_actor
    session = learner.session
    learner.initialize()
    try:
        learner.session = _DeliveredTwice(session, failures=transport._ABORTED_ATTEMPTS - 1)
        version = learner.publish([np.zeros((2, 3), np.float32), np.zeros(4, np.float32)], 0)
        assert version == actor.pull_parameters().version  # the retried publish reached the server
        assert learner.session.failures == 0

        learner.session = _DeliveredTwice(session, failures=transport._ABORTED_ATTEMPTS)
        with pytest.raises(tf.errors.AbortedError, match="received twice"):
            learner.queue_size()  # bounded: the last attempt's error is raised

        # The request quoted in the error holds the published tensors' bytes; when they read
        # like a node reference, the session's error handler raises ValueError from inside its
        # handling of the AbortedError (a Pong run's learner died of it). Retried the same.
        quoted = 'received twice. send { tensor_content: "[[\\374:\\321<\\202" }'
        learner.session = _DeliveredTwice(session, failures=2, message=quoted)
        version = learner.publish([np.ones((2, 3), np.float32), np.ones(4, np.float32)], 0)
        assert version == actor.pull_parameters().version
        assert learner.session.failures == 0
    finally:
        learner.session = session


def test_an_error_quoting_a_whole_published_request_is_retried_and_raised_cut_short(
    learner_and_actor,
):
    """A publish's request delivered twice is quoted in full in its AbortedError: megabytes,
    which TF's own error handler would take days to rewrite."""
    learner, actor = learner_and_actor
    session = learner.session
    learner.initialize()
    quoted = 'The same RunGraph request was received twice. send { tensor_content: "'
    quoted += "\\374\\321" * 1_000_000 + '" }'
    parameters = [np.ones((2, 3), np.float32), np.ones(4, np.float32)]
    try:
        learner.session = _DeliveredTwice(session, failures=2, message=quoted)
        version = learner.publish(parameters, 0)
        assert version == actor.pull_parameters().version and learner.session.failures == 0

        learner.session = _DeliveredTwice(
            session, failures=transport._ABORTED_ATTEMPTS, message=quoted
        )
        with pytest.raises(tf.errors.AbortedError) as raised:
            learner.publish(parameters, 0)
        message = raised.value.message
        assert message.startswith(quoted[: transport._MESSAGE_LIMIT])
        assert message.endswith(f"... ({len(quoted):,} characters)")
        assert len(message) < transport._MESSAGE_LIMIT + 100
    finally:
        learner.session = session


def test_is_serving_tells_a_tf_server_from_a_silent_listener_and_a_closed_port():
    tf_port, silent_port, closed_port = free_ports(3)
    spec = tf.train.ClusterSpec({"learner": [f"127.0.0.1:{tf_port}"]})
    server = tf.distribute.Server(spec, job_name="learner", task_index=0, start=True)
    assert transport.is_serving(f"127.0.0.1:{tf_port}"), server.target
    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", silent_port))
        silent.listen()
        assert not transport.is_serving(f"127.0.0.1:{silent_port}", timeout_secs=1)
    assert not transport.is_serving(f"127.0.0.1:{closed_port}")


def test_a_clients_call_waits_for_the_learner_no_longer_than_its_timeout():
    """An enqueue into a full queue (a learner that takes nothing: stopped, frozen, stuck) fails
    with DeadlineExceededError after its timeout, instead of blocking the actor for ever."""
    learner, actor = start_learner_and_actor()
    try:
        learner.initialize()
        actor.enqueue(tf.nest.flatten(unrolls(8, 0)))  # The queue holds 8.
        with pytest.raises(tf.errors.DeadlineExceededError):
            actor.enqueue(tf.nest.flatten(unrolls(1, 8)), timeout_secs=0.5)
    finally:
        learner.session.close()
        actor.session.close()
