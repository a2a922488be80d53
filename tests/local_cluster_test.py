"""local_cluster.free_ports: loopback ports that neither outgoing connections, a Slurm job's TF
servers nor another caller on this host can take first."""

import json
import socket
import subprocess
import sys
import time

import pytest

from frontend import slurm_hosts
from tools import local_cluster


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range_and_slurm_ports():
    low, _ = local_cluster.ephemeral_ports()
    below = min(low, slurm_hosts.PORT_BASE)
    ports = local_cluster.free_ports(64)
    assert len(set(ports)) == 64
    assert all(local_cluster.LOWEST_FREE_PORT <= port < below for port in ports)
    servers = []
    try:
        for port in ports:
            server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            servers.append(server)
            server.bind(("127.0.0.1", port))
    finally:
        for server in servers:
            server.close()


@pytest.fixture(autouse=True)
def port_claims(tmp_path, monkeypatch):
    """A claims file of the test's own: the host's holds the suite's other workers' ports."""
    path = tmp_path / "port_claims.json"
    monkeypatch.setattr(local_cluster, "PORT_CLAIMS", path)
    return path


def scripted_draws(monkeypatch, ports):
    """Makes free_ports draw `ports`, in order."""
    draws = iter(ports)

    class ScriptedDraws:
        def randrange(self, _start, _stop):
            return next(draws)

    monkeypatch.setattr(local_cluster.random, "Random", ScriptedDraws)


def test_a_port_someone_listens_on_is_skipped(monkeypatch):
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("127.0.0.1", local_cluster.free_ports(1)[0]))
    busy.listen()
    busy_port = busy.getsockname()[1]
    spare_port = local_cluster.free_ports(1)[0]
    local_cluster.PORT_CLAIMS.unlink()  # spare_port unclaimed again
    scripted_draws(monkeypatch, [busy_port, spare_port])
    try:
        assert local_cluster.free_ports(1) == [spare_port]
    finally:
        busy.close()


def test_the_ephemeral_range_is_read_from_proc_and_a_narrow_gap_is_reported(tmp_path, monkeypatch):
    port_range = tmp_path / "ip_local_port_range"
    port_range.write_text("10200\t60999\n")
    monkeypatch.setattr(local_cluster, "EPHEMERAL_PORT_RANGE", port_range)
    assert local_cluster.ephemeral_ports() == (10200, 60999)
    with pytest.raises(
        RuntimeError, match=r"ip_local_port_range: the ephemeral range starts at 10200"
    ):
        local_cluster.free_ports(3)
    monkeypatch.setattr(local_cluster, "EPHEMERAL_PORT_RANGE", tmp_path / "missing")
    assert local_cluster.ephemeral_ports() == (32768, 60999)


def test_a_port_handed_out_lately_is_skipped_until_its_claim_expires(monkeypatch, port_claims):
    claimed, expired, drawn = local_cluster.free_ports(3)
    now = time.time()
    port_claims.write_text(
        json.dumps({claimed: now, expired: now - local_cluster.PORT_CLAIM_SECS - 1})
    )
    scripted_draws(monkeypatch, [claimed, expired, claimed, drawn])
    assert local_cluster.free_ports(2) == [expired, drawn]
    claims = json.loads(port_claims.read_text())
    assert sorted(map(int, claims)) == sorted([claimed, expired, drawn])
    assert claims[str(expired)] >= now


def test_concurrent_callers_in_other_processes_are_handed_disjoint_ports(port_claims):
    """300 ports each from the ~10,000 below the Slurm ports: random draws alone would share ~9."""
    caller = (
        "import json, pathlib, sys\n"
        "from tools import local_cluster\n"
        "local_cluster.PORT_CLAIMS = pathlib.Path(sys.argv[1])\n"
        "print(json.dumps([p for _ in range(6) for p in local_cluster.free_ports(50)]))\n"
    )
    callers = [
        subprocess.Popen(
            [sys.executable, "-c", caller, str(port_claims)],
            cwd=local_cluster.REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    handed = [json.loads(c.communicate(timeout=120)[0]) for c in callers]
    assert [c.returncode for c in callers] == [0, 0]
    assert [len(set(ports)) for ports in handed] == [300, 300]
    assert not set(handed[0]) & set(handed[1])
