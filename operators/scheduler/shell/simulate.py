"""`kai simulate`: run scheduling cycles on objects read from YAML files and print the decisions.

Input: YAML streams of ordinary Kubernetes objects (Nodes, Pods, PodGroups, Queues, PriorityClasses, Topologies,
BindRequests, ConfigMaps, ProvisioningRequests, PodDisruptionBudgets; `kind: List` is expanded). A gang that
opted into autoscaler provisioning and does not fit shows the ProvisioningRequest it would get in a `provisioning` list.
A pod with spec.nodeName and phase Running runs there.
Bare kai-scheduler pods without a `pod-group-name` annotation get the PodGroup the pod-grouper would create
(`pg-<pod>-<uid>`, minMember 1), so the KAI quickstart pods can be simulated as they are.
With --cycles N, each cycle's binds and evictions are applied before the next one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from operators.core.times import parse_rfc3339
from operators.scheduler.decide.config import add_arguments, config_from_args
from operators.scheduler.decide.simulation import apply_decisions, run_simulation, with_implicit_podgroups

__all__ = ["apply_decisions", "build_parser", "format_text", "load_objects", "main", "run_simulation",
           "with_implicit_podgroups"]


def load_objects(paths: Iterable[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in paths:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        out.extend(doc for doc in yaml.safe_load_all(text) if isinstance(doc, dict))
    return out


def format_text(result: Mapping[str, Any]) -> str:
    lines: list[str] = []

    def at(item: Mapping[str, Any]) -> str:
        return f" [cycle {item['cycle']}]" if "cycle" in item else ""

    for b in result.get("binds", []):
        extra = f" {b['resourceType']} gpus={b['gpuCount']} portion={b['gpuPortion']}"
        if b["gpuGroups"]:
            extra += f" groups={','.join(b['gpuGroups'])}"
        lines.append(f"bind        {b['namespace']}/{b['pod']} -> {b['node']}{extra}{at(b)}")
    for p in result.get("pipelined", []):
        lines.append(f"pipeline    {p['namespace']}/{p['pod']} -> {p['node']}")
    for e in result.get("evictions", []):
        lines.append(f"evict       {e['namespace']}/{e['pod']} ({e['action']}){at(e)}: {e['message']}")
    for s in result.get("stale", []):
        lines.append(f"stale       {s['namespace']}/{s['podGroup']}{at(s)}: {s['message']}")
    for n in result.get("notReady", []):
        lines.append(f"not-ready   {n['namespace']}/{n['podGroup']}: {n['message']}")
    for u in result.get("unschedulable", []):
        lines.append(f"pending     {u['namespace']}/{u['podGroup']}: {u['message']}")
    for r in result.get("provisioning", []):
        sets = ", ".join(f"{p['count']}x{{{','.join(f'{k}={v}' for k, v in p['requests'].items())}}}"
                         for p in r["podSets"])
        lines.append(f"provision   {r['namespace']}/{r['name']} ({r['provisioningClassName']}) for "
                     f"{r['podGroup']}: {sets}{at(r)}")
    for q in result.get("queues", []):
        def fmt(v: Mapping[str, float]) -> str:
            return f"gpu={v['gpu']:g} cpu={v['cpu']:g}m mem={v['memory']:g}MB"
        lines.append(f"queue       {q['name']}: fair-share {fmt(q['fairShare'])}; allocated {fmt(q['allocated'])}; "
                     f"requested {fmt(q['requested'])}")
    for p in result.get("placement", []):
        lines.append(f"placement   {p['namespace']}/{p['pod']} {p['status']} {p['node']}".rstrip())
    return "\n".join(lines) + ("\n" if lines else "")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kai simulate", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-f", "--filename", action="append", required=True, help="YAML file ('-' = stdin)")
    parser.add_argument("--now", help="RFC3339 time of the first cycle (default: newest creationTimestamp)")
    parser.add_argument("--cycles", type=int, help="run N cycles, applying binds and evictions in between")
    parser.add_argument("-o", "--output", choices=("json", "yaml", "text"), default="yaml")
    add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        now = None
        if args.now:
            now = parse_rfc3339(args.now)
            if now is None:
                raise ValueError(f"--now must be RFC3339, got {args.now!r}")
        if args.cycles is not None and args.cycles < 1:
            raise ValueError("--cycles must be at least 1")
        objects = load_objects(args.filename)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        print(f"kai simulate: {exc}", file=sys.stderr)
        return 2
    result = run_simulation(objects, config, None, now, args.cycles)
    if args.output == "json":
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump(result, sort_keys=False))
    else:
        sys.stdout.write(format_text(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
