"""Running the service on a node: its socket (a stale one cleared), its pid file, the server made from a
policy (:mod:`.policy`) and the transport (:mod:`.transport`)."""

import os
import socket
import stat

from seqfile.atomic import write_bytes

from ...errors import GpumrError
from ...trusted import open_regular
from ..paths import socket_path
from ..protocol import peer_credentials
from .transport import BACKLOG, IDLE_TIMEOUT, MAX_CONNECTIONS, Server


def clear_stale_socket(path):
    """Remove ``path`` if it is a socket that no server answers on; refuse anything else. Raises ``GpumrError`` when
    ``path`` is not a socket (a user's file is never removed), or a server answers there (or might: it does not refuse
    the connection)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise GpumrError(f"{path}: exists and is not a socket; not removing it (choose another --socket)")
    probe = socket.socket(socket.AF_UNIX)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
        creds = peer_credentials(probe)
    except ConnectionRefusedError:
        os.unlink(path)  # a socket file whose server is gone
        return
    except OSError as exc:
        raise GpumrError(f"{path}: a socket that cannot be checked ({exc.strerror or exc}); "
                         "not removing it") from None
    finally:
        probe.close()
    who = f" (pid {creds[0]}, uid {creds[1]})" if creds else ""
    raise GpumrError(f"{path}: a server is already serving there{who}; not replacing it")


def write_pid_file(path):
    """Record this process's pid in ``path`` atomically: a link found there is replaced, never written through."""
    write_bytes(path, f"{os.getpid()}\n".encode())


def remove_pid_file(path):
    """Remove ``path`` if it is still a plain file naming this process (not a later service's, not a link)."""
    try:
        fd = open_regular(path, what="a pid file")  # gpumr.trusted's rule: no link, no FIFO, yours or root's
    except (OSError, GpumrError):
        return
    try:
        ours = os.read(fd, 64).strip() == str(os.getpid()).encode()
    finally:
        os.close(fd)
    if ours:
        os.unlink(path)


def make_server(scheduler, path=None, tcp_port=None, mode=None, backlog=BACKLOG, max_connections=MAX_CONNECTIONS,
                idle_timeout=IDLE_TIMEOUT):
    """A :class:`Server` for ``scheduler`` on a Unix socket at ``path`` (or TCP 127.0.0.1:``tcp_port``).

    Parameters
    ----------
    mode : int, optional
        Permissions of the socket file; by default they follow the umask (``0777 & ~umask``) and the folder decides
        who may reach it."""
    if tcp_port is not None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", tcp_port))
        address, identity = sock.getsockname(), None
    else:
        path = socket_path(path)
        clear_stale_socket(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(path)
        if mode is not None:
            os.chmod(path, mode)  # before listen(): nobody can connect yet
        st = os.lstat(path)
        address, identity = path, (st.st_dev, st.st_ino)
    sock.listen(backlog)
    sock.setblocking(False)
    return Server(scheduler, sock, address, max_connections, idle_timeout, identity)


