"""The cluster-reading side of `kai why | what-if | queues | top` (also `kubectl kai ...`).

Reads the live state once through the current kubeconfig (the same reader as `kai snapshot`), hands it to the pure
analysis modules and prints the answer. Nothing is ever written to the cluster.
Exit codes: 0 success (`why`: the workload runs or would run now), 1 `why`: it stays pending, 2 usage or
read errors (unknown workload, unreachable API server, bad file).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from operators.core.cache import Resource
from operators.core.kube import api_client, raw
from operators.scheduler.decide.config import SchedulerConfig, add_arguments, config_from_args
from operators.scheduler.decide.plugins.proportion.usage import usage_pairs
from operators.scheduler.decide.simulation import with_implicit_podgroups
from operators.scheduler.decide.snapshot import Snapshot, snapshot_from_objects
from operators.scheduler.shell.simulate import load_objects
from operators.scheduler.shell.snapshotcmd import collect

EXIT_OK, EXIT_PENDING, EXIT_ERROR = 0, 1, 2
REPLICASETS = Resource("apps", "v1", "replicasets")


class UsageError(Exception):
    pass


def current_namespace(kubeconfig: str | None) -> str:
    """The namespace of the kubeconfig's current context (kubectl's default), else `default`."""
    paths = [kubeconfig] if kubeconfig else (os.environ.get("KUBECONFIG") or "").split(os.pathsep)
    paths = [p for p in paths if p] or [str(Path.home() / ".kube" / "config")]
    for path in paths:
        try:
            cfg = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        current = cfg.get("current-context")
        for ctx in cfg.get("contexts") or ():
            if ctx.get("name") == current:
                return str((ctx.get("context") or {}).get("namespace") or "default")
    return "default"


def _common(p: argparse.ArgumentParser, outputs: Sequence[str]) -> None:
    p.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    p.add_argument("-A", "--all-namespaces", action="store_true",
                   help="look in every namespace (why: the workload's name must then be unique)")
    p.add_argument("-o", "--output", choices=outputs, default="text")
    p.add_argument("--kubeconfig", default=None)
    add_arguments(p)


async def _read(kubeconfig: str | None, replicasets_in: str | None = None,
                all_replicasets: bool = False) -> list[dict[str, Any]]:
    objects = await collect(kubeconfig)
    if replicasets_in or all_replicasets:  # a Deployment's pods are owned by its ReplicaSets
        api = await api_client(kubeconfig)
        async with api:
            page = await raw(api, "GET", REPLICASETS.path(replicasets_in), timeout=120)
        objects += [{"kind": "ReplicaSet", **o} for o in page.get("items") or []]
    return objects


def _snapshot(objects: Sequence[dict[str, Any]], config: SchedulerConfig) -> Snapshot:
    return snapshot_from_objects(with_implicit_podgroups(objects, config.scheduler_name),
                                 node_pool_label=config.node_pool_label, partition=config.partition)


def _dump(data: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    return str(yaml.safe_dump(data, sort_keys=False))


# --- commands ------------------------------------------------------------------------------------


def why(argv: Sequence[str]) -> int:
    from operators.insight import targets
    from operators.insight import why as analysis

    p = argparse.ArgumentParser(prog="kai why", description="Why a workload is pending and what would start it. "
                                "Exit 0: it runs or would run now; 1: it stays pending; 2: error.")
    p.add_argument("kind", help="pod | podgroup (pg) | rayjob | raycluster | deployment | job")
    p.add_argument("name")
    _common(p, ("text", "json", "yaml"))
    args = p.parse_args(argv)
    kind = targets.KINDS.get(args.kind.lower())
    if kind is None:
        raise UsageError(f"unknown kind {args.kind!r}; one of: pod, podgroup, rayjob, raycluster, deployment, job")
    namespace = "" if args.all_namespaces else args.namespace or current_namespace(args.kubeconfig)
    config = config_from_args(args)
    objects = asyncio.run(_read(args.kubeconfig, namespace if kind == "Deployment" else None,
                                all_replicasets=kind == "Deployment" and not namespace))
    if not namespace:
        spaces = sorted({str((o.get("metadata") or {}).get("namespace")) for o in objects
                         if o.get("kind") == "PodGroup"})
        found = [ns for ns in spaces if targets.podgroups_for(objects, kind, args.name, ns)]
        if len(found) > 1:
            raise UsageError(f"{args.kind} {args.name} exists in several namespaces ({', '.join(found)}); use -n")
        namespace = found[0] if found else "<all namespaces>"
    groups = targets.podgroups_for(objects, kind, args.name, namespace)
    if not groups:
        raise UsageError(f"no PodGroup found for {args.kind} {namespace}/{args.name} (does it exist, and has the "
                         f"pod-grouper seen its pods yet?)")
    snapshot = _snapshot(objects, config)
    now = time.time()
    reports = [analysis.explain(snapshot, config, now, namespace, g, targets.deadlines(objects)) for g in groups]
    if args.output == "text":
        sys.stdout.write("\n".join(analysis.format_text(r) for r in reports))
    else:
        data = [r.to_dict() for r in reports]
        sys.stdout.write(_dump(data[0] if len(data) == 1 else data, args.output))
    return EXIT_OK if all(r.runs_now for r in reports) else EXIT_PENDING


def what_if(argv: Sequence[str]) -> int:
    from operators.insight import whatif

    p = argparse.ArgumentParser(prog="kai what-if", description="What the scheduler would do if these objects "
                                "were submitted now (nothing is written).")
    p.add_argument("-f", "--filename", action="append", required=True, help="YAML file ('-' = stdin)")
    p.add_argument("--cycles", type=int, default=1, help="cycles to run, applying binds and evictions in between")
    _common(p, ("text", "json", "yaml"))
    args = p.parse_args(argv)
    if args.cycles < 1:
        raise UsageError("--cycles must be at least 1")
    config = config_from_args(args)
    namespace = args.namespace or current_namespace(args.kubeconfig)
    try:
        docs = load_objects(args.filename)
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(str(exc)) from exc
    objects = asyncio.run(_read(args.kubeconfig))
    now = time.time()
    names = [str(o["metadata"]["name"]) for o in objects if o.get("kind") == "PriorityClass"]
    try:
        added = whatif.expand(docs, namespace, now, names)
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(str(exc)) from exc
    result = whatif.what_if(objects, added, config, now, args.cycles)
    sys.stdout.write(whatif.format_text(result) if args.output == "text" else _dump(result, args.output))
    return EXIT_OK


def queues(argv: Sequence[str]) -> int:
    from operators.insight import queues as analysis

    p = argparse.ArgumentParser(prog="kai queues", description="The queue tree: quota, limit, over-quota weight, "
                                "fair share, allocated, requested (GPUs, millicores, MB) and pending PodGroups.")
    p.add_argument("-w", "--watch", action="store_true", help="redraw every --interval seconds")
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--shard", default="default",
                   help="SchedulingShard whose usageDBConfig gives the queues' historical usage")
    _common(p, ("text", "wide", "json", "yaml"))
    args = p.parse_args(argv)
    config = config_from_args(args)
    while True:
        objects = asyncio.run(_read(args.kubeconfig))
        usage, note = asyncio.run(_usage(args.kubeconfig, args.shard, config))
        snapshot = _snapshot(objects, config)
        if usage:
            snapshot = replace(snapshot, queue_usage=usage_pairs(usage))
        tree = analysis.queue_tree(snapshot, config, time.time())
        if args.namespace and not args.all_namespaces:  # queues are cluster-wide; -n narrows the pending list
            for q in tree:
                q["pendingPodGroups"] = [g for g in q["pendingPodGroups"] if g.startswith(f"{args.namespace}/")]
        if args.output in ("json", "yaml"):
            text = _dump({"queues": tree, **({"usage": note} if note else {})}, args.output)
        else:
            text = analysis.format_text(tree, wide=args.output == "wide") + (f"{note}\n" if note else "")
        if args.watch and sys.stdout.isatty():
            sys.stdout.write("\x1b[H\x1b[2J")
        sys.stdout.write(text)
        sys.stdout.flush()
        if not args.watch:
            return EXIT_OK
        time.sleep(args.interval)


async def _usage(kubeconfig: str | None, shard: str, base: SchedulerConfig) -> tuple[dict[str, Any], str]:
    """The queues' usage as the shard's scheduler reads it (one query now), and a line saying where from."""
    import aiohttp

    from operators.scheduler.decide.shardconfig import effective_config
    from operators.scheduler.shell.usagedb import UsageDBError, connection_url, fetch_usage

    api = await api_client(kubeconfig)
    async with api:
        try:
            spec = (await raw(api, "GET", f"/apis/kai.scheduler/v1/schedulingshards/{shard}")).get("spec")
            config = (await raw(api, "GET", "/apis/kai.scheduler/v1/configs/kai-config")).get("spec")
        except Exception:
            return {}, ""  # no shard (or no CRD): plain fair share, nothing to say
    effective = effective_config(base, spec, config)
    settings = effective.config.usage_db
    if effective.error or settings is None:
        return {}, f"usage: {effective.error}" if effective.error and "usageDBConfig" in effective.error else ""
    url = connection_url(settings)
    try:
        async with aiohttp.ClientSession() as session:
            usage = await fetch_usage(session, settings, url, time.time())
    except UsageDBError as exc:
        return {}, f"usage: unavailable ({exc}): fair share shown is plain"
    return usage, (f"usage: fraction of the capacity over the {settings.window_type} {settings.window_size:g}s "
                   f"window from {url}; PLAIN: the fair share without it")


def top(argv: Sequence[str]) -> int:
    from operators.insight import top as analysis

    p = argparse.ArgumentParser(prog="kai top", description="Nodes by GPU: whole GPUs used, shared GPU groups "
                                "with their fractions and pods, idle GPUs.")
    _common(p, ("text", "wide", "json", "yaml"))
    args = p.parse_args(argv)
    config = config_from_args(args)
    objects = asyncio.run(_read(args.kubeconfig))
    view = analysis.gpu_view(_snapshot(objects, config))
    text = analysis.format_text(view, wide=args.output == "wide") if args.output in ("text", "wide") \
        else _dump({"nodes": view}, args.output)
    sys.stdout.write(text)
    return EXIT_OK


COMMANDS = {"why": why, "what-if": what_if, "queues": queues, "top": top}


def main(command: str, argv: Sequence[str]) -> int:
    try:
        return COMMANDS[command](argv)
    except UsageError as exc:
        print(f"kai {command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except (OSError, ValueError) as exc:
        print(f"kai {command}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:  # an API error: say what failed, never a traceback
        status = getattr(exc, "status", None)
        if status is None and exc.__class__.__module__.split(".")[0] not in ("kubernetes_asyncio", "aiohttp"):
            raise
        print(f"kai {command}: error reading the cluster: {exc}", file=sys.stderr)
        return EXIT_ERROR
