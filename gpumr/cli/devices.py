"""``gpumr probe`` and ``gpumr scheduler serve|status``."""

import json
import sys

from ..errors import GpumrError
from ..sizes import human, size_arg
from .args import command, positive


def cmd_probe(args):
    from ..devices.chooser import DeviceChooser
    from ..devices.leases import check_slots
    check_slots(args.gpu_slots, "--gpu-slots")
    chooser = DeviceChooser("auto", memory=args.memory, slots=args.gpu_slots, scheduler=False)
    if not chooser.has_gpus:
        if args.json:
            json.dump(dict(gpus=[], reason=chooser.why_cpu_only, simulated=False), sys.stdout)
            print()
        else:
            print(f"no GPU here ({chooser.why_cpu_only}); records will run on the CPU")
        return
    verdicts = chooser.verdicts()
    if args.json:
        json.dump(dict(simulated=chooser.simulated, gpus=[dict(
            index=v.gpu.index, name=v.gpu.name, uuid=v.gpu.uuid, compute_mode=v.gpu.compute_mode,
            memory_total=v.gpu.memory_total, memory_free=v.gpu.memory_free, utilization=v.gpu.utilization,
            processes=[dict(pid=p, used_memory=m) for p, m in v.gpu.processes],
            free=v.free, reason=v.reason) for v in verdicts]), sys.stdout, indent=2)
        print()
        return
    if chooser.simulated:
        print("simulated GPUs (GPUMR_SIMULATE_GPUS); no NVIDIA software involved")
    for v in verdicts:
        g = v.gpu
        state = "free" if v.free else f"not free, {v.reason}"
        print(f"gpu:{g.index} {g.name} mode={g.compute_mode} processes={len(g.processes)} "
              f"memory={human(g.memory_free)} free of {human(g.memory_total)} util={g.utilization}% -> {state}")


def _raise_nofile_limit():
    """Let the service hold as many connections as the hard limit allows (soft limit up to it)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft


def cmd_serve(args):
    import signal

    from seqfile.atomic import interrupts_held

    from ..devices.leases import check_slots
    from ..devices.service import make_server, node_scheduler, remove_pid_file, write_pid_file
    check_slots(args.slots_per_gpu, "--slots-per-gpu")
    mode = None
    if args.socket_mode is not None:
        try:
            mode = int(args.socket_mode, 8)
            if not 0 <= mode <= 0o777:
                raise ValueError
        except ValueError:
            raise GpumrError(f"--socket-mode {args.socket_mode!r}: expected octal permissions such as 660") from None
    limit = _raise_nofile_limit()
    cap = max(1, min(args.max_connections, limit - 64))
    sched = node_scheduler(args.policy, args.slots_per_gpu, args.lease_dir)
    gpus = sched._snapshot()
    sim = " (simulated)" if any(g.simulated for g in gpus) else ""

    class Stopped(BaseException):  # (not an Exception: nothing in the loop may take it for an error)
        """SIGTERM: the service's normal end (exit status 0)."""

    def stop(signum, frame):
        raise Stopped  # the same clean end as Ctrl-C: leases end, the socket file goes

    server = None
    try:
        signal.signal(signal.SIGTERM, stop)
        with interrupts_held():  # a signal as the socket file appears comes after `server` is set: the file goes
            server = make_server(sched, args.socket, args.tcp, mode, max_connections=cap,
                                 idle_timeout=args.idle_timeout)
        where = f"127.0.0.1:{server.address[1]}" if args.tcp is not None else server.address
        if args.pid_file:
            write_pid_file(args.pid_file)  # only now: whoever reads it finds a service answering
        print(f"gpumr scheduler: {len(gpus)} GPU(s){sim}, policy {args.policy}, "
              f"{args.slots_per_gpu} slot(s) each, serving on {where} "
              f"(at most {cap} connections, idle timeout {args.idle_timeout:g} s)", flush=True)
        server.serve_forever()
    except Stopped:
        pass  # (Ctrl-C goes on to the error boundary once the service is down: "gpumr: interrupted", 130)
    finally:
        with interrupts_held():  # leases end and the socket and pid files go, whatever comes meanwhile
            if server is not None:
                server.server_close()
            if args.pid_file:
                remove_pid_file(args.pid_file)


def cmd_status(args):
    from ..devices.client import SchedulerClient
    from ..devices.paths import default_socket
    if args.expect_pid is not None and args.tcp is not None:
        raise GpumrError("--expect-pid needs a Unix socket (--socket), not --tcp: TCP does not say who serves")
    client = SchedulerClient(args.socket or default_socket(), args.tcp)  # errors name the socket
    try:
        if args.expect_pid is not None:
            creds = client.peer()
            if creds is None or creds[0] != args.expect_pid:
                who = f"pid {creds[0]} (uid {creds[1]})" if creds else "a process whose pid the kernel does not say"
                raise GpumrError(f"scheduler at {client.where}: served by {who}, not by pid {args.expect_pid}")
        st = client.status()
    finally:
        client.close()
    if not st.get("ok"):
        raise GpumrError(f"scheduler at {client.where}: {st.get('error')}")
    if args.json:
        json.dump(st, sys.stdout, indent=2)
        print()
        return
    print(f"policy {st['policy']}" + (f", pid {st['pid']}" if "pid" in st else ""))
    for g in st["gpus"]:
        others = g.get("lock_file_leases", 0)
        print(f"gpu:{g['index']} {g['name']}{' (simulated)' if g['simulated'] else ''}: "
              f"{g['leases']}/{g['slots']} slot(s) leased"
              f"{f' (+{others} by lock-file tasks)' if others else ''}, {human(g['memory_leased'])} of "
              f"{human(g['memory_total'])} promised")
    for lease in st["leases"]:
        print(f"  lease {lease['lease']} gpu:{lease['gpu']} pid {lease['pid']} memory {human(lease['memory'])}")
    if not st["leases"]:
        print("  no leases")


def _seconds(text):
    import argparse
    import math
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value <= 86400):
        raise argparse.ArgumentTypeError(f"expected seconds from 0 to 86400, not {text!r}")
    return value


def register(sub):
    """Add ``probe`` and ``scheduler`` to the ``gpumr`` parser."""
    from ..devices.protocol import POLICIES
    from ..limits import MAX_GPU_SLOTS
    s = command(sub, "probe", "show each GPU and whether a task here would get it now", cmd_probe)
    s.add_argument("--json", action="store_true", help="print the facts as JSON")
    s.add_argument("--memory", type=size_arg, default=0, metavar="SIZE",
                   help="device memory a task needs, e.g. 2GiB (default 0)")
    s.add_argument("--gpu-slots", type=int, default=1, metavar="N",
                   help=f"tasks that may share one GPU (default 1, at most {MAX_GPU_SLOTS})")

    s = sub.add_parser("scheduler", help="the node-local GPU scheduler service",
                       description="The node-local GPU scheduler service and its status.")
    ssub = s.add_subparsers(dest="action", metavar="ACTION")
    ssub.required = True
    a = command(ssub, "serve", "serve GPU leases to this node's tasks", cmd_serve)
    a.add_argument("--socket", metavar="PATH",
                   help="Unix socket path (default: $GPUMR_SCHEDULER_SOCKET or scheduler.sock in a per-user temp folder)")
    a.add_argument("--tcp", type=int, metavar="PORT", help="serve on 127.0.0.1:PORT instead (0: any free port, "
                                                          "printed)")
    a.add_argument("--socket-mode", metavar="OCTAL",
                   help="permissions of the socket file (default: 777 less the umask; the folder decides who "
                        "reaches it: the per-user folder is 0700, a shared one e.g. setgid 2750, or 3770 (sticky) where the "
                        "group writes in it, with umask 007)")
    a.add_argument("--max-connections", type=positive, default=4096, metavar="N",
                   help="connections served at once; more get a too-many-connections reply (default 4096, "
                        "lowered to fit the open-file limit)")
    a.add_argument("--idle-timeout", type=_seconds, default=60.0, metavar="SECONDS",
                   help="close a connection that holds no lease after this long without a request (default 60)")
    a.add_argument("--policy", choices=POLICIES, default="least-processes",
                   help="how a GPU is picked among the free ones (default least-processes)")
    a.add_argument("--slots-per-gpu", type=int, default=1, metavar="N",
                   help=f"leases per GPU (default 1, at most {MAX_GPU_SLOTS})")
    a.add_argument("--lease-dir", metavar="DIR", help="lock folder shared with lock-file clients")
    a.add_argument("--pid-file", metavar="PATH",
                   help="write the service's pid here once it answers (atomically: a link there is replaced, not "
                        "followed); removed when it stops")
    a = command(ssub, "status", "print the service's GPUs and leases", cmd_status)
    a.add_argument("--socket", metavar="PATH", help="Unix socket path (default as for serve)")
    a.add_argument("--tcp", type=int, metavar="PORT", help="ask 127.0.0.1:PORT instead")
    a.add_argument("--json", action="store_true", help="print the service's reply as JSON")
    a.add_argument("--expect-pid", type=int, metavar="PID",
                   help="fail unless process PID serves the socket (by the kernel's peer credentials)")
