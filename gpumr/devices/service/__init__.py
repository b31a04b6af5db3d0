"""The node-local GPU scheduler service: lease bookkeeping, policies and the socket server.

Setting it up, its policies and who may use it: :doc:`/how-to/gpu-nodes`; the protocol:
:doc:`/reference/scheduler-protocol`."""

from .daemon import clear_stale_socket, make_server, remove_pid_file, write_pid_file
from .policy import Scheduler, node_scheduler
from .transport import Server, parse

__all__ = ["Scheduler", "node_scheduler", "Server", "parse", "make_server", "clear_stale_socket", "write_pid_file",
           "remove_pid_file"]
