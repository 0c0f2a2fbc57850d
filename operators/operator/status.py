"""The conditions the operator writes on the Config and each SchedulingShard, KAI's shape: pure.

The operator is the one writer of `Reconciling`, `Deployed`, `Available` and `SpecValid`, and of
`FieldsNotHonoured` on the Config; the scheduler instance of a shard writes `FieldsNotHonoured` on it (and
`Deployed`/`Available`, and the Config's conditions, only on objects no operator reconciles: it sees
`Reconciling`). `Reconciling` is the operator's alone to remove: a leader that stops removes its conditions
(`owned_types`), so the instance reports again once no operator runs; a successor writes them back on resume.
Each condition carries the object's `observedGeneration`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from operators.operator.validate import Problem

OPERATOR_CONDITIONS = ("Reconciling", "Deployed", "Available", "SpecValid")


def owned_types(config: bool) -> frozenset[str]:
    """The condition types the operator writes: on the Config also `FieldsNotHonoured` (the shard's is the
    scheduler instance's). The operator removes exactly these when it stops leading."""
    return frozenset(OPERATOR_CONDITIONS) | ({"FieldsNotHonoured"} if config else frozenset())


@dataclass(frozen=True)
class Rollout:
    """What the Deployments an object owns show: how many exist, and how many have all replicas available."""

    wanted: int
    present: int
    available: int
    waiting: tuple[str, ...] = ()  # names not yet available


def rollout(deployments: Sequence[Mapping[str, Any]], wanted: Sequence[str]) -> Rollout:
    """`deployments`: the owned Deployment objects seen; `wanted`: the names the object should have."""
    by_name = {d["metadata"]["name"]: d for d in deployments}
    waiting = []
    available = 0
    for name in wanted:
        d = by_name.get(name)
        if d is None:
            waiting.append(name)
            continue
        replicas = int((d.get("spec") or {}).get("replicas", 1))
        status = d.get("status") or {}
        current = int(status.get("observedGeneration") or 0) >= int(d["metadata"].get("generation") or 0)
        if current and int(status.get("availableReplicas") or 0) >= replicas \
                and int(status.get("updatedReplicas") or 0) >= replicas:
            available += 1
        else:
            waiting.append(name)
    return Rollout(len(wanted), sum(1 for n in wanted if n in by_name), available, tuple(waiting))


def _condition(kind: str, ok: bool, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message,
            "observedGeneration": generation}


def conditions(generation: int, problems: Sequence[Problem], applied: bool, state: Rollout,
               unhonoured: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The operator's conditions (without lastTransitionTime). A refused spec keeps what runs: `Deployed` and
    `Available` then describe the suite rendered from the last valid spec, at the generation it was applied.
    `unhonoured` (the Config only): the fields it does not render, as `FieldsNotHonoured`."""
    valid = not problems
    out = [_condition("SpecValid", valid, "Valid" if valid else "InvalidSpec",
                      "Every field is valid" if valid else "; ".join(str(p) for p in problems), generation)]
    if not applied:
        return out
    deployed = state.present == state.wanted
    available = deployed and state.available == state.wanted
    out += [
        _condition("Reconciling", False, "reconciled", "Reconciliation completed successfully", generation),
        _condition("Deployed", deployed, "deployed" if deployed else "not_deployed",
                   "Resources deployed" if deployed else "Resources not deployed yet", generation),
        _condition("Available", available, "available" if available else "not_available",
                   "System available" if available else
                   f"Waiting for {', '.join(state.waiting)} to be available", generation),
    ]
    if unhonoured is not None:
        out.append(_condition("FieldsNotHonoured", bool(unhonoured), "NotHonoured" if unhonoured else "AllHonoured",
                              f"Accepted but not honoured by the operator: {', '.join(unhonoured)}" if unhonoured
                              else "Every field set is honoured", generation))
    return out
