"""The client side of the node's scheduler service (see :mod:`gpumr.devices.protocol`).

Its time limits and failures: :doc:`/concepts/devices`."""

import array
import json
import os
import socket
import stat

from . import protocol as P
from .leases import FileLease
from .paths import default_socket
from .protocol import RequestError, peer_credentials

TIMEOUT_ENV = "GPUMR_SCHEDULER_TIMEOUT"
#: Seconds to wait for a connection or a reply unless ``$GPUMR_SCHEDULER_TIMEOUT`` says otherwise.
DEFAULT_TIMEOUT = 10.0
#: Longest reply line read (a status reply lists every lease).
MAX_REPLY = 16 << 20
#: Most descriptors taken from one message (the service sends at most 16 at once).
MAX_FDS = 64
_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0)


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
        Seconds for the connect and for each reply (default :func:`default_timeout`). A blocking acquire waits its own
        timeout on top."""

    def __init__(self, path=None, tcp_port=None, timeout=None):
        self.timeout = default_timeout() if timeout is None else timeout
        self.tcp_port = tcp_port
        self.where = f"127.0.0.1:{tcp_port}" if tcp_port is not None else (path or default_socket())
        self._held = set()  # leases of the current connection
        self._claims = {}  # lease -> FileLease: our copy of its slot's lock, kept until released
        self._sock = None
        self._rbuf = bytearray()
        self._fds = []  # descriptors received, not yet matched to a reply
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
        self._sock = sock

    def _failed(self, what, exc):
        if isinstance(exc, socket.timeout):
            why = f"no answer within {self.timeout:g} s"
        else:
            why = exc.strerror or str(exc) or type(exc).__name__
        return SchedulerUnavailable(f"scheduler at {self.where}: {what} ({why})")

    def request(self, obj, wait=0.0):
        """Send one request; return the reply object.

        Parameters
        ----------
        wait : float
            Extra seconds the reply may take (a blocking acquire's own timeout)."""
        for attempt in (0, 1):
            if self._sock is None:
                self._connect()
            held = bool(self._held)  # a connection with leases is never silently replaced
            try:
                self._sock.settimeout(self.timeout + wait)
                self._sock.sendall(json.dumps(obj).encode() + b"\n")
                line = self._readline()
                if not line:
                    raise ConnectionResetError(0, "the scheduler closed the connection")
                reply = json.loads(line)
                if not isinstance(reply, dict):
                    raise ValueError("a reply must be a JSON object")
            except (OSError, ValueError) as exc:
                self._drop()
                if attempt == 0 and not held and not isinstance(exc, (socket.timeout, ValueError)):
                    continue
                what = "bad reply" if isinstance(exc, ValueError) else "request failed"
                raise self._failed(what, exc) from None
            if not reply.get("ok") and reply.get("code") == P.IDLE:
                self._drop()  # an idle-timeout notice read before our reply: ask again
                if attempt == 0 and not held:
                    continue
            return reply
        raise SchedulerUnavailable(f"scheduler at {self.where}: the connection keeps closing")

    def _readline(self):
        """The next reply line (without the newline), b"" at the end; keeps descriptors that come along."""
        while True:
            i = self._rbuf.find(b"\n")
            if i >= 0:
                line = bytes(self._rbuf[:i])
                del self._rbuf[:i + 1]
                return line
            if len(self._rbuf) > MAX_REPLY:
                raise ValueError(f"a reply longer than {MAX_REPLY} bytes")
            data, ancillary, flags, _ = self._sock.recvmsg(65536, socket.CMSG_SPACE(MAX_FDS * 4), _CLOEXEC)
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds = array.array("i")
                    fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
                    self._fds.extend(fds)
            if flags & socket.MSG_CTRUNC:  # descriptors lost: later claims could no longer be matched
                raise ValueError("more claim descriptors at once than a client takes")
            if not data:
                return b""
            self._rbuf += data

    def _take_claim(self, gpu):
        """The descriptor that came with a ``claim`` reply, as a held lock (None if it did not come)."""
        if not self._fds:
            return None
        fd = self._fds.pop(0)
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # not a lock file: nothing we can hold
            os.close(fd)
            return None
        return FileLease(gpu, None, fd, None)

    def _drop(self):
        """Close the connection: the service ends its leases (our claims stay with us)."""
        self._held.clear()
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        self._sock = None
        self._rbuf.clear()
        for fd in self._fds:  # came with no reply we read
            os.close(fd)
        self._fds.clear()

    def peer(self):
        """``(pid, uid, gid)`` of the process serving the socket, by the kernel's word (None over TCP)."""
        if self._sock is None:
            self._connect()
        return None if self.tcp_port is not None else peer_credentials(self._sock)

    def acquire(self, memory=0, block=False, timeout=None):
        """``(gpu index, lease id)``, or None when no GPU is free (or the node has none). Raises ``RequestError``: any
        other error reply (its ``code`` says which); ``SchedulerUnavailable``: no answer in time, or the connection
        failed."""
        wait = (P.MAX_TIMEOUT if timeout is None else timeout) if block else 0.0
        reply = self.request(dict(op="acquire", memory=int(memory), block=bool(block), timeout=timeout), wait)
        if reply.get("ok"):
            lease = reply["lease"]
            self._held.add(lease)
            if reply.get("claim"):
                claim = self._take_claim(reply["gpu"])
                if claim is not None:
                    self._claims[lease] = claim
            return reply["gpu"], lease
        if reply.get("code") in P.NO_GPU_CODES:
            return None
        raise RequestError(f"scheduler at {self.where}: {reply.get('error')}", reply.get("code"))

    def release(self, lease):
        """End ``lease``: let go of our claim on its slot, then tell the service. Raises ``RequestError``: the service
        refused for another reason (its ``code`` says which)."""
        claim = self._claims.pop(lease, None)
        if claim is not None:
            claim.release()  # first, so that the slot is free when the service hears of it
        if lease not in self._held:
            return
        try:
            reply = self.request(dict(op="release", lease=lease))
        except SchedulerUnavailable:
            return  # the request closed the connection: the lease is over
        self._held.discard(lease)
        if not reply.get("ok") and reply.get("code") != P.UNKNOWN_LEASE:
            raise RequestError(f"scheduler at {self.where}: {reply.get('error')}", reply.get("code"))

    def status(self):
        """The service's status reply."""
        return self.request(dict(op="status"))

    def disconnect(self):
        """Close the connection (the service ends its leases) but keep the claims not yet released."""
        self._drop()

    def close(self):
        """Close the connection and let go of every claim: all of this client's leases end."""
        self._drop()
        for claim in self._claims.values():
            claim.release()
        self._claims.clear()
