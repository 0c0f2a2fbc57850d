"""Queue status: child queues and resources summed over PodGroups and child queues.

Pure: callers pass the queues and PodGroups they have cached.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from operators.core import resources
from operators.core.api.podgroup import podgroup_queue, podgroup_status_record
from operators.core.api.queue import STATUS_FIELDS as FIELDS
from operators.core.api.queue import QueueStatusRecord, queue_record, queue_status_record
from operators.core.api.queue import status_patch as status_patch  # re-exported: the controller's writer
from operators.core.resources import ResourceList

Obj = Mapping[str, Any]


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def child_queues(queue_name: str, queues: Iterable[Obj]) -> list[str]:
    return _children(queue_name, _parents(queues))


def _parents(queues: Iterable[Obj]) -> dict[str, str]:
    """Every queue's name -> its parent (read once: the hierarchy walks look parents up again and again)."""
    return {(r := queue_record(q)).name: r.parent for q in queues}


def _children(queue_name: str, parents: Mapping[str, str]) -> list[str]:
    return sorted(name for name, parent in parents.items() if parent == queue_name and name != queue_name)


def _podgroup_sums(podgroups: Iterable[Obj]) -> dict[str, dict[str, ResourceList]]:
    """Per queue name, the sum of its PodGroups' resourcesStatus fields."""
    sums: dict[str, dict[str, ResourceList]] = {}
    # A malformed list written by someone else reads as empty: it must not stop the hierarchy from being accounted.
    for podgroup in podgroups:
        stored = podgroup_status_record(podgroup)
        per_queue = sums.setdefault(podgroup_queue(podgroup), {field: {} for field in FIELDS})
        for field in FIELDS:
            per_queue[field] = resources.add(per_queue[field], stored.listed(field))
    return sums


def _render(children: list[str], totals: Mapping[str, ResourceList]) -> dict[str, Any]:
    return QueueStatusRecord(child_queues=tuple(children), amounts=totals).to_wire()


def queue_status(queue_name: str, queues: Iterable[Obj], podgroups: Iterable[Obj]) -> dict[str, Any]:
    """One reconcile, as KAI does it: this queue's PodGroups plus its children's *stored* statuses.

    A change therefore climbs one level per reconcile (the controller requeues the parent of each queue it
    updates). `all_queue_statuses` computes the whole tree at once instead.
    """
    queues = list(queues)
    children = child_queues(queue_name, queues)
    totals = _podgroup_sums(pg for pg in podgroups if podgroup_queue(pg) == queue_name).get(
        queue_name, {field: {} for field in FIELDS})
    for queue in queues:
        if _name(queue) in children:
            stored = queue_status_record(queue)
            for field in FIELDS:
                totals[field] = resources.add(totals[field], stored.listed(field))
    return _render(children, totals)


def all_queue_statuses(queues: Iterable[Obj], podgroups: Iterable[Obj]) -> dict[str, dict[str, Any]]:
    """Every queue's status straight from the PodGroups: each queue sums itself and all its descendants.

    Robust to parent cycles (each descendant is counted once per ancestor, never looping) and to
    PodGroups whose queue does not exist (they count nowhere).
    """
    parents = _parents(queues)
    names = set(parents)
    children = {name: _children(name, parents) for name in names}
    own = _podgroup_sums(podgroups)
    empty: dict[str, ResourceList] = {field: {} for field in FIELDS}
    statuses: dict[str, dict[str, Any]] = {}
    for name in sorted(names):
        seen = {name}
        stack = [name]
        totals = {field: dict(empty[field]) for field in FIELDS}
        while stack:
            current = stack.pop()
            for field in FIELDS:
                totals[field] = resources.add(totals[field], own.get(current, empty)[field])
            for child in children.get(current, []):
                if child not in seen:
                    seen.add(child)
                    stack.append(child)
        statuses[name] = _render(children[name], totals)
    return statuses


# --- ancestry --------------------------------------------------------------------------------------
# A queue whose parent (or any ancestor) is missing is accepted, as KAI accepts it, so that files listing
# children before parents apply cleanly; the scheduler leaves its workloads pending until the ancestry is whole.
# The queue says so in a condition of KAI's `Orphan` type, cleared once the parent exists.
ORPHAN = "Orphan"
REASON_PARENT_MISSING = "ParentQueueNotFound"
REASON_PARENT_CYCLE = "ParentQueueCycle"
REASON_PARENT_FOUND = "ParentQueueFound"
_PENDING_NOTE = "; workloads of this queue stay pending until it is created"


def ancestry_problem(name: str, parents: Mapping[str, str]) -> tuple[str, str] | None:
    """(reason, message) when the chain of parents above `name` does not reach a top-level queue.

    `parents`: every stored queue's name -> its spec.parentQueue ("" for a top-level queue).
    """
    path = [name]
    current = parents.get(name, "")
    while current:
        if current not in parents:
            if len(path) == 1:
                return REASON_PARENT_MISSING, f"parent queue '{current}' does not exist{_PENDING_NOTE}"
            return REASON_PARENT_MISSING, (f"ancestor queue '{current}' (parent of queue '{path[-1]}') "
                                           f"does not exist{_PENDING_NOTE}")
        if current in path:
            cycle = " -> ".join([*path[path.index(current):], current])
            return REASON_PARENT_CYCLE, (f"the parent chain loops ({cycle}); workloads of this queue stay "
                                         "pending until a spec.parentQueue in the loop is changed")
        path.append(current)
        current = parents[current]
    return None


def ancestry_conditions(stored: Iterable[Mapping[str, Any]] | None, problem: tuple[str, str] | None,
                        now: str) -> list[dict[str, Any]]:
    """The conditions list with the `Orphan` condition set from `problem` (removed when None).

    Conditions of other types are kept as they are; lastTransitionTime moves only when the status changes.
    """
    others = [dict(c) for c in stored or () if c.get("type") != ORPHAN]
    if problem is None:
        return others
    previous = next((c for c in stored or () if c.get("type") == ORPHAN), None)
    since = previous.get("lastTransitionTime") if previous and previous.get("status") == "True" else None
    reason, message = problem
    return [*others, {"type": ORPHAN, "status": "True", "reason": reason, "message": message,
                      "lastTransitionTime": since or now}]
