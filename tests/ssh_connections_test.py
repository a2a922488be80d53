"""ssh_connections: many hosts are logged in to at once (a bounded pool), and a host that cannot
be reached is one failure per worker naming its host, row and cause once; no real SSH."""

import contextlib
import dataclasses
import logging
import socket
import struct
import threading

import paramiko
import pytest

from frontend import console, launcher, plan_report, ssh_connections, workers_csv
from frontend.console import Console
from tests import frontend_fakes

HOSTS = 40  # More than MAX_PARALLEL_LOGINS.
FILL_WAIT_SECS = 60  # Bounds a login's wait for the pool to fill; reached only by a failure.


class FakeConnect:
    """launcher.ssh_connect that fails as an unreachable host does, but only once
    MAX_PARALLEL_LOGINS logins are under way at once (or after FILL_WAIT_SECS): so a pool that
    tries its logins in parallel fills whatever the machine's load, and a serial one times out.
    Records the logins tried, how many were under way at once and the waits that timed out."""

    def __init__(self):
        self.tried = []
        self.most_at_once = 0
        self.waits_timed_out = 0
        self._at_once = 0
        self._pool_full = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, worker, _known_hosts, _accept_unknown, timeout, _warn):
        with self._lock:
            self.tried.append(worker.where)
            self._at_once += 1
            self.most_at_once = max(self.most_at_once, self._at_once)
            if self._at_once == ssh_connections.MAX_PARALLEL_LOGINS:
                self._pool_full.set()
        filled = self._pool_full.wait(FILL_WAIT_SECS)
        self._pool_full.set()  # A pool that cannot fill waits out the bound once, not per login.
        with self._lock:
            self._at_once -= 1
            self.waits_timed_out += not filled
        raise TimeoutError(f"no answer within {timeout:g} s")


WORKER = workers_csv.Worker(
    row=2,
    line=3,
    job="actor",
    ip="10.9.0.1",
    tf_port=9001,
    cuda_visible_devices="",
    is_local=False,
    ssh_port=22,
    ssh_username="bob",
    ssh_key_path="",
    password_source="the CSV",
    password="pa55word-x1",
)


@pytest.fixture
def unreachable(tmp_path, monkeypatch):
    """(the plan of a learner here and HOSTS actors on unreachable hosts, the fake connect)."""
    rows = [f"actor,10.9.0.{i},9001,,22,bob,pa55word-x1" for i in range(1, HOSTS + 1)]
    _, plan = frontend_fakes.plan(tmp_path, "learner,10.1.2.3,8001,,,,", *rows)
    connect = FakeConnect()
    monkeypatch.setattr(launcher, "ssh_connect", connect)
    return plan, connect


def test_unreachable_hosts_are_tried_at_once_in_a_bounded_pool(unreachable):
    plan, connect = unreachable
    connections = ssh_connections.Connections("known_hosts", False, 3, print)
    connections.connect_all(launch.worker for launch in plan.actors)

    # The pool filled (no login waited out its bound) and never went past its bound.
    assert connect.waits_timed_out == 0
    assert connect.most_at_once == ssh_connections.MAX_PARALLEL_LOGINS
    assert sorted(connect.tried) == sorted(launch.worker.where for launch in plan.actors)
    for launch in plan.actors:  # Remembered: not tried again.
        with pytest.raises(TimeoutError):
            connections.get(launch.worker)
    assert len(connect.tried) == HOSTS


def test_each_unreachable_worker_names_its_host_row_and_cause_once(unreachable):
    plan, _ = unreachable
    connections = ssh_connections.Connections("known_hosts", False, 3, print)
    connections.connect_all(launch.worker for launch in plan.actors)
    for launch in plan.actors:
        with pytest.raises(TimeoutError) as error:
            connections.get(launch.worker)
        line = plan_report.describe_failure(launch, error.value, Console())
        worker = launch.worker
        assert line == (
            f"{launch.name} (row {worker.row}, bob@{worker.ip} ssh port 22, auth: password from "
            "the CSV, tf port 9001): timed out: no answer within 3 s"
        )
        assert line.count(worker.ip) == line.count(f"row {worker.row}") == 1
        assert line.count("timed out") == 1


def test_a_login_timeout_says_how_long_it_waited_once(monkeypatch):
    def connect(*_args, **_kwargs):
        raise TimeoutError("timed out")  # As a socket that gets no answer says.

    monkeypatch.setattr(paramiko.SSHClient, "connect", connect)
    with pytest.raises(TimeoutError) as error:
        launcher.ssh_connect(WORKER, "/nonexistent/known_hosts", False, 3, print)
    assert launcher.describe_error(error.value) == "timed out: no answer within 3 s"
    assert launcher.describe_error(TimeoutError("timed out")) == "timed out"


def read_past_the_clients_banner(connection):
    """Reads until a byte after the client's banner line (its key exchange) has come, however
    the two were split into packets; bounded by the socket's timeout and a count."""
    received = b""
    for _ in range(100):
        chunk = connection.recv(4096)
        received += chunk
        banner_end = received.find(b"\r\n")
        if not chunk or 0 <= banner_end < len(received) - 2:
            return


class UnfinishedTransport:
    """A paramiko Transport whose key exchange never finished: `active` while still under way,
    or ended by `error`."""

    initial_kex_done = False

    def __init__(self, active, error=None):
        self.active = active
        self.error = error

    def is_active(self):
        return self.active

    def get_exception(self):
        return self.error

    def close(self):
        self.active = False


def connect_without_a_session(transport):
    """SSHClient.connect as paramiko's ends when negotiation stops short: the transport left as
    it is, then 'No existing session' from the host-key check."""

    def connect(client, *_args, **_kwargs):
        client._transport = transport
        raise paramiko.SSHException("No existing session")

    return connect


def test_a_key_exchange_that_never_finishes_is_a_timeout(monkeypatch):
    transport = UnfinishedTransport(active=True)
    monkeypatch.setattr(paramiko.SSHClient, "connect", connect_without_a_session(transport))
    with pytest.raises(TimeoutError) as error:
        launcher.ssh_connect(WORKER, "/nonexistent/known_hosts", False, 3, print)
    assert launcher.describe_error(error.value) == "timed out: no key exchange within 3 s"
    assert not transport.active  # Closed, not left running.


def test_a_key_exchange_ended_by_a_reset_names_the_reset(monkeypatch):
    reset = ConnectionResetError(104, "Connection reset by peer")
    transport = UnfinishedTransport(active=False, error=reset)
    monkeypatch.setattr(paramiko.SSHClient, "connect", connect_without_a_session(transport))
    with pytest.raises(ConnectionResetError) as error:
        launcher.ssh_connect(WORKER, "/nonexistent/known_hosts", False, 3, print)
    assert (
        launcher.describe_error(error.value)
        == "cannot connect: [Errno 104] Connection reset by peer"
    )


def test_a_failed_login_after_the_key_exchange_is_left_as_it_is(monkeypatch):
    transport = UnfinishedTransport(active=True)
    transport.initial_kex_done = True

    def connect(client, *_args, **_kwargs):
        client._transport = transport
        raise paramiko.AuthenticationException("Authentication failed.")

    monkeypatch.setattr(paramiko.SSHClient, "connect", connect)
    with pytest.raises(paramiko.AuthenticationException):
        launcher.ssh_connect(WORKER, "/nonexistent/known_hosts", False, 3, print)


@pytest.fixture
def resetting_sshd():
    """(host, port) of a local sshd that resets each connection once the client has sent its
    first packet, as a failing sshd does."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    done = threading.Event()

    def serve():
        while not done.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            connection.settimeout(5)
            connection.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
            with contextlib.suppress(OSError):  # The test's assertions say what the client saw.
                read_past_the_clients_banner(connection)
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            connection.close()  # A reset (RST), not an orderly end.

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()
    done.set()
    thread.join(5)
    server.close()


def test_paramikos_traceback_of_a_reset_connection_stays_off_the_console(
    resetting_sshd, monkeypatch
):
    paramiko_logger = logging.getLogger("paramiko")
    monkeypatch.setattr(paramiko_logger, "handlers", [])
    monkeypatch.setattr(paramiko_logger, "propagate", True)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger().addHandler(handler)  # Where absl's console handler is.
    try:
        console.quiet_libraries()
        host, port = resetting_sshd
        worker = dataclasses.replace(WORKER, ip=host, ssh_port=port)
        connections = ssh_connections.Connections("/nonexistent/known_hosts", False, 5, print)
        connections.connect_all([worker])
        with pytest.raises(Exception) as error:
            connections.get(worker)
    finally:
        logging.getLogger().removeHandler(handler)
    assert "reset" in launcher.describe_error(error.value).lower()
    assert [r.getMessage() for r in records if r.name.startswith("paramiko")] == []
