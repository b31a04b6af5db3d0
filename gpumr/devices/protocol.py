"""The scheduler service's protocol, shared by the service and its clients.

A Unix-domain socket (TCP on loopback on request), one JSON object per line
each way, as ``shared/DESIGN.md`` fixes:

* ``{"op": "acquire", "memory": BYTES, "block": bool, "timeout": SECONDS}``
  -> ``{"ok": true, "gpu": INDEX, "lease": "ID"}`` or ``{"ok": false, "error": ...}``
* ``{"op": "release", "lease": "ID"}`` -> ``{"ok": true}``
* ``{"op": "status"}`` -> ``{"ok": true, "policy": ..., "gpus": [...], "leases": [...]}``
"""

#: Policies the service can hand GPUs out by.
POLICIES = ("random", "round-robin", "least-processes")
#: Longest request line the service reads (bytes).
MAX_REQUEST = 64 * 1024
#: The error text of "no GPU is free now" (as opposed to a malformed request).
NO_GPU = "no GPU is free"


class RequestError(ValueError):
    """A request the service cannot act on; its text goes back as the error."""
