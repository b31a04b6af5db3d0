"""The scheduler service's protocol, shared by the service and its clients.

Every field and code: :doc:`/reference/scheduler-protocol`."""

import math
import socket
import struct

#: Policies the service can hand GPUs out by.
POLICIES = ("random", "round-robin", "least-processes")
#: Longest request line the service reads (bytes).
MAX_REQUEST = 64 * 1024
#: Largest ``memory`` a request may ask for (1 PiB: more is a mistake, not a GPU).
MAX_MEMORY = 1 << 50
#: Longest ``timeout`` a blocking acquire may ask for (one day).
MAX_TIMEOUT = 86400.0

# Error codes.
NO_GPU = "no-gpu"                       #: the node has no GPU at all
NO_GPU_FREE = "no-gpu-free"             #: none is free now (or within the timeout)
BAD_JSON = "bad-json"                   #: the line is not JSON
BAD_REQUEST = "bad-request"             #: not an object, wrong types, out-of-range numbers
UNKNOWN_OP = "unknown-op"
UNKNOWN_LEASE = "unknown-lease"         #: not a lease of this connection
TOO_LONG = "request-too-long"           #: a line longer than MAX_REQUEST
TOO_MANY = "too-many-connections"       #: the connection cap is reached; the service closes
IDLE = "idle-timeout"                   #: idle too long; the service closes
SERVER_ERROR = "server-error"           #: the service could not do it (e.g. its lock folder failed)
#: Codes meaning "no GPU for you now": a client runs the record on the CPU.
NO_GPU_CODES = (NO_GPU, NO_GPU_FREE)


class RequestError(ValueError):
    """A request the service cannot act on; its text and ``code`` go back in the reply."""

    def __init__(self, message, code=BAD_REQUEST):
        super().__init__(message)
        self.code = code

    def reply(self):
        """The error reply object."""
        return dict(ok=False, error=str(self), code=self.code)


def number(req, name, default, low, high, integer=False):
    """``req[name]`` checked to be a finite number in [low, high] (an int if ``integer``). Raises ``RequestError``:
    ``bad-request`` naming the field and what it must be."""
    value = req.get(name, default)
    if value is None and default is None:
        return None
    kinds = int if integer else (int, float)
    what = f"{name} must be {'an integer' if integer else 'a number'} from {low:g} to {high:g}"
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise RequestError(f"{what}, not {type(value).__name__}")
    try:
        ok = math.isfinite(value) and low <= value <= high
    except OverflowError:  # an int too large for a float
        ok = False
    if not ok:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:40] + "..."
        raise RequestError(f"{what}, not {shown}")
    return value


def peer_credentials(sock):
    """``(pid, uid, gid)`` of the process at the other end of a Unix socket, as the kernel says (else None)."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", creds)
    except (OSError, AttributeError):
        return None
