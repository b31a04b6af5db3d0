"""``gpumr probe`` and ``gpumr scheduler serve|status``."""

import json
import sys

from ..errors import GpumrError
from ..sizes import human, size_arg
from .args import command, positive


def cmd_probe(args):
    from ..devices.chooser import DeviceChooser
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


def cmd_serve(args):
    from ..devices.service import make_server, node_scheduler
    sched = node_scheduler(args.policy, args.slots_per_gpu, args.lease_dir)
    gpus = sched._snapshot()
    server = make_server(sched, args.socket, args.tcp, int(args.socket_mode, 8))
    where = f"127.0.0.1:{args.tcp}" if args.tcp is not None else server.server_address
    sim = " (simulated)" if any(g.simulated for g in gpus) else ""
    print(f"gpumr scheduler: {len(gpus)} GPU(s){sim}, policy {args.policy}, "
          f"{args.slots_per_gpu} slot(s) each, serving on {where}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        if args.tcp is None:
            import os
            try:
                os.unlink(server.server_address)
            except OSError:
                pass


def cmd_status(args):
    from ..devices.client import SchedulerClient
    from ..devices.paths import default_socket
    path = args.socket or default_socket()
    try:
        client = SchedulerClient(path, args.tcp, timeout=5)
    except OSError as exc:
        raise GpumrError(f"{path}: no scheduler service answers ({exc.strerror or exc})") from None
    st = client.status()
    client.close()
    if args.json:
        json.dump(st, sys.stdout, indent=2)
        print()
        return
    print(f"policy {st['policy']}")
    for g in st["gpus"]:
        print(f"gpu:{g['index']} {g['name']}{' (simulated)' if g['simulated'] else ''}: "
              f"{g['leases']}/{g['slots']} slot(s) leased, {human(g['memory_leased'])} of "
              f"{human(g['memory_total'])} promised")
    for lease in st["leases"]:
        print(f"  lease {lease['lease']} gpu:{lease['gpu']} pid {lease['pid']} memory {human(lease['memory'])}")
    if not st["leases"]:
        print("  no leases")


def register(sub):
    """Add ``probe`` and ``scheduler`` to the ``gpumr`` parser."""
    from ..devices.protocol import POLICIES
    s = command(sub, "probe", "show each GPU and whether a task here would get it now", cmd_probe)
    s.add_argument("--json", action="store_true", help="print the facts as JSON")
    s.add_argument("--memory", type=size_arg, default=0, metavar="SIZE",
                   help="device memory a task needs, e.g. 2GiB (default 0)")
    s.add_argument("--gpu-slots", type=positive, default=1, metavar="N",
                   help="tasks that may share one GPU (default 1)")

    s = sub.add_parser("scheduler", help="the node-local GPU scheduler service",
                       description="The node-local GPU scheduler service and its status.")
    ssub = s.add_subparsers(dest="action", metavar="ACTION")
    ssub.required = True
    a = command(ssub, "serve", "serve GPU leases to this node's tasks", cmd_serve)
    a.add_argument("--socket", metavar="PATH",
                   help="Unix socket path (default: $GPUMR_SCHEDULER_SOCKET or scheduler.sock in a per-user temp folder)")
    a.add_argument("--tcp", type=int, metavar="PORT", help="serve on 127.0.0.1:PORT instead")
    a.add_argument("--socket-mode", default="600", metavar="OCTAL", help="permissions of the socket (default 600)")
    a.add_argument("--policy", choices=POLICIES, default="least-processes",
                   help="how a GPU is picked among the free ones (default least-processes)")
    a.add_argument("--slots-per-gpu", type=positive, default=1, metavar="N", help="leases per GPU (default 1)")
    a.add_argument("--lease-dir", metavar="DIR", help="lock folder shared with lock-file clients")
    a = command(ssub, "status", "print the service's GPUs and leases", cmd_status)
    a.add_argument("--socket", metavar="PATH", help="Unix socket path (default as for serve)")
    a.add_argument("--tcp", type=int, metavar="PORT", help="ask 127.0.0.1:PORT instead")
    a.add_argument("--json", action="store_true", help="print the service's reply as JSON")
