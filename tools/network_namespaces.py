"""Hosts made of Linux network namespaces, for the tests' "remote" hosts and the link benchmarks.

Each namespace is joined to this machine by a veth pair in a /24 of its own: this side holds
.1, the namespace .2 and a default route back through .1, so a namespace reaches this machine
and, with IPv4 forwarding on, the other namespaces. The /24 is chosen at random among the
private 10.A.B.0/24 this machine has no route to. Needs root.
"""

import contextlib
import ipaddress
import json
import os
import random
import shutil
import subprocess

import psutil

IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"


def skip_reason(*tools):
    """Why namespaces (and `tools`) cannot be used here, or None."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    for tool in ("ip", *tools):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    probe = f"impt-probe-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", probe], capture_output=True).returncode != 0:
        return "no privilege to create network namespaces (ip netns add failed)"
    subprocess.run(["ip", "netns", "del", probe], check=True)
    return None


def run(*argv, namespace=None):
    """Runs argv (in `namespace`, if given); its stdout. Raises CalledProcessError on failure."""
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    return subprocess.run(prefix + list(argv), check=True, capture_output=True, text=True).stdout


def free_subnet():
    """A random 10.A.B.0/24 that overlaps no route of this machine."""
    routed = [
        ipaddress.ip_network(route["dst"])
        for route in json.loads(run("ip", "-j", "-4", "route", "show", "table", "all"))
        if route["dst"] != "default" and route["dst"][0].isdigit()
    ]
    while True:
        subnet = ipaddress.ip_network(
            f"10.{random.randint(100, 250)}.{random.randint(0, 255)}.0/24"
        )
        if not any(subnet.overlaps(net) for net in routed):
            return subnet


class VethNamespace:
    """Namespace `name` with a veth pair (`host_iface` here, `ns_iface` inside).

    Attributes: name, host_iface, ns_iface, host_ip (this side), ip (the namespace's).
    `close()` kills whatever still runs in the namespace and deletes it with its veth pair.
    """

    def __init__(self, name, host_iface, ns_iface):
        self.name, self.host_iface, self.ns_iface = name, host_iface, ns_iface
        subnet = free_subnet()
        self.host_ip, self.ip = str(subnet[1]), str(subnet[2])
        run("ip", "netns", "add", name)
        try:
            run("ip", "link", "add", host_iface, "type", "veth", "peer", "name", ns_iface)
            run("ip", "link", "set", ns_iface, "netns", name)
            run("ip", "addr", "add", f"{self.host_ip}/24", "dev", host_iface)
            run("ip", "link", "set", host_iface, "up")
            run("ip", "addr", "add", f"{self.ip}/24", "dev", ns_iface, namespace=name)
            run("ip", "link", "set", ns_iface, "up", namespace=name)
            run("ip", "link", "set", "lo", "up", namespace=name)
            run("ip", "route", "add", "default", "via", self.host_ip, namespace=name)
        except BaseException:
            self.close()
            raise

    def close(self):
        pids = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True)
        kill_processes(int(pid) for pid in pids.stdout.split())
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
        subprocess.run(
            ["ip", "link", "del", self.host_iface], capture_output=True
        )  # if still there


def kill_processes(pids):
    """SIGKILLs the processes `pids` (those still alive) and waits for them (10 s at most)."""
    processes = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            processes.append(psutil.Process(pid))
            processes[-1].kill()
    psutil.wait_procs(processes, timeout=10)
