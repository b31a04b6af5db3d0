"""The launcher's side of a job's GPU owners (:mod:`gpumr.tasks.owner`): how many, started before the tasks and
stopped after them."""

import contextlib
import os
import time
from multiprocessing.connection import Client

from ..log import logger, say_once

log = logger(__name__)

#: The owners' sockets (numbered) and the spec's names in the job's folder.
SOCKET, SPEC = "gpu-owner-{}.sock", "gpu-owner.spec"
#: Seconds the launcher waits for an owner's socket.
LISTEN_WAIT = 60.0
#: The longest path a Unix socket may have (Linux's ``sun_path``, its NUL aside).
SUN_PATH = 107


def socket_folder(folder, stack):
    """A private folder for the owners' sockets: the job's ``folder`` where their paths fit :data:`SUN_PATH` (a
    long ``$TMPDIR`` makes them too long), else a new private one (0700) in ``$XDG_RUNTIME_DIR`` or ``/tmp``, removed
    when ``stack`` closes; None where none can be made.

    Examples
    --------
    >>> import contextlib
    >>> with contextlib.ExitStack() as stack:
    ...     socket_folder("/tmp/gpumr-job-x", stack), socket_folder("/tmp/" + "t" * 120, stack).startswith("/")
    ('/tmp/gpumr-job-x', True)
    """
    import shutil
    import tempfile
    if len(os.fsencode(os.path.join(folder, SOCKET.format(999)))) <= SUN_PATH:
        return folder
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    bases = [runtime] if runtime and os.path.isdir(runtime) and os.stat(runtime).st_uid == os.getuid() else []
    for base in [*bases, "/tmp"]:
        try:
            short = tempfile.mkdtemp(prefix="gpumr-", dir=base)
        except OSError:
            continue
        stack.callback(shutil.rmtree, short, ignore_errors=True)
        return short
    return None


def wanted(workload, options, tasks_here, tasks):
    """How many GPU owners a job of ``tasks`` tasks has (0: none): for a workload that asks for them, tasks on this
    machine and GPUs allowed, one per GPU here (possibly simulated), at most one per task process. Only such a job
    looks for GPUs here.

    Examples
    --------
    >>> import argparse
    >>> from gpumr.ct.workload import Backproject
    >>> wanted(Backproject(), argparse.Namespace(device="cpu", gpu_owner="on"), True, 4)
    0
    """
    if not (tasks_here and options.device != "cpu" and options.gpu_owner == "on" and workload.gpu_owner
            and workload.has_gpu()):
        return 0
    from ..devices.nvml import discover
    from ..engines.processes import workers_here
    gpus = len(discover().gpus)
    return min(gpus, tasks, workers_here(options, workload)) if gpus else 0


@contextlib.contextmanager
def started(spec, start, count=1):
    """``count`` owners (:mod:`gpumr.tasks.owner`) of job ``spec`` running for the block, started through the job's
    ``start`` (:class:`gpumr.engines.start.Start`): yields their sockets' paths (those that started: a task runs as
    without an owner where none did); stopped after the block."""
    import subprocess

    from ..engines.start import python_argv
    from ..tasks import owner
    spec_file = os.path.join(start.folder, SPEC)
    with open(os.open(spec_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as f:
        f.write(spec.to_json())
    owners = []
    sockets = contextlib.ExitStack()
    try:
        folder = socket_folder(start.folder, sockets)
        if folder is None:
            say_once(log, "no private folder could hold the GPU owners' sockets; each task sets its GPU up itself")
            count = 0
        for n in range(count):
            path = os.path.join(folder, SOCKET.format(n))
            argv = [*python_argv(owner.__name__), spec_file, path]
            owners.append((path, subprocess.Popen(argv, stdin=subprocess.DEVNULL, **start.popen())))
        deadline = time.monotonic() + LISTEN_WAIT
        while (any(not os.path.exists(path) and proc.poll() is None for path, proc in owners)
               and time.monotonic() < deadline):
            time.sleep(0.02)
        paths = [path for path, _ in owners if os.path.exists(path)]
        if len(paths) < len(owners):
            say_once(log, f"{len(owners) - len(paths)} of {len(owners)} GPU owner(s) did not start; tasks set those "
                          "GPUs up themselves")
        yield paths
    finally:
        for path, proc in owners:
            if os.path.exists(path):
                with contextlib.suppress(OSError, EOFError), Client(path, "AF_UNIX") as conn:
                    conn.send(("stop",))
        for _, proc in owners:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        sockets.close()
