"""How the writer makes a victim leave, and what it remembers when the API server refuses.

By default a victim is evicted through the `pods/eviction` subresource, so PodDisruptionBudgets and admission
policies may refuse it (429); `--eviction-method delete` deletes the pod as KAI does. The evictions made for one
preemptor are ordered so that a refusal stops them: the victims a PodDisruptionBudget covers go first, one at a
time, and the first refusal ends that preemptor's evictions for this cycle (the others were planned with it, and
without it they free nothing the preemptor can use). The refused pod is remembered for `REFUSAL_MEMORY` seconds:
the next cycles plan without it (`RefusedEviction` in the snapshot) and tell the preemptor why it waits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from operators.scheduler.decide.decisions import Eviction
from operators.scheduler.decide.records import PdbRecord, PodRecord, RefusedEviction

# Seconds a refused pod is not planned as a victim again (a PDB allows again once a replacement is ready).
REFUSAL_MEMORY = 30.0


def guarded_by(pod: PodRecord | None, pdbs: Iterable[PdbRecord]) -> list[str]:
    """The PodDisruptionBudgets covering `pod`, by name."""
    if pod is None:
        return []
    return [p.name for p in pdbs if p.covers(pod)]


def per_preemptor(evictions: Sequence[Eviction], guarded: set[str]) -> list[list[Eviction]]:
    """The evictions of each preemptor (stale-gang evictions each on their own), PDB-covered victims first
    (`guarded`: their "namespace/pod" keys)."""
    groups: dict[str, list[Eviction]] = {}
    alone: list[list[Eviction]] = []
    for e in evictions:
        if e.for_pod_group:
            groups.setdefault(e.for_pod_group, []).append(e)
        else:
            alone.append([e])
    ordered = [sorted(g, key=lambda e: f"{e.namespace}/{e.pod}" not in guarded) for g in groups.values()]
    return ordered + alone


def refusal_message(exc: BaseException) -> str:
    """The API server's reason for a 429 on an eviction (the budget's own words when it names one)."""
    body: Any = getattr(exc, "body", None)
    try:
        status = json.loads(body) if isinstance(body, str | bytes) else {}
    except ValueError:
        status = {}
    causes = [str(c.get("message")) for c in (status.get("details") or {}).get("causes") or () if c.get("message")]
    message = str(status.get("message") or getattr(exc, "reason", "") or "eviction refused")
    return "; ".join([message, *causes])


class Refusals:
    """Evictions the API server refused lately, by pod."""

    def __init__(self, memory: float = REFUSAL_MEMORY) -> None:
        self.memory = memory
        self._items: dict[str, tuple[float, RefusedEviction]] = {}

    def add(self, e: Eviction, message: str) -> RefusedEviction:
        refused = RefusedEviction(f"{e.namespace}/{e.pod}", e.for_pod_group, message)
        self._items[refused.pod] = (time.monotonic(), refused)
        return refused

    def current(self) -> tuple[RefusedEviction, ...]:
        horizon = time.monotonic() - self.memory
        self._items = {k: v for k, v in self._items.items() if v[0] > horizon}
        return tuple(r for _, r in self._items.values())
