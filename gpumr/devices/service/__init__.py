"""The node-local GPU scheduler service: lease bookkeeping, policies and the socket server.

One process per node hands out GPU leases to the node's tasks over a
Unix-domain socket (:mod:`gpumr.devices.protocol`); each lease is also the
lock-file lease of one slot (:mod:`gpumr.devices.leases`), handed to the
task as a locked descriptor, so a slot is never held twice and outlives a
killed service. Three modules: the policies and lease bookkeeping (:mod:`.policy`), the
socket server, one :mod:`selectors` thread with bounded connections,
buffers and idle time (:mod:`.transport`), and running it on a node
(:mod:`.daemon`). Setting it up, its policies and who may
use it: :doc:`/how-to/gpu-nodes`; the protocol:
:doc:`/reference/scheduler-protocol`.
"""

from .daemon import clear_stale_socket, make_server, remove_pid_file, write_pid_file
from .policy import Scheduler, node_scheduler
from .transport import Server, parse

__all__ = ["Scheduler", "node_scheduler", "Server", "parse", "make_server", "clear_stale_socket", "write_pid_file",
           "remove_pid_file"]
