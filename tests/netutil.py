"""Free loopback ports for tests: bound to port 0 by the kernel, never fixed numbers."""

import contextlib
import socket


def free_ports(count):
    """`count` distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            with contextlib.suppress(OSError):
                s.close()
