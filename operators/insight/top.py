"""`kai top`: nodes by GPU - whole GPUs in use, shared GPU groups with their fractions and pods, idle GPUs. Pure."""

from __future__ import annotations

from typing import Any

from operators.core import keys
from operators.insight.core import is_placed
from operators.scheduler.decide.explain import humanize
from operators.scheduler.decide.records import PodRecord
from operators.scheduler.decide.snapshot import Snapshot


def _portion(pod: PodRecord, gpu_memory_mib: int | None) -> float:
    if pod.gpu.portion is not None:
        return pod.gpu.portion
    if pod.gpu.memory_mib is not None and gpu_memory_mib:
        return pod.gpu.memory_mib / gpu_memory_mib
    return 0.0


def gpu_view(snapshot: Snapshot) -> list[dict[str, Any]]:
    """Per node (by name): GPUs, whole-GPU pods, shared groups {id, used, pods}, and idle devices."""
    by_node: dict[str, list[PodRecord]] = {}
    for p in snapshot.pods:
        if is_placed(p):
            by_node.setdefault(p.node_name, []).append(p)
    out = []
    for node in sorted(snapshot.nodes, key=lambda n: n.name):
        whole: list[dict[str, Any]] = []
        groups: dict[str, dict[str, Any]] = {}
        for p in sorted(by_node.get(node.name, []), key=lambda p: p.key):
            if p.gpu.whole and not p.is_reservation:  # a reservation pod holds a shared group's device
                whole.append({"pod": p.key, "gpus": p.gpu.whole})
            for gid in p.gpu_groups:
                g = groups.setdefault(gid, {"id": gid, "used": 0.0, "pods": []})
                if p.is_reservation:
                    continue
                share = _portion(p, node.gpu_memory_mib)
                g["used"] = round(g["used"] + share, 6)
                g["pods"].append({"pod": p.key, "fraction": round(share, 6)})
        used = sum(w["gpus"] for w in whole)
        idle = max(node.gpus - used - len(groups), 0)
        out.append({"node": node.name, "gpus": node.gpus, "wholeUsed": used, "wholePods": whole,
                    "shared": sorted(groups.values(), key=lambda g: g["id"]), "idle": idle,
                    "product": node.labels.get(keys.NODE_GPU_PRODUCT, "")})
    return out


def format_text(view: list[dict[str, Any]], wide: bool = False) -> str:
    rows = [["NODE", "GPUS", "WHOLE-USED", "SHARED", "IDLE", "SHARED-FREE"]]
    details: dict[str, list[str]] = {}
    for n in view:
        free = sum(1 - g["used"] for g in n["shared"])
        rows.append([n["node"], str(n["gpus"]), str(n["wholeUsed"]), str(len(n["shared"])), str(n["idle"]),
                     humanize(free)])
        lines = []
        for g in n["shared"]:
            pods = ", ".join(f"{p['pod']} {humanize(p['fraction'])}" for p in g["pods"]) or "reserved"
            lines.append(f"  gpu-group {g['id'][:8]}: {humanize(g['used'])} used ({pods})")
        if wide:
            lines += [f"  whole: {w['pod']} x{w['gpus']}" for w in n["wholePods"]]
        details[n["node"]] = lines
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["   ".join(c.ljust(w) for c, w in zip(rows[0], widths, strict=True)).rstrip()]
    for r in rows[1:]:
        out.append("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        out += details[r[0]]
    return "\n".join(out) + "\n"
