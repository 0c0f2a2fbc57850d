"""The `kai` command: run components, manage the local control plane, simulate and snapshot, and explain the
live cluster (`why`, `what-if`, `queues`, `top`). Installed also as the kubectl plugin `kubectl-kai`."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from operators import components


def _dev_up(args: argparse.Namespace) -> int:
    from operators.devcluster import cluster

    if args.real_node is None:
        args.real_node = os.geteuid() == 0
        if not args.real_node:
            print("no real node: it needs root (network namespace, cgroups, containerd); the kwok nodes run alone",
                  file=sys.stderr)
    opts = cluster.Options(name=args.name, nodes=args.nodes, gpus=args.gpus, gpu_memory_mib=args.gpu_memory,
                           gpu_product=args.gpu_product, cpu=args.cpu, memory=args.memory,
                           port_base=args.port_base, components=not args.no_components,
                           kuberay=not args.no_kuberay, autoscaler=args.autoscaler, timeout=args.timeout, dra=args.dra,
                           shards=args.shards, shard_nodes=args.shard_nodes, topology=args.topology,
                           real_node=args.real_node, suite=args.suite, usage_db=args.usage_db,
                           audit_policy=args.audit_policy.read_text() if args.audit_policy else "")
    started = time.monotonic()
    try:
        state = cluster.up(opts)
    except (cluster.StartError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"cluster {state.name!r} is up in {time.monotonic() - started:.1f}s "
          f"({args.nodes} node(s) x {args.gpus} GPU(s)); logs: {state.dir}/logs", file=sys.stderr)
    print(cluster.env_lines(state))
    if args.detach:
        return 0
    print("running; press Ctrl-C to stop and clean up", file=sys.stderr)
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    while not stop:
        time.sleep(0.5)
    cluster.down(state.name)
    return 0


def _shard_names(value: str) -> list[str]:
    from operators.devcluster.shards import parse_shards

    try:
        return parse_shards(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _topology(value: str) -> tuple[int, int]:
    from operators.devcluster.nodes import parse_topology

    try:
        return parse_topology(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _dev_down(args: argparse.Namespace) -> int:
    from operators.devcluster import cluster

    try:
        if not cluster.down(args.name):
            print(f"no cluster named {args.name!r} is running", file=sys.stderr)
    except cluster.StartError as exc:  # the real node left something behind: named, and `down` can be retried
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _dev_env(args: argparse.Namespace) -> int:
    from operators.devcluster import cluster

    state = cluster.load_state(args.name)
    if state is None or not cluster.is_running(state):
        print(f"no cluster named {args.name!r} is running; start it with `kai dev up --detach`", file=sys.stderr)
        return 1
    print(cluster.env_lines(state))
    return 0


def _dev_import_image(args: argparse.Namespace) -> int:
    from operators.devcluster import cluster
    from operators.devcluster.node import lifecycle

    state = cluster.load_state(args.name)
    if state is None or not cluster.is_running(state) or not state.node:
        print(f"no cluster named {args.name!r} with a real node is running", file=sys.stderr)
        return 1
    try:
        lifecycle.import_image(state.dir, args.archive)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _dev_build(_: argparse.Namespace) -> int:
    from operators.devcluster import build

    return build.main()


def _dev_image(args: argparse.Namespace) -> int:
    from operators.devcluster import image

    return image.main([])


def _run(args: argparse.Namespace) -> int:
    names = list(components.COMPONENTS) if args.component == "all" else [args.component]
    if args.component != "all" and not components.is_available(args.component):
        print(f"error: component {args.component!r} is not implemented yet", file=sys.stderr)
        return 2
    if len(names) == 1:
        module = components.load(names[0])
        return int(module.main(args.extra))  # type: ignore[attr-defined]
    ready = [n for n in names if components.is_available(n)]
    missing = [n for n in names if n not in ready]
    if not ready:
        print("error: no component is implemented yet", file=sys.stderr)
        return 2
    if missing:
        print(f"not implemented yet, not started: {', '.join(missing)}", file=sys.stderr)
    # One process per component, as in production; this process only supervises. Each gets its own
    # metrics/probe/webhook ports (base 8800, +10 per component) unless the extra arguments set them.
    procs = {}
    for i, name in enumerate(components.COMPONENTS):
        if name not in ready:
            continue
        ports = [f"--metrics-bind-address=:{8800 + 10 * i}", f"--health-probe-bind-address=:{8801 + 10 * i}"]
        if name in ("admission", "queue-controller", "podgroup-controller"):
            ports.append(f"--webhook-addr=:{8802 + 10 * i}")
        extra = [a for a in ports if a.split("=")[0] not in {e.split("=")[0] for e in args.extra}]
        procs[name] = subprocess.Popen([sys.executable, "-m", "operators.cli", "run", name, *extra, *args.extra])
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    code = 0
    while not stop:
        for name, proc in procs.items():
            if proc.poll() is not None:
                print(f"component {name} exited with {proc.returncode}; stopping the others", file=sys.stderr)
                code = proc.returncode or 1
                stop = True
        time.sleep(0.3)
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs.values():
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    return code


def _simulate(args: argparse.Namespace) -> int:
    try:
        from operators.scheduler.shell import simulate
    except ImportError:
        print("error: the scheduler is not implemented yet", file=sys.stderr)
        return 2
    return int(simulate.main(args.extra))


def _snapshot(args: argparse.Namespace) -> int:
    try:
        from operators.scheduler.shell import snapshotcmd
    except ImportError:
        print("error: `kai snapshot` is not implemented yet", file=sys.stderr)
        return 2
    return int(snapshotcmd.main(args.extra))


def version() -> str:
    """The installed package's version (the chart's appVersion and the image tag are the same)."""
    from importlib import metadata

    try:
        return metadata.version("kai-scheduler-py")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


INSIGHT_COMMANDS = {
    "why": "why a workload is pending, and the smallest changes that would start it",
    "what-if": "what the scheduler would do with these objects now (nothing is written)",
    "queues": "the queue tree with quota, limit, fair share, allocated and requested",
    "top": "nodes by GPU: whole GPUs used, shared GPU groups, idle GPUs",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kai", description=__doc__)
    p.add_argument("--version", action="version", version=f"kai {version()}")
    sub = p.add_subparsers(dest="command", required=True)

    dev = sub.add_parser("dev", help="the local control plane").add_subparsers(dest="dev", required=True)
    up = dev.add_parser("up", help="build (once) and start a local Kubernetes with fake GPU nodes")
    up.add_argument("--name", default=os.environ.get("KAI_DEV_CLUSTER", "default"))
    up.add_argument("--nodes", type=int, default=4)
    up.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    up.add_argument("--gpu-memory", type=int, default=81920, help="MiB per GPU")
    up.add_argument("--gpu-product", default="NVIDIA-A100-SXM4-80GB")
    up.add_argument("--cpu", default="64")
    up.add_argument("--memory", default="512Gi")
    up.add_argument("--port-base", type=int, default=16000)
    up.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for each piece")
    up.add_argument("--no-components", action="store_true", help="do not start the KAI components")
    up.add_argument("--no-kuberay", action="store_true", help="do not start the KubeRay operator")
    up.add_argument("--autoscaler", action="store_true",
                    help="install the ProvisioningRequest CRD and run the test provisioner")
    up.add_argument("--dra", action="store_true",
                    help="the GPU nodes' GPUs as DRA devices (a test DRA driver publishes their ResourceSlices)")
    up.add_argument("--detach", action="store_true", help="return once the cluster is ready")
    up.add_argument("--shards", type=_shard_names, default=[], metavar="A,B",
                    help="node-pool shards: a SchedulingShard, nodes and a scheduler process per name")
    up.add_argument("--shard-nodes", type=int, default=2, help="nodes per shard (labelled kai.scheduler/node-pool)")
    up.add_argument("--topology", type=_topology, default=None, metavar="ZxR",
                    help="label the nodes into Z zones of R racks (topology.kubernetes.io/zone, "
                         "cloud.provider.com/topology-rack), for topology-aware scheduling")
    up.add_argument("--real-node", action=argparse.BooleanOptionalAction, default=None,
                    help="one node with a real kubelet, containerd and kube-proxy, tainted for the suite's pods "
                         "(default: on when run as root, which it needs)")
    up.add_argument("--usage-db", action="store_true",
                    help="time-based fair share: a Prometheus (Debian's package) scraping the components, "
                         "the default SchedulingShard reading queue usage from it")
    up.add_argument("--suite", choices=["host", "chart"], default="host",
                    help="host: the components as host processes (the fast inner loop); chart: the image built "
                         "here, installed with the seed's helm command, every component a pod on the real node")
    up.add_argument("--audit-policy", type=Path, default=None, metavar="FILE",
                    help="the API server's audit policy (the integration tests' is tests/audit-policy.yaml); "
                         "the log goes to <state>/logs/audit.log")
    up.set_defaults(func=_dev_up)
    down = dev.add_parser("down", help="stop everything `up` started and remove its state")
    down.add_argument("--name", default=os.environ.get("KAI_DEV_CLUSTER", "default"))
    down.set_defaults(func=_dev_down)
    env = dev.add_parser("env", help="print the shell exports for a running cluster")
    env.add_argument("--name", default=os.environ.get("KAI_DEV_CLUSTER", "default"))
    env.set_defaults(func=_dev_env)
    image = dev.add_parser("import-image", help="import an image archive (OCI or docker) into the real node")
    image.add_argument("--name", default=os.environ.get("KAI_DEV_CLUSTER", "default"))
    image.add_argument("archive", type=Path)
    image.set_defaults(func=_dev_import_image)
    dev.add_parser("build", help="build the control plane binaries into the cache").set_defaults(func=_dev_build)
    img = dev.add_parser("image", help="build the product's image (buildah on a Debian base), no registry")
    img.set_defaults(func=_dev_image)

    run = sub.add_parser("run", help="run one component, or all of them")
    run.add_argument("component", choices=[*components.RUNNABLE, "all"])
    run.add_argument("extra", nargs=argparse.REMAINDER, help="arguments for the component")
    run.set_defaults(func=_run)

    sim = sub.add_parser("simulate", help="run the scheduler's decisions on a snapshot file", add_help=False)
    sim.add_argument("extra", nargs=argparse.REMAINDER)
    sim.set_defaults(func=_simulate)
    snap = sub.add_parser("snapshot", help="write the cluster state the scheduler uses", add_help=False)
    snap.add_argument("extra", nargs=argparse.REMAINDER)
    snap.set_defaults(func=_snapshot)
    for name, text in INSIGHT_COMMANDS.items():
        sub.add_parser(name, help=text, add_help=False).add_argument("extra", nargs=argparse.REMAINDER)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `simulate`, `snapshot` and the insight commands own their flags (argparse's REMAINDER drops a leading option).
    if argv and argv[0] in INSIGHT_COMMANDS:
        from operators.insight import shell

        return shell.main(argv[0], argv[1:])
    if argv and argv[0] in ("simulate", "snapshot"):
        ns = argparse.Namespace(extra=argv[1:])
        return _simulate(ns) if argv[0] == "simulate" else _snapshot(ns)
    args = parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
