"""Plugins from outside the scheduler package, loaded only through configuration (`class: module:Class`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import Job, NodeState, Task


class PreferLabel(Plugin):
    """Score plugin: nodes carrying the `label` argument score 1 (times `weight`), for pods labelled `wants`."""

    argument_names = frozenset({"label", "weight"})

    def hooks(self) -> Hooks:
        return Hooks(node_score=self)

    def scores_task(self, session: Any, task: Task) -> bool:
        return task.rec.labels.get("wants") == self.arguments["label"]

    def score_node(self, session: Any, task: Task, node: NodeState) -> float:
        return 1.0 if self.arguments["label"] in node.rec.labels else 0.0


class ZoneSubsets(Plugin):
    """Node-subset plugin: a job is tried inside each zone in turn (zones named by the `zones` argument)."""

    argument_names = None

    def hooks(self) -> Hooks:
        return Hooks(node_subsets=self)

    def node_subsets(self, session: Any, job: Job) -> Iterable[Iterable[int]] | None:
        return [[n.idx for n in session.nodes if n.rec.labels.get("zone") == zone]
                for zone in self.arguments["zones"]]


class NoAllocateFor(Plugin):
    """Job gate: jobs whose name starts with the `prefix` argument are never tried by `action`."""

    argument_names = None

    def hooks(self) -> Hooks:
        return Hooks(job_gate=self)

    def may_try(self, session: Any, job: Job, action: str) -> bool:
        return not (action == self.arguments["action"] and job.name.startswith(self.arguments["prefix"]))


class Recorder(Plugin):
    """Event handler: net placements per pod (allocate/pipeline +1, evict/rollback of a placement -1)."""

    argument_names = None
    net: ClassVar[dict[str, int]] = {}
    kinds: ClassVar[list[str]] = []

    def hooks(self) -> Hooks:
        return Hooks(allocate_event=self, deallocate_event=self)

    def on_allocate(self, session: Any, task: Task, kind: str) -> None:
        self.net[task.name] = self.net.get(task.name, 0) + 1
        self.kinds.append(kind)

    def on_deallocate(self, session: Any, task: Task, kind: str) -> None:
        self.net[task.name] = self.net.get(task.name, 0) - 1
        self.kinds.append(kind)


class Spare(Plugin):
    """Victim filter: the jobs named in the `spare` argument are never victims."""

    argument_names = None

    def hooks(self) -> Hooks:
        return Hooks(victim_filter=self)

    def may_evict(self, session: Any, preemptor: Job, victim: Job, action: str) -> bool:
        return victim.name not in self.arguments["spare"]


class AtMostVictims(Plugin):
    """Scenario validator: a scenario may take at most `max` victim jobs."""

    argument_names = None

    def hooks(self) -> Hooks:
        return Hooks(scenario_validator=self)

    def validate_scenario(self, session: Any, preemptor: Job, victims: Any, action: str) -> bool:
        return len(victims) <= int(self.arguments["max"])


class RankOrder(Plugin):
    """Task order: pods by their `rank` label (lower first), then by name."""

    argument_names = frozenset()

    def hooks(self) -> Hooks:
        return Hooks(task_order=self)

    def task_order_key(self, task: Task) -> tuple[object, ...]:
        return (int(task.rec.labels.get("rank", "0")), task.name)


class MisspeltPoint(Plugin):
    """Registers a node filter under a point name that does not exist (`node_filer`)."""

    argument_names = None

    def hooks(self) -> Hooks:
        return Hooks(node_filer=self)  # type: ignore[call-arg]  # the mistake under test

    def filter_node(self, session: Any, task: Task, node: NodeState) -> str | None:
        return None


class MisspeltMethod(Plugin):
    """Registers a node filter whose method is misspelt (`filter_nodes`, not the point's `filter_node`)."""

    argument_names = None

    def hooks(self) -> Hooks:
        return Hooks(node_filter=self)  # type: ignore[arg-type]  # the mistake under test

    def filter_nodes(self, session: Any, task: Task, node: NodeState) -> str | None:
        return None
