"""local_cluster.free_ports: loopback ports that neither outgoing connections nor a Slurm job's
TF servers can take first."""

import socket

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


def test_a_port_someone_listens_on_is_skipped(monkeypatch):
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("127.0.0.1", local_cluster.free_ports(1)[0]))
    busy.listen()
    busy_port = busy.getsockname()[1]
    spare_port = local_cluster.free_ports(1)[0]
    draws = iter([busy_port, spare_port])

    class ScriptedDraws:
        def randrange(self, _start, _stop):
            return next(draws)

    monkeypatch.setattr(local_cluster.random, "Random", ScriptedDraws)
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
