"""The frontend's SSH connections: one paramiko client per (host, ssh port, user), reused."""

from frontend import launcher


class Connections:
    """SSH clients, one per (host, ssh port, user), opened on first use; failures remembered.

    A failed login is tried once: every later `get` for the same login raises the same error,
    so N actors behind one bad credential cost one timeout, not N. `forget` drops a client (or
    a remembered failure) so that the next `get` connects again.

    Args:
      known_hosts: known_hosts file checked besides /etc/ssh/ssh_known_hosts.
      accept_unknown_host_keys: accept (with a warning) host keys missing from them.
      timeout: seconds for connecting, the banner and authentication.
      warn: called with the text of a warning (an accepted unknown host key).
    """

    def __init__(self, known_hosts, accept_unknown_host_keys, timeout, warn):
        self._known_hosts = known_hosts
        self._accept_unknown = accept_unknown_host_keys
        self._timeout = timeout
        self._warn = warn
        self._clients = {}

    @staticmethod
    def _key(worker):
        return (worker.ip, worker.ssh_port, worker.ssh_username)

    def get(self, worker):
        """The client logged in as `worker`'s row says; raises the error of a failed login."""
        key = self._key(worker)
        if key not in self._clients:
            try:
                self._clients[key] = launcher.ssh_connect(
                    worker, self._known_hosts, self._accept_unknown, self._timeout, self._warn
                )
            except Exception as e:
                self._clients[key] = e
        client = self._clients[key]
        if isinstance(client, Exception):
            raise client
        return client

    def forget(self, worker):
        client = self._clients.pop(self._key(worker), None)
        if client is not None and not isinstance(client, Exception):
            client.close()

    def close(self):
        for client in self._clients.values():
            if not isinstance(client, Exception):
                client.close()
        self._clients.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
