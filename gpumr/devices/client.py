"""The client side of the node's scheduler service (see :mod:`gpumr.devices.protocol`).

Every connect and every reply has a time limit (``$GPUMR_SCHEDULER_TIMEOUT``
seconds, 10 by default), so a stopped or overloaded service can never hang a
task; failures are :class:`SchedulerUnavailable` naming the socket.
"""

import json
import os
import socket

from . import protocol as P
from .paths import default_socket
from .protocol import RequestError

TIMEOUT_ENV = "GPUMR_SCHEDULER_TIMEOUT"
#: Seconds to wait for a connection or a reply unless ``$GPUMR_SCHEDULER_TIMEOUT`` says otherwise.
DEFAULT_TIMEOUT = 10.0
#: Longest reply line read (a status reply lists every lease).
MAX_REPLY = 16 << 20


class SchedulerUnavailable(ConnectionError):
    """The service did not answer in time, refused, or hung up; the message names the socket."""


def default_timeout(env=None):
    """``$GPUMR_SCHEDULER_TIMEOUT`` as seconds (a positive finite number), else 10."""
    env = os.environ if env is None else env
    try:
        value = float(env.get(TIMEOUT_ENV, ""))
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if 0 < value < 1e6 else DEFAULT_TIMEOUT


class SchedulerClient:
    """A connection to the scheduler service; its leases end when it closes.

    Parameters
    ----------
    path : str, optional
        Unix socket path (default :func:`default_socket`).
    tcp_port : int, optional
        Connect to 127.0.0.1:port instead.
    timeout : float, optional
        Seconds for the connect and for each reply (default :func:`default_timeout`).
        A blocking acquire waits its own timeout on top.
    """

    def __init__(self, path=None, tcp_port=None, timeout=None):
        self.timeout = default_timeout() if timeout is None else timeout
        self.tcp_port = tcp_port
        self.where = f"127.0.0.1:{tcp_port}" if tcp_port is not None else (path or default_socket())
        self._held = set()
        self._sock = self._file = None
        self._connect()

    def _connect(self):
        try:
            if self.tcp_port is not None:
                sock = socket.create_connection(("127.0.0.1", self.tcp_port), timeout=self.timeout)
            else:
                sock = socket.socket(socket.AF_UNIX)
                sock.settimeout(self.timeout)
                try:
                    sock.connect(self.where)
                except BaseException:
                    sock.close()
                    raise
        except OSError as exc:
            raise self._failed("cannot connect", exc) from None
        self._sock, self._file = sock, sock.makefile("rwb")

    def _failed(self, what, exc):
        if isinstance(exc, socket.timeout):
            why = f"no answer within {self.timeout:g} s"
        else:
            why = exc.strerror or str(exc) or type(exc).__name__
        return SchedulerUnavailable(f"scheduler at {self.where}: {what} ({why})")

    def request(self, obj, wait=0.0):
        """Send one request; return the reply object.

        A connection the service closed (idle timeout) while this client
        held no lease is opened again once, transparently.

        Parameters
        ----------
        wait : float
            Extra seconds the reply may take (a blocking acquire's own timeout).
        """
        for attempt in (0, 1):
            if self._sock is None:
                self._connect()
            try:
                self._sock.settimeout(self.timeout + wait)
                self._file.write(json.dumps(obj).encode() + b"\n")
                self._file.flush()
                line = self._file.readline(MAX_REPLY)
                if not line:
                    raise ConnectionResetError(0, "the scheduler closed the connection")
                reply = json.loads(line)
            except (OSError, ValueError) as exc:
                self._drop()
                if attempt == 0 and not self._held and not isinstance(exc, (socket.timeout, ValueError)):
                    continue
                what = "bad reply" if isinstance(exc, ValueError) else "request failed"
                raise self._failed(what, exc) from None
            if not reply.get("ok") and reply.get("code") == P.IDLE:
                self._drop()  # an idle-timeout notice read before our reply: ask again
                if attempt == 0 and not self._held:
                    continue
            return reply
        raise SchedulerUnavailable(f"scheduler at {self.where}: the connection keeps closing")

    def _drop(self):
        self._held.clear()  # leases end with the connection
        if self._sock is not None:
            try:
                self._file.close()
                self._sock.close()
            except OSError:
                pass
        self._sock = self._file = None

    def acquire(self, memory=0, block=False, timeout=None):
        """``(gpu index, lease id)``, or None when no GPU is free (or the node has none).

        Raises
        ------
        RequestError
            Any other error reply (its ``code`` says which).
        SchedulerUnavailable
            No answer in time, or the connection failed.
        """
        wait = (P.MAX_TIMEOUT if timeout is None else timeout) if block else 0.0
        reply = self.request(dict(op="acquire", memory=int(memory), block=bool(block), timeout=timeout), wait)
        if reply.get("ok"):
            self._held.add(reply["lease"])
            return reply["gpu"], reply["lease"]
        if reply.get("code") in P.NO_GPU_CODES:
            return None
        raise RequestError(f"scheduler at {self.where}: {reply.get('error')}", reply.get("code"))

    def release(self, lease):
        """End ``lease`` (nothing to do if the connection that held it is gone)."""
        if lease not in self._held:
            return
        reply = self.request(dict(op="release", lease=lease))
        self._held.discard(lease)
        if not reply.get("ok"):
            raise RequestError(f"scheduler at {self.where}: {reply.get('error')}", reply.get("code"))

    def status(self):
        """The service's status reply."""
        return self.request(dict(op="status"))

    def close(self):
        """Close the connection; the service ends its leases."""
        self._drop()
