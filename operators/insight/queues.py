"""`kai queues`: the queue tree with quota, limit, over-quota weight, fair share, allocated, requested. Pure.

Fair share, allocated and requested are the scheduler's own numbers for this snapshot (one cycle's session);
units are the Queue's: GPUs, millicores, megabytes. With time-based fair share (the snapshot carries usage from
the usage database), each queue also shows its historical usage (a fraction of the cluster's capacity over the
window) and the fair share it would have without it (`plainFairShare`): the usage's effect.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from operators.insight.core import RESOURCES, is_pending, to_queue_units
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.explain import humanize
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import Snapshot


def queue_tree(snapshot: Snapshot, config: SchedulerConfig, now: float) -> list[dict[str, Any]]:
    """Queues depth-first (parents before children, siblings by name), each with its depth."""
    session = Session(snapshot, config, now)
    usage = dict(snapshot.queue_usage)
    plain = Session(replace(snapshot, queue_usage=()), config, now).queues if usage else session.queues
    pending: dict[str, list[str]] = {}
    waiting = {(p.namespace, p.pod_group) for p in snapshot.pods if is_pending(p) and p.pod_group}
    for g in sorted(snapshot.podgroups, key=lambda g: g.key):
        if (g.namespace, g.name) in waiting:
            pending.setdefault(g.queue, []).append(g.key)
    out: list[dict[str, Any]] = []

    def visit(name: str, depth: int) -> None:
        q = session.queues[name]
        res: dict[str, dict[str, float]] = {}
        for i, r in enumerate(RESOURCES):
            def u(v: float, i: int = i) -> float:
                return round(to_queue_units(v, i), 3) if v != -1 else -1.0
            weight = q.rec.weight[i]  # a plain number, not an amount
            res[r] = {"quota": u(q.rec.quota[i]), "limit": u(q.rec.limit[i]),
                      "overQuotaWeight": round(weight, 3) if weight != -1 else -1.0, "fairShare": u(q.fair_share[i]),
                      "allocated": u(q.allocated[i]), "requested": u(q.request[i])}
            if usage:
                res[r] |= {"usage": round(usage.get(name, (0.0, 0.0, 0.0))[i], 4),
                           "plainFairShare": u(plain[name].fair_share[i])}
        out.append({"name": name, "parent": q.rec.parent, "depth": depth, "priority": q.rec.priority,
                    "displayName": q.rec.display_name, "resources": res,
                    "pendingPodGroups": pending.get(name, [])})
        for child in sorted(c.name for c in q.children):
            visit(child, depth + 1)

    roots = sorted(n for n, q in session.queues.items() if q.parent is None)
    for root in roots:
        visit(root, 0)
    return out


def _v(value: float) -> str:
    return "-" if value == -1 else humanize(value)


def format_text(tree: list[dict[str, Any]], wide: bool = False) -> str:
    """GPU columns; `wide` adds CPU (millicores) and memory (MB) columns. With usage: USAGE (fraction of the
    capacity over the window) and PLAIN (the fair share without it) after FAIR."""
    with_usage = any("usage" in q["resources"]["gpu"] for q in tree)
    cols = ["QUOTA", "LIMIT", "WEIGHT", "FAIR", *(["USAGE", "PLAIN"] if with_usage else []), "ALLOC", "REQ"]
    header = ["QUEUE", *(f"GPU-{c}" for c in cols)]
    if wide:
        header += [f"CPU-{c}" for c in cols] + [f"MEM-{c}" for c in cols]
    header.append("PENDING")
    rows = [header]
    for q in tree:
        row = ["  " * q["depth"] + q["name"]]
        for r in RESOURCES if wide else RESOURCES[:1]:
            v = q["resources"][r]
            row += [_v(v["quota"]), _v(v["limit"]), humanize(v["overQuotaWeight"]), _v(v["fairShare"])]
            if with_usage:
                row += [f"{v.get('usage', 0.0):.3f}", _v(v.get("plainFairShare", v["fairShare"]))]
            row += [_v(v["allocated"]), _v(v["requested"])]
        row.append(",".join(q["pendingPodGroups"]) or "-")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows) + "\n"
