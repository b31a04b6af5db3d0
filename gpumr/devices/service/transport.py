"""The service's socket server: one :mod:`selectors` thread, one JSON object per line each way, bounded
connections, buffers and idle time; each lease handed over as a locked lock-file descriptor."""

import array
import errno
import json
import os
import selectors
import socket
import time

from ...errors import GpumrError
from .. import protocol as P
from ..protocol import RequestError, peer_credentials

#: listen() backlog: a node's tasks may all ask at once.
BACKLOG = 1024
#: Default cap on open connections (lowered to fit the file-descriptor limit).
MAX_CONNECTIONS = 4096
#: Default seconds a connection holding no lease may stay silent.
IDLE_TIMEOUT = 60.0
#: How often waiters are retried without a release (lock files and NVML change on their own).
POLL = 0.25
#: Unsent reply bytes after which a connection's further requests wait (memory stays bounded).
WBUF_LIMIT = 64 * 1024
#: Most claim descriptors sent in one message (the client's ancillary buffer takes more).
FDS_PER_SEND = 16



def parse(line):
    """One request line -> a checked request dict. Raises ``RequestError`` with the code saying what is wrong
    (``bad-json``, ``bad-request``, ``unknown-op``)."""
    try:
        req = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RequestError(f"malformed JSON: {str(exc)[:100]}", P.BAD_JSON) from None
    if not isinstance(req, dict):
        raise RequestError("a request must be a JSON object")
    op = req.get("op")
    if op == "acquire":
        block = req.get("block", False)
        if not isinstance(block, bool):
            raise RequestError("block must be true or false")
        return dict(op=op, block=block,
                    memory=P.number(req, "memory", 0, 0, P.MAX_MEMORY, integer=True),
                    timeout=P.number(req, "timeout", None, 0, P.MAX_TIMEOUT))
    if op == "release":
        lease = req.get("lease")
        if not isinstance(lease, str) or not lease or len(lease) > 64:
            raise RequestError("release needs a lease id (a string)")
        return dict(op=op, lease=lease)
    if op == "status":
        return dict(op=op)
    shown = repr(op) if len(repr(op)) <= 40 else repr(op)[:40] + "..."
    raise RequestError(f"unknown op {shown} (acquire, release, status)", P.UNKNOWN_OP)


class _Conn:
    __slots__ = ("sock", "pid", "rbuf", "wbuf", "fds", "last", "waiter", "discarding", "events", "closed")

    def __init__(self, sock, pid):
        self.sock, self.pid = sock, pid
        self.rbuf, self.wbuf = bytearray(), bytearray()
        self.fds = []  # [claim descriptor (our duplicate), end of its reply in wbuf], in reply order
        self.last = time.monotonic()
        self.waiter = None  # (memory, deadline or None, timeout) of a blocking acquire
        self.discarding = False  # skipping the rest of an over-long line
        self.events = 0
        self.closed = False


class Server:
    """The service's single-threaded event loop over a listening socket.

    Parameters
    ----------
    scheduler : Scheduler
    listener : socket.socket
        Bound and listening.
    address : str or tuple
        The socket path, or ``(host, port)`` actually bound.
    max_connections : int
    idle_timeout : float
        Seconds a connection holding no lease and waiting for nothing may stay silent."""

    def __init__(self, scheduler, listener, address, max_connections=MAX_CONNECTIONS, idle_timeout=IDLE_TIMEOUT,
                 identity=None):
        self.scheduler = scheduler
        self.address = address
        self.max_connections = max_connections
        self.idle_timeout = idle_timeout
        self._listener = listener
        self._identity = identity  # (st_dev, st_ino) of our socket file
        self._unix = listener.family == socket.AF_UNIX
        self._sel = selectors.DefaultSelector()
        self._sel.register(listener, selectors.EVENT_READ, None)
        self._conns = set()
        self._waiters = []
        self._changed = False  # a lease ended: retry waiters now
        self._accept_paused_until = None
        self._spare = self._open_spare()
        self._next_poll = self._next_sweep = time.monotonic()
        self._stop = False

    @property
    def connections(self):
        """How many clients are connected."""
        return len(self._conns)

    # -- the loop ---------------------------------------------------------
    def serve_forever(self):
        """Serve until :meth:`shutdown` (or an exception, e.g. KeyboardInterrupt from a signal)."""
        while not self._stop:
            for key, mask in self._sel.select(self._timeout()):
                if key.data is None:
                    self._accept()
                    continue
                conn = key.data
                if mask & selectors.EVENT_READ and not conn.closed:
                    self._read(conn)
                if mask & selectors.EVENT_WRITE and not conn.closed:
                    self._flush(conn)
                    if not conn.closed and not conn.wbuf and conn.rbuf:
                        self._process(conn)  # requests held back while replies were backed up
            now = time.monotonic()
            if self._accept_paused_until is not None and now >= self._accept_paused_until:
                self._accept_paused_until = None
                self._sel.register(self._listener, selectors.EVENT_READ, None)
            if self._waiters and (self._changed or now >= self._next_poll):
                self._serve_waiters()
            if now >= self._next_sweep:
                self._sweep(now)

    def shutdown(self):
        """Make :meth:`serve_forever` return after its current round."""
        self._stop = True

    def _timeout(self):
        now = time.monotonic()
        wake = [self._next_sweep]
        if self._waiters:
            if self._changed:
                return 0
            wake.append(self._next_poll)
            wake += [c.waiter[1] for c in self._waiters if c.waiter[1] is not None]
        if self._accept_paused_until is not None:
            wake.append(self._accept_paused_until)
        return max(0.0, min(wake) - now)

    # -- connections -----------------------------------------------------
    @staticmethod
    def _open_spare():
        try:
            return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None

    def _accept(self):
        for _ in range(64):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._out_of_descriptors()
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO, errno.EPERM):
                    continue
                raise
            if len(self._conns) >= self.max_connections:
                self._refuse(sock, f"the scheduler serves at most {self.max_connections} connections; "
                                   "try again later")
                continue
            sock.setblocking(False)
            creds = peer_credentials(sock) if self._unix else None
            conn = _Conn(sock, creds and creds[0])
            self._conns.add(conn)
            self._interest(conn)

    def _out_of_descriptors(self):
        """No descriptor for a new client: answer one with the spare, then pause accepting briefly."""
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
            try:
                sock, _ = self._listener.accept()
                self._refuse(sock, "the scheduler is out of file descriptors; try again later")
            except OSError:
                pass
            self._spare = self._open_spare()
        # Without this the listening socket stays readable and the loop would spin.
        self._sel.unregister(self._listener)
        self._accept_paused_until = time.monotonic() + 0.1

    @staticmethod
    def _refuse(sock, message):
        try:
            sock.setblocking(False)
            sock.send(json.dumps(RequestError(message, P.TOO_MANY).reply()).encode() + b"\n")
        except OSError:
            pass
        sock.close()

    def _interest(self, conn):
        events = 0
        # Read unless a request is waiting (or replies are backed up) and another is already buffered.
        if len(conn.rbuf) <= P.MAX_REQUEST:
            events |= selectors.EVENT_READ
        if conn.wbuf:
            events |= selectors.EVENT_WRITE
        if events == conn.events:
            return
        if conn.events == 0:
            self._sel.register(conn.sock, events, conn)
        elif events == 0:
            self._sel.unregister(conn.sock)
        else:
            self._sel.modify(conn.sock, events, conn)
        conn.events = events

    def _close(self, conn):
        if conn.closed:
            return
        conn.closed = True
        if conn.events:
            self._sel.unregister(conn.sock)
        conn.sock.close()
        for fd, _ in conn.fds:
            os.close(fd)
        conn.fds.clear()
        self._conns.discard(conn)
        if conn.waiter is not None:
            conn.waiter = None
            self._waiters.remove(conn)
        if self.scheduler.release_owner(conn):
            self._changed = True

    def _read(self, conn):
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        conn.last = time.monotonic()
        conn.rbuf += data
        self._process(conn)

    def _process(self, conn):
        start = 0
        while conn.waiter is None and not conn.closed and len(conn.wbuf) < WBUF_LIMIT:
            if conn.discarding:
                i = conn.rbuf.find(b"\n")
                if i < 0:
                    conn.rbuf.clear()
                    break
                del conn.rbuf[:i + 1]
                conn.discarding = False
                continue
            i = conn.rbuf.find(b"\n", start)
            if i < 0:
                if len(conn.rbuf) > P.MAX_REQUEST:
                    conn.rbuf.clear()
                    conn.discarding = True
                    self._reply(conn, RequestError(f"request longer than {P.MAX_REQUEST} bytes", P.TOO_LONG).reply())
                break
            line = bytes(conn.rbuf[:i])
            del conn.rbuf[:i + 1]
            if len(line) > P.MAX_REQUEST:
                self._reply(conn, RequestError(f"request longer than {P.MAX_REQUEST} bytes", P.TOO_LONG).reply())
            elif line.strip():
                self._request(conn, line)
        if not conn.closed:
            self._interest(conn)

    def _request(self, conn, line):
        sched = self.scheduler
        claim = None
        try:
            req = parse(line)
            op = req["op"]
            if op == "acquire":
                try:
                    gpu, lease = sched.try_acquire(req["memory"], conn, conn.pid)
                except RequestError as exc:
                    timeout = req["timeout"]
                    if exc.code != P.NO_GPU_FREE or not req["block"] or timeout == 0:
                        raise
                    deadline = None if timeout is None else time.monotonic() + timeout
                    conn.waiter = (req["memory"], deadline, timeout)
                    self._waiters.append(conn)
                    return
                reply, claim = self._grant(gpu, lease)
            elif op == "release":
                sched.release(req["lease"], conn)
                self._changed = True
                reply = dict(ok=True)
            else:
                reply = sched.status()
        except RequestError as exc:
            reply = exc.reply()
        except (OSError, GpumrError) as exc:  # lock files out of reach (no descriptors, folder gone)
            reply = _server_error(exc)
        self._reply(conn, reply, claim)

    def _serve_waiters(self):
        self._changed = False
        now = time.monotonic()
        self._next_poll = now + POLL
        for conn in list(self._waiters):  # first come, first served
            memory, deadline, timeout = conn.waiter
            claim = None
            try:
                gpu, lease = self.scheduler.try_acquire(memory, conn, conn.pid)
                reply, claim = self._grant(gpu, lease)
            except RequestError as exc:
                if exc.code == P.NO_GPU_FREE and (deadline is None or now < deadline):
                    continue
                if exc.code == P.NO_GPU_FREE:
                    exc = RequestError(f"no GPU is free (waited {timeout:g} s)", P.NO_GPU_FREE)
                reply = exc.reply()
            except (OSError, GpumrError) as exc:
                reply = _server_error(exc)
            conn.waiter = None
            self._waiters.remove(conn)
            conn.last = now
            self._reply(conn, reply, claim)
            if not conn.closed:
                self._process(conn)  # requests that came in behind the blocking one

    def _grant(self, gpu, lease):
        """The reply granting ``lease`` and, over a Unix socket, a copy of its slot's lock to send with it."""
        reply = dict(ok=True, gpu=gpu, lease=lease)
        fd = self.scheduler.claim(lease) if self._unix else None
        if fd is None:
            return reply, None
        try:
            claim = os.dup(fd)
        except OSError:
            return reply, None  # out of descriptors: the service alone holds the slot, as for an old client
        reply["claim"] = True
        return reply, claim

    def _sweep(self, now):
        self._next_sweep = now + max(0.05, min(1.0, self.idle_timeout / 4))
        for conn in list(self._conns):
            if now - conn.last <= self.idle_timeout or conn.waiter is not None:
                continue
            if conn.wbuf:  # has not read its replies for that long, lease or not: it is stuck
                self._close(conn)
            elif not self.scheduler.holds(conn):
                self._reply(conn, RequestError(f"idle for {self.idle_timeout:g} s; closing", P.IDLE).reply())
                self._close(conn)

    def _reply(self, conn, obj, claim=None):
        conn.wbuf += json.dumps(obj).encode() + b"\n"
        if claim is not None:
            conn.fds.append([claim, len(conn.wbuf)])  # sent with a byte of this reply or an earlier one
        self._flush(conn)

    def _flush(self, conn):
        try:
            while conn.wbuf:
                if conn.fds:
                    batch = conn.fds[:FDS_PER_SEND]
                    # No further than the last of these replies: later claims go with later bytes.
                    end = batch[-1][1]
                    sent = conn.sock.sendmsg([conn.wbuf[:end]], [(
                        socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd for fd, _ in batch]))])
                    del conn.fds[:len(batch)]
                    for fd, _ in batch:
                        os.close(fd)  # the client has its copy now
                else:
                    sent = conn.sock.send(conn.wbuf)
                del conn.wbuf[:sent]
                for pending in conn.fds:
                    pending[1] -= sent
                conn.last = time.monotonic()
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(conn)
            return
        if bool(conn.wbuf) != bool(conn.events & selectors.EVENT_WRITE):
            self._interest(conn)

    # -- the end ---------------------------------------------------------
    def server_close(self):
        """Close every connection (their leases end) and the socket; remove our socket file."""
        for conn in list(self._conns):
            self._close(conn)
        self._sel.close()
        self._listener.close()
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
        if self._identity is not None:
            try:
                st = os.lstat(self.address)
                if (st.st_dev, st.st_ino) == self._identity:
                    os.unlink(self.address)
            except OSError:
                pass


def _server_error(exc):
    return dict(ok=False, error=f"the scheduler could not check the lease folder: {exc}", code=P.SERVER_ERROR)


