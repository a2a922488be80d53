"""The distributed-TF transport of one worker set: parameters and an unroll queue on the learner.

Every process of a worker set (the learner, its actors and its evaluator, if any) runs a
`tf.distribute.Server` of the cluster {"learner": [learner], "actor": [actors], "evaluator":
[evaluator]} and builds the same small TF1 graph whose state lives on the learner's server
(/job:learner/task:0/cpu:0):

  - one resource variable per agent parameter, plus `version` (int64, bumped on every publish),
    `environment_frames` (int64, the training frames of the published parameters),
    `finished` (bool, set by the learner before it closes the queue), `final_taken` (bool, set
    by the evaluator once it holds the parameters that end training, which the learner serves
    until then) and `agent_signature` (string: the learner's agent and its parameters' shapes,
    which a client compares with its own before it reads any parameter: variables of another
    agent's shapes would be read as they are, or not be there at all);
  - FIFOQueue(shared_name="unrolls") of unrolls.

Resource variables and the queue are shared between processes by name, so an actor's graph
reaches the learner's state; the learner alone initialises it (actors see
FailedPreconditionError until then). TF1-style graphs and sessions because fully eager remote
execution (tf.config.experimental_connect_to_cluster) does not share a queue between client
processes.

Unrolls travel as flat lists of numpy arrays (see `unrolls.UnrollSpec`), one queue element per
environment: an actor enqueues [N, ...] for its N environments, the learner dequeues [B, ...].
"""

import collections
import contextlib
import socket
import threading
import time

import numpy as np
import tensorflow as tf
from absl import logging

LEARNER_DEVICE = "/job:learner/task:0/cpu:0"
# The flag that gives each job's addresses: named by errors about them.
ADDRESS_FLAGS = {"learner": "learner_host", "actor": "actor_hosts", "evaluator": "evaluator_host"}
_ABORTED_ATTEMPTS = 5
# Longer error messages are raised cut to this many characters, without TF's rewriting.
_MESSAGE_LIMIT = 4096


def _aborted_error(error):
    """The AbortedError that `error` is or hides, else None.

    The AbortedError of a request delivered twice quotes the request, tensor bytes included.
    When those bytes happen to look like a node reference ("[[" ... ":"), session.run's error
    handler looks the "node" up, and the graph raises ValueError ("appears to refer to a
    Tensor") from inside that handler: the AbortedError is then that ValueError's context.
    """
    if isinstance(error, tf.errors.AbortedError):
        return error
    if isinstance(error.__context__, tf.errors.AbortedError):
        return error.__context__
    return None


def _raise(error):
    raise error


class _Session(tf.compat.v1.Session):
    """A Session that raises an error whose message is long cut short, as it is.

    The AbortedError of a request delivered twice quotes the whole request: for a publish or an
    enqueue, megabytes of tensor bytes. Session's error handler (`_do_call`) rewrites messages
    with a regex search whose time grows with the square of their length: days for those, so
    the process would hang in the handler until a watchdog ended it. A message's first
    _MESSAGE_LIMIT characters say what failed; shorter messages get TF's handling as before.
    """

    def _do_call(self, fn, *args):
        try:
            return fn(*args)
        except tf.errors.OpError as error:
            if len(error.message) <= _MESSAGE_LIMIT:
                return super()._do_call(_raise, error)
            cut = f"{error.message[:_MESSAGE_LIMIT]}... ({len(error.message):,} characters)"
            raise type(error)(error.node_def, error.op, cut) from None


# What the learner publishes: its parameters (list of numpy arrays), their version (int, 1 at
# the first publish) and the environment frames (over all learners) they were trained on.
Published = collections.namedtuple("Published", ["parameters", "version", "frames"])


def signature(agent_description, parameter_specs):
    """'MLPAgent, 2 actions (6 parameters, 4,610 values): 4x64 64 ...': an agent and the shapes
    of its parameters (a list of (shape, dtype)), as the learner publishes them."""
    shapes = [tf.TensorShape(shape).as_list() for shape, _ in parameter_specs]
    values = sum(int(np.prod(shape)) for shape in shapes)
    return f"{agent_description} ({len(shapes)} parameters, {values:,} values): " + " ".join(
        "x".join(map(str, shape)) or "scalar" for shape in shapes
    )


def signature_summary(agent_signature):
    """A `signature` without its shapes: 'MLPAgent, 2 actions (6 parameters, 4,610 values)'."""
    return agent_signature.rpartition("): ")[0] + ")"


class AddressError(ValueError):
    """A host:port string that cannot be used."""


def parse_host_port(address, flag_name):
    """'10.0.0.1:8001' -> ('10.0.0.1', 8001), or AddressError naming the flag and the value.

    IPv6 hosts ('::1:8001', '[::1]:8001') are not supported: refused here, by name, rather than
    left to hang the worker that is given one.
    """
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise AddressError(f"--{flag_name}: {address!r} is not HOST:PORT (PORT in 1..65535)")
    if ":" in host or host.startswith("["):
        raise AddressError(
            f"--{flag_name}: {address!r}: IPv6 is not supported; use an IPv4 address or a host name"
        )
    return host, int(port)


# A client's HTTP/2 connection preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5).
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_HTTP2_SETTINGS_FRAME = 4  # the frame type of a server's first frame, its connection preface


def is_serving(address, timeout_secs=2.0):
    """Whether a gRPC (HTTP/2) server answers at HOST:PORT within `timeout_secs`: it must reply
    to a client's connection preface with its SETTINGS frame.

    Checked before a session call that needs the learner: TF blocks creating the session (no
    RunOptions timeout applies) when nothing listens there, and when whatever listens does not
    answer as a TF server.
    """
    host, port = parse_host_port(address, "learner_host")
    deadline = time.monotonic() + timeout_secs
    try:
        with socket.create_connection((host, port), timeout=timeout_secs) as connection:
            connection.sendall(_HTTP2_PREFACE)
            header = b""
            while len(header) < 9:  # a frame header: length (3 bytes), type, flags, stream
                connection.settimeout(max(1e-3, deadline - time.monotonic()))
                chunk = connection.recv(9 - len(header))
                if not chunk:
                    return False
                header += chunk
    except OSError:  # refused, unreachable, or no answer in time
        return False
    return header[3] == _HTTP2_SETTINGS_FRAME


def cluster_spec(learner_host, actor_hosts, evaluator_host=None):
    """tf.train.ClusterSpec of one worker set (with its evaluator unless `evaluator_host` is
    None); validates every address first."""
    jobs = {"learner": [learner_host]}
    if actor_hosts:
        jobs["actor"] = list(actor_hosts)
    if evaluator_host is not None:
        jobs["evaluator"] = [evaluator_host]
    for job, addresses in jobs.items():
        for address in addresses:
            parse_host_port(address, ADDRESS_FLAGS[job])
    return tf.train.ClusterSpec(jobs)


def ensure_port_free(address, flag_name):
    """Raises AddressError if this process cannot listen on the port of `address`.

    tf.distribute.Server aborts the whole process on a busy port; checking first turns that
    into a one-line error naming the culprit.
    """
    _, port = parse_host_port(address, flag_name)
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as e:
            raise AddressError(f"--{flag_name}: port {port} of {address} is in use ({e})") from e


def start_server(spec, job_name, task):
    """Starts this process's TF server in `spec` and returns it."""
    address = spec.task_address(job_name, task)
    ensure_port_free(address, ADDRESS_FLAGS[job_name])
    return tf.distribute.Server(spec, job_name=job_name, task_index=task, start=True)


class Transport:
    """The shared graph and a session on this process's server.

    Args:
      server: this process's tf.distribute.Server.
      job_name: "learner", "actor" or "evaluator" (a client's session only sees the learner and
        itself).
      task: this process's task index in its job.
      parameter_specs: list of (shape, dtype) of the agent's trainable variables, in order.
      unroll_spec: unrolls.UnrollSpec of one unroll.
      queue_capacity: unrolls the queue holds before enqueue blocks.
      agent_description: names the agent in `agent_signature`, e.g. Agent.describe()'s
        "MLPAgent, 2 actions".
      call_timeout_secs: a client's call to the learner that gets no answer in this long
        fails with DeadlineExceededError (a stopped or frozen learner answers nothing, and an
        unbounded call would wait for it forever); None: no bound (the learner's own calls).
    """

    def __init__(
        self,
        server,
        job_name,
        task,
        parameter_specs,
        unroll_spec,
        queue_capacity,
        agent_description="an agent",
        call_timeout_secs=None,
    ):
        self.unroll_spec = unroll_spec
        self._call_timeout_secs = call_timeout_secs
        self.agent_signature = signature(agent_description, parameter_specs)
        self._server = server
        self._config = tf.compat.v1.ConfigProto(
            device_filters=["/job:learner/task:0", f"/job:{job_name}/task:{task}"]
        )
        self.graph = tf.Graph()
        with self.graph.as_default(), tf.device(LEARNER_DEVICE):
            self._parameters = [
                tf.Variable(tf.zeros(shape, dtype), name=f"parameter_{i}")
                for i, (shape, dtype) in enumerate(parameter_specs)
            ]
            self._version = tf.Variable(tf.constant(0, tf.int64), name="parameter_version")
            self._frames = tf.Variable(tf.constant(0, tf.int64), name="environment_frames")
            self._finished = tf.Variable(False, name="training_finished")
            self._final_taken = tf.Variable(False, name="final_parameters_taken")
            # Initialised by the learner alone, so to the learner's signature.
            self._signature = tf.Variable(self.agent_signature, name="agent_signature")
            self._init = tf.compat.v1.variables_initializer(
                self._parameters
                + [self._version, self._frames, self._finished, self._final_taken, self._signature]
            )
            self._queue = tf.queue.FIFOQueue(
                queue_capacity,
                [s.dtype for s in unroll_spec.specs],
                shapes=[s.shape for s in unroll_spec.specs],
                shared_name="unrolls",
                name="unrolls",
            )
            # Publish: assign all parameters, then bump the version (control dependency so a
            # reader that sees the new version never sees old parameters of that version).
            self._parameter_feeds = [
                tf.compat.v1.placeholder(dtype, shape) for shape, dtype in parameter_specs
            ]
            assigns = [
                v.assign(f) for v, f in zip(self._parameters, self._parameter_feeds, strict=True)
            ]
            self._frames_feed = tf.compat.v1.placeholder(tf.int64, [])
            assigns.append(self._frames.assign(self._frames_feed))
            with tf.control_dependencies(assigns):
                self._publish = self._version.assign_add(1)
            self._read_parameters = Published(
                [v.read_value() for v in self._parameters],
                self._version.read_value(),
                self._frames.read_value(),
            )
            self._read_frames = self._frames.read_value()
            self._unroll_feeds = [
                tf.compat.v1.placeholder(s.dtype, [None] + s.shape.as_list())
                for s in unroll_spec.specs
            ]
            self._enqueue = self._queue.enqueue_many(self._unroll_feeds)
            self._batch_size = tf.compat.v1.placeholder(tf.int32, [])
            self._dequeue = self._queue.dequeue_many(self._batch_size)
            # One unroll (a wait for it may time out and take nothing), then how many others
            # wait (read after the take): dequeue_many of those cannot block.
            self._dequeue_one = self._queue.dequeue()
            with tf.control_dependencies(self._dequeue_one):
                self._size_after_dequeue_one = self._queue.size()
            self._size = self._queue.size()
            self._mark_finished = self._finished.assign(True)
            self._read_finished = self._finished.read_value()
            self._mark_final_taken = self._final_taken.assign(True)
            self._read_final_taken = self._final_taken.read_value()
            self._read_signature = self._signature.read_value()
            self._close = self._queue.close(cancel_pending_enqueues=True)
        # Unrolls (flat lists of [k, ...] arrays) a timed-out dequeue had taken: the next batch's.
        self._taken = []
        self.session = self._new_session()

    def _new_session(self):
        return _Session(self._server.target, graph=self.graph, config=self._config)

    def reconnect(self):
        """A fresh session, e.g. after the learner restarted (the old one may hold dead state)."""
        self.close()
        self.session = self._new_session()

    def close(self):
        """Closes the session on a daemon thread: closing one whose learner is gone waits on
        the dead peer for minutes, and neither a reconnect nor the process's exit may wait."""
        threading.Thread(target=self.session.close, name="close-session", daemon=True).start()

    # Learner side.

    def _run_learner_op(self, fetches, feed_dict=None, options=None):
        """session.run of a learner operation, retried when the request was delivered twice.

        Under heavy CPU load gRPC can deliver one request twice; the TF server then rejects
        the second with AbortedError ("The same RunGraph (Worker) request was received twice")
        although the learner and its server are fine. The learner's own operations are safe to
        run again: publish and size are idempotent, and a repeated dequeue loses at most the
        batch whose reply was lost.
        """
        for attempt in range(1, _ABORTED_ATTEMPTS + 1):
            try:
                return self.session.run(fetches, feed_dict, options=options)
            except (tf.errors.AbortedError, ValueError) as e:
                aborted = _aborted_error(e)
                if aborted is None or attempt == _ABORTED_ATTEMPTS:
                    raise
                logging.warning(
                    "learner transport: %s aborted (%s); retrying (%d/%d)",
                    getattr(fetches, "name", "operation"),
                    aborted.message.splitlines()[0][:120],
                    attempt,
                    _ABORTED_ATTEMPTS - 1,
                )

    def initialize(self):
        self._run_learner_op(self._init)

    def publish(self, parameters, frames):
        """Publishes a list of numpy arrays as the new parameters, trained on `frames`
        environment frames (over all learners); returns the new version."""
        feeds = dict(zip(self._parameter_feeds, parameters, strict=True))
        return self._run_learner_op(self._publish, {**feeds, self._frames_feed: frames})

    def dequeue(self, batch_size, timeout_ms):
        """[batch_size, ...] flat list of numpy arrays; raises DeadlineExceededError on timeout
        and OutOfRangeError once the queue is closed (and holds no whole batch).

        Waits in TF for one unroll at a time, then takes the others already queued at once:
        no polling, and a wait that times out takes nothing (a dequeue_many that times out
        drops the unrolls it had taken). Unrolls taken before a timeout stay for the next
        call. Assumes one consumer (the learner).
        """
        deadline = time.monotonic() + timeout_ms / 1000
        taken = sum(len(part[0]) for part in self._taken)
        while taken < batch_size:
            wait_ms = int(1000 * (deadline - time.monotonic()))
            if wait_ms <= 0:
                raise tf.errors.DeadlineExceededError(
                    None, None, f"fewer than {batch_size} unrolls queued after {timeout_ms} ms"
                )
            one, waiting = self._run_learner_op(
                (self._dequeue_one, self._size_after_dequeue_one),
                options=tf.compat.v1.RunOptions(timeout_in_ms=wait_ms),
            )
            self._taken.append([array[np.newaxis] for array in one])
            taken += 1
            more = min(int(waiting), batch_size - taken)
            if more:
                self._taken.append(self._run_learner_op(self._dequeue, {self._batch_size: more}))
                taken += more
        parts, self._taken = self._taken, []
        return [np.concatenate(arrays) for arrays in zip(*parts, strict=True)]

    def queue_size(self):
        return int(self._run_learner_op(self._size))

    def finish(self):
        """Tells actors training is over: sets the flag, then closes the queue (fails enqueues)."""
        self._run_learner_op(self._mark_finished)
        self._run_learner_op(self._close)

    def final_parameters_taken(self):
        """Whether the evaluator said it holds the parameters that end training."""
        return bool(self._run_learner_op(self._read_final_taken))

    # Actor side.

    def _call_learner(self, fetches, feed_dict=None, timeout_secs=None):
        """session.run of a client's call to the learner, bounded by `timeout_secs` (else by
        call_timeout_secs): DeadlineExceededError when it passes."""
        timeout_secs = timeout_secs or self._call_timeout_secs
        options = None
        if timeout_secs is not None:
            options = tf.compat.v1.RunOptions(timeout_in_ms=max(1, int(1000 * timeout_secs)))
        return self.session.run(fetches, feed_dict, options=options)

    def pull_parameters(self, timeout_secs=None):
        """The learner's newest Published parameters: (list of numpy arrays, version >= 1,
        environment frames they were trained on).

        Raises FailedPreconditionError before the learner has initialised its state, and also
        between that and its first publish: version 0 is the zeros the variables start from, not
        the learner's parameters (an actor that acted on them would send unrolls of a uniform
        policy).
        """
        published = Published(*self._call_learner(self._read_parameters, None, timeout_secs))
        if published.version == 0:
            raise tf.errors.FailedPreconditionError(
                None, None, "the learner has not published its parameters yet"
            )
        return published

    def published_frames(self):
        """The environment frames of the newest published parameters (0 before the first)."""
        return int(self._call_learner(self._read_frames))

    def enqueue(self, flat_unrolls, timeout_secs=None):
        """Enqueues a flat list of [N, ...] numpy arrays: N unrolls (waiting while the queue is
        full, at most `timeout_secs` or call_timeout_secs)."""
        feeds = dict(zip(self._unroll_feeds, flat_unrolls, strict=True))
        self._call_learner(self._enqueue, feeds, timeout_secs)

    def training_finished(self):
        """Whether the learner reached its frame budget (set by `finish`, by nothing else)."""
        return bool(self._call_learner(self._read_finished))

    def take_final_parameters(self):
        """The evaluator's word that it holds the parameters that end training."""
        self._call_learner(self._mark_final_taken)

    def learner_signature(self):
        """The learner's `agent_signature`; FailedPreconditionError before it initialised."""
        return self._call_learner(self._read_signature).decode()
