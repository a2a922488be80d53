"""Remote hosts for launch tests: network namespaces, each with a real sshd.

Host i is a namespace joined to this machine by a veth pair (network_namespaces.VethNamespace:
10.A.B.1/24 here, 10.A.B.2/24 there, a default route back), so processes in the namespace can
reach this machine's veth addresses and nothing else. Each namespace runs
`/usr/sbin/sshd -D` with a throwaway host key; it accepts the test's user key (for root) and
passwords (for the throwaway user). Namespaces share this machine's PIDs and files, so a test
can check "remote" processes with psutil and read "remote" files directly.

sshd needs `/run/sshd` to exist, `UsePAM no` outside a login environment, and `StrictModes no`
because the keys live under a world-writable /tmp.

Everything is undone by `close()`, which each step registers as it goes, so a failure half-way
still cleans up what was made.
"""

import contextlib
import dataclasses
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from tools import network_namespaces

SSHD = "/usr/sbin/sshd"


def skip_reason():
    """Why these fixtures cannot run here (root, namespaces, sshd and user tools), or None."""
    return network_namespaces.skip_reason(SSHD, "ssh-keygen", "useradd", "userdel", "chpasswd")


def hosts_for_a_fixture(count, sftp=True):
    """Yields Hosts(count, sftp) for a pytest fixture and closes them after. Where network
    namespaces cannot be made the test is skipped; under CI, which runs as root, it fails."""
    reason = skip_reason()
    if reason and os.environ.get("CI"):
        pytest.fail(f"CI runs as root and must run the multi-host tests: {reason}")
    if reason:
        pytest.skip(reason)
    hosts = Hosts(count, sftp=sftp)
    try:
        yield hosts
    finally:
        hosts.close()


def _free_port(namespace):
    """A port nobody listens on in `namespace` (bind port 0 there)."""
    code = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"
    return int(network_namespaces.run(sys.executable, "-c", code, namespace=namespace))


def keygen(path):
    """A new ed25519 key pair at `path` and `path`.pub; returns the public key line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", path], check=True)
    with open(path + ".pub") as f:
        return f.read().strip()


@dataclasses.dataclass
class Host:
    namespace: str
    host_ip: str  # This machine's end of the veth pair: where namespace processes reach us.
    ip: str  # The namespace's address, where its sshd listens.
    ssh_port: int
    known_hosts_line: str  # '[ip]:port ssh-ed25519 AAAA...'


class Hosts:
    """`count` namespaces with sshd, a user key for root, and a throwaway password user.

    Attributes: hosts (list of Host), user_key / wrong_key (private key paths; wrong_key is
    authorized nowhere), user / password (the throwaway account), dir (a temp dir).
    sftp=False: the sshds offer no SFTP subsystem.
    """

    def __init__(self, count, sftp=True):
        self._sftp = sftp
        self._undo = []
        try:
            self._setup(count)
        except BaseException:
            self.close()
            raise

    def _setup(self, count):
        tag = secrets.token_hex(3)
        self.dir = tempfile.mkdtemp(prefix="netns_sshd_")
        self._undo.append(lambda: shutil.rmtree(self.dir, ignore_errors=True))
        self.user_key = os.path.join(self.dir, "user_key")
        self.wrong_key = os.path.join(self.dir, "wrong_key")
        authorized = keygen(self.user_key)
        keygen(self.wrong_key)
        with open(os.path.join(self.dir, "authorized_keys"), "w") as f:
            f.write(authorized + "\n")

        self.user, self.password = f"impt{tag}", secrets.token_urlsafe(12)
        network_namespaces.run("useradd", "--no-create-home", "--shell", "/bin/sh", self.user)
        self._undo.append(self._delete_user)
        subprocess.run(["chpasswd"], input=f"{self.user}:{self.password}\n", text=True, check=True)

        if not os.path.isdir("/run/sshd"):  # sshd's privilege separation directory.
            os.makedirs("/run/sshd", mode=0o755)
            self._undo.append(lambda: shutil.rmtree("/run/sshd", ignore_errors=True))
        self.hosts = [
            self._add_host(f"impt-{tag}-{i}", f"ivh{tag}{i}", f"ivn{tag}{i}") for i in range(count)
        ]

    def _add_host(self, namespace, host_iface, ns_iface):
        veth = network_namespaces.VethNamespace(namespace, host_iface, ns_iface)
        self._undo.append(veth.close)
        host_ip, ip = veth.host_ip, veth.ip

        directory = os.path.join(self.dir, namespace)
        os.makedirs(directory)
        host_key = os.path.join(directory, "ssh_host_ed25519_key")
        key_type, key_data = keygen(host_key).split()[:2]
        port = _free_port(namespace)
        config = os.path.join(directory, "sshd_config")
        sftp = "Subsystem sftp internal-sftp\n" if self._sftp else ""
        with open(config, "w") as f:
            f.write(
                f"Port {port}\nListenAddress {ip}\nHostKey {host_key}\n"
                f"PidFile {directory}/sshd.pid\n"
                f"AuthorizedKeysFile {self.dir}/authorized_keys\n"
                "PubkeyAuthentication yes\nPasswordAuthentication yes\n"
                "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                f"PermitRootLogin prohibit-password\n{sftp}"
            )
        with open(os.path.join(directory, "sshd.log"), "w") as log:
            sshd = subprocess.Popen(
                ["ip", "netns", "exec", namespace, SSHD, "-D", "-e", "-f", config],
                stdout=log,
                stderr=log,
            )
        self._undo.append(lambda: (sshd.terminate(), sshd.wait(timeout=10)))
        deadline = time.monotonic() + 10
        while True:  # sshd is up once the port answers (this side reaches the namespace).
            with contextlib.suppress(OSError), socket.create_connection((ip, port), timeout=1):
                break
            if time.monotonic() > deadline or sshd.poll() is not None:
                raise RuntimeError(f"sshd in {namespace} did not start; see {directory}/sshd.log")
            time.sleep(0.1)
        return Host(namespace, host_ip, ip, port, f"[{ip}]:{port} {key_type} {key_data}")

    def write_known_hosts(self, path, hosts=None):
        with open(path, "w") as f:
            f.writelines(h.known_hosts_line + "\n" for h in hosts or self.hosts)
        return path

    def _delete_user(self):
        network_namespaces.kill_processes(
            p.pid for p in psutil.process_iter(["username"]) if p.info["username"] == self.user
        )
        subprocess.run(["userdel", self.user], capture_output=True)

    def close(self):
        while self._undo:
            with contextlib.suppress(Exception):
                self._undo.pop()()
