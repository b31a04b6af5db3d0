"""A GPU owner: a process that leases a GPU for a job, sets the workload's GPU path up on it once and runs the GPU
batches of the node's tasks, for workloads whose device set-up is heavy (:attr:`gpumr.Workload.gpu_owner`: the CT
projections read, filtered and uploaded once instead of once per task).

The launcher starts the owners (:mod:`gpumr.launch.owners`) where the engine's tasks run on its machine. Tasks
reach one through a Unix socket in the job's private folder (:mod:`gpumr.tasks.owned`), from the job's user only
(the kernel's peer credentials). How it fits device choice: :doc:`/concepts/devices`."""

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from multiprocessing.connection import Client, Listener

from ..core.processor import reason_of
from ..errors import GpumrError
from ..log import logger, say_once

log = logger(__name__)

#: Seconds an owner of a ``--device auto`` job waits for a GPU to lease (meanwhile the tasks wait for it; then they
#: run as without an owner); with ``--device gpu`` it waits as long as a task would.
LEASE_WAIT = 10.0


class Owner:
    """The owner's state: the workload built once, one GPU leased for its life and set up once; serves batches.

    Parameters
    ----------
    spec : gpumr.tasks.runtime.Spec"""

    def __init__(self, spec):
        self.spec = spec
        self.ready = threading.Event()
        self.why = None  # why it serves no batch (set before ``ready``), or None
        self.device = None
        self.batches = self.records = 0
        self.tasks = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def set_up(self):
        """Build the workload, lease a GPU (waiting for one) and set its GPU path up; :attr:`why` says why not."""
        from ..devices.chooser import DeviceChooser
        from .device import Device
        from .runtime import built
        t0 = time.perf_counter()
        try:
            self.options, self.workload = built(self.spec)
            options = self.options
            auto = options.device == "auto"
            chooser = DeviceChooser("gpu", memory=options.gpu_memory, slots=options.gpu_slots,
                                    wait_timeout=LEASE_WAIT if auto else None)
            try:
                self.choice = chooser.choose(self.workload.gpu_memory([], options))
            except GpumrError:
                if not auto:
                    raise
                self.why = f"no GPU became free within {LEASE_WAIT:g} s"
            if self.why is None:
                self.why = self.workload.gpu_ready(options, chooser.simulated)
            if self.why is None:
                self.device = Device(self.choice)
                log.debug("GPU owner: %s set up on %s in %.2f s", self.workload.name, self.device.name,
                          time.perf_counter() - t0)
        except GpumrError as exc:
            self.why = str(exc)
        except Exception as exc:  # noqa: BLE001 (any failure to set up: the tasks run without the owner, told why)
            self.why = reason_of(exc)
        if self.why is not None:
            say_once(log, f"the GPU owner could not set up: {self.why}; each task runs its records itself")
        self.ready.set()

    def serve(self, path):
        """Take connections at ``path`` (this user's only) until told to stop."""
        from ..devices.protocol import peer_credentials
        self.path = path
        with Listener(path, "AF_UNIX") as listener:
            threading.Thread(target=self.set_up, daemon=True).start()
            while not self._stop.is_set():
                conn = listener.accept()
                with socket.socket(fileno=os.dup(conn.fileno())) as s:
                    creds = peer_credentials(s)
                if creds is None or creds[1] != os.getuid():
                    conn.close()
                    continue
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()
        if self.device is not None:
            log.debug("GPU owner: %d batch(es), %d record(s) from %d task(s) on %s", self.batches, self.records,
                      len(self.tasks), self.device.name)

    def _serve(self, conn):
        """One task's connection: its requests answered in turn until it closes (or its process ends)."""
        task = {}
        with conn:
            try:
                while self._answer(conn, conn.recv(), task):
                    pass
            except (EOFError, OSError):  # (the task ended: nothing to answer)
                return
            except Exception as exc:  # noqa: BLE001 (a request that is none of gpumr's: that connection is closed)
                log.debug("GPU owner: a connection closed on a request it could not answer: %s", reason_of(exc))

    def _answer(self, conn, request, task):
        """Answer one request of a connection (``task``: what its hello said); False once the connection is done with
        (a stop)."""
        if request[0] == "stop":
            self._stop.set()
            with contextlib.suppress(OSError), Client(self.path, "AF_UNIX"):
                pass  # (wakes the accepting loop)
            return False
        if request[0] == "hello":
            from ..core.workload import Workload
            from .output import Arrays
            self.ready.wait()
            self.tasks.add(request[1])
            if self.why is None and self.spec.stage and type(self.workload).finish is Workload.finish:
                task["arrays"] = Arrays(self.spec.stage, request[1])  # (written here, listed by the task)
            conn.send(("ready", self.device.gpu) if self.why is None else ("unavailable", self.why))
        elif request[0] == "batch":
            conn.send(self._batch(request[1], task.get("arrays")))
        return True

    def _batch(self, records, arrays=None):
        """``("done", results, written)`` of one batch of ``[(key, item)]`` on the owned GPU, or ``("failed",
        reason)``, or ``("lost", reason)`` once a CUDA error made the device untrusted (:mod:`gpumr.gpu.trust`).
        With the task's ``arrays`` (:class:`gpumr.tasks.output.Arrays`), the results' arrays are written into the
        stage here, as the task would write them, and ``written`` lists them for the task: slabs never travel to the
        task."""
        from ..gpu.trust import untrusted
        from .runtime import Said
        with self._lock:
            lost = untrusted(self.device.gpu)
            if lost:
                return "lost", lost
            try:
                results = list(Said(self.workload).gpu_batch(records, self.options, self.device))
            except Exception as exc:  # noqa: BLE001 (the task re-runs the batch on the CPU, counted as fallbacks)
                return ("lost" if untrusted(self.device.gpu) else "failed"), reason_of(exc)
            self.batches += 1
            self.records += len(records)
        if arrays is None:
            return "done", results, []
        before = len(arrays.written)
        try:  # (after the lock: the GPU serves another task meanwhile)
            results = [arrays.encode(key, r) if isinstance(r, dict) else r for (key, _), r in zip(records, results)]
        except Exception as exc:  # noqa: BLE001 (arrays not written: the task re-runs the batch, counted)
            return "failed", f"its arrays were not written: {reason_of(exc)}"
        return "done", results, arrays.written[before:]


def _orphaned(parent):
    """End this process once the launcher that started it is gone (killed, say): never an owner left holding a GPU."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def main(argv=None):
    """The owner process: ``python -m gpumr.tasks.owner SPEC_FILE SOCKET``."""
    import signal

    from ..boundary import install
    from ..log import set_verbosity
    from .runtime import Spec
    install()
    # The launcher ends it (a stop request; SIGTERM where the job is stopped): Ctrl-C at the terminal is the
    # launcher's to report, and a SIGTERM ends it without a line of its own.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    threading.Thread(target=_orphaned, args=(os.getppid(),), daemon=True).start()
    spec_file, path = (argv or sys.argv[1:])[:2]
    with open(spec_file, encoding="utf-8") as f:
        spec = Spec.from_json(f.read())
    set_verbosity(quiet=spec.verbosity == "quiet", verbose=spec.verbosity == "debug")
    try:
        Owner(spec).serve(path)
    except Exception as exc:  # noqa: BLE001 (the launcher says the owner did not start; the tasks run without it)
        log.debug("GPU owner: cannot serve at %s: %s", path, reason_of(exc))
        return 1
    finally:
        logging.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
