"""The client side of the node's scheduler service (see :mod:`gpumr.devices.protocol`)."""

import json
import socket

from .paths import default_socket
from .protocol import NO_GPU, RequestError


class SchedulerClient:
    """A connection to the scheduler service; its leases end when it closes.

    Parameters
    ----------
    path : str, optional
        Unix socket path (default :func:`default_socket`).
    tcp_port : int, optional
        Connect to 127.0.0.1:port instead.
    """

    def __init__(self, path=None, tcp_port=None, timeout=None):
        if tcp_port is not None:
            self._sock = socket.create_connection(("127.0.0.1", tcp_port), timeout=timeout)
        else:
            self._sock = socket.socket(socket.AF_UNIX)
            self._sock.settimeout(timeout)
            self._sock.connect(path or default_socket())
        self._file = self._sock.makefile("rwb")

    def request(self, obj):
        """Send one request; return the reply object."""
        self._file.write(json.dumps(obj).encode() + b"\n")
        self._file.flush()
        line = self._file.readline()
        if not line:
            raise ConnectionError("the scheduler closed the connection")
        return json.loads(line)

    def acquire(self, memory=0, block=False, timeout=None):
        """``(gpu index, lease id)``, or None when no GPU is free."""
        reply = self.request(dict(op="acquire", memory=int(memory), block=block, timeout=timeout))
        if reply.get("ok"):
            return reply["gpu"], reply["lease"]
        if str(reply.get("error", "")).startswith(NO_GPU):
            return None
        raise RequestError(reply.get("error"))

    def release(self, lease):
        reply = self.request(dict(op="release", lease=lease))
        if not reply.get("ok"):
            raise RequestError(reply.get("error"))

    def status(self):
        return self.request(dict(op="status"))

    def close(self):
        try:
            self._file.close()
            self._sock.close()
        except OSError:
            pass
