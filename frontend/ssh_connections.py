"""The frontend's SSH connections: one paramiko client per (host, ssh port, user), reused."""

import concurrent.futures

from frontend import launcher

# Logins being connected at once (connect_all): enough that many unreachable hosts cost about
# one --ssh_timeout_secs each batch, few enough not to flood this host or a shared sshd.
MAX_PARALLEL_LOGINS = 16


class Connections:
    """SSH clients, one per (host, ssh port, user), opened on first use; failures remembered.

    A failed login is tried once: every later `get` for the same login raises the same error,
    so N actors behind one bad credential cost one timeout, not N; `connect_all` tries many
    logins at once, so N unreachable hosts cost about one timeout too. `forget` drops a client
    (or a remembered failure) so that the next `get` connects again.

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

    def connect_all(self, workers):
        """Logs in, in parallel (at most MAX_PARALLEL_LOGINS at a time), as each remote worker of
        `workers` whose login has not been tried yet; `get` then answers at once."""
        pending = {self._key(w): w for w in workers if not w.is_local}
        pending = {key: w for key, w in pending.items() if key not in self._clients}
        if not pending:
            return
        threads = min(MAX_PARALLEL_LOGINS, len(pending))
        with concurrent.futures.ThreadPoolExecutor(threads, "ssh-connect") as pool:
            results = pool.map(self._connect, pending.values())
            self._clients.update(zip(pending, results, strict=True))

    def get(self, worker):
        """The client logged in as `worker`'s row says; raises the error of a failed login."""
        key = self._key(worker)
        if key not in self._clients:
            self._clients[key] = self._connect(worker)
        client = self._clients[key]
        if isinstance(client, Exception):
            raise client
        return client

    def _connect(self, worker):
        """A client logged in as `worker`'s row says, or the error that prevented it."""
        try:
            return launcher.ssh_connect(
                worker, self._known_hosts, self._accept_unknown, self._timeout, self._warn
            )
        except Exception as e:
            return e

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
