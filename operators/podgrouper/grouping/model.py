"""Data types of the grouping rules: inputs the shell provides, results it writes.

Objects are plain dicts in the Kubernetes JSON form (camelCase), as `kubectl get -o json` prints them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from operators.core import keys

Obj = Mapping[str, Any]
"""A Kubernetes object as JSON (read-only view)."""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """An object a rule needs beyond the owner chain.

    With `name` set the shell GETs one object (None when NotFound); with `name` None it LISTs the namespace
    with `labels` as an equality label selector (a list, possibly empty).
    """

    api_version: str
    kind: str
    namespace: str
    name: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def is_list(self) -> bool:
        return self.name is None


@dataclass(frozen=True, slots=True)
class KindDefaults:
    """One entry of the defaults ConfigMap (`data.types`)."""

    priority_name: str = ""
    preemptibility: str = ""


@dataclass(frozen=True, slots=True)
class GrouperConfig:
    queue_label_key: str = keys.QUEUE_LABEL
    node_pool_label_key: str = keys.NODE_POOL_LABEL
    knative_gang_schedule: bool = True
    gang_schedule_deployment: bool = True  # KAI v0.18: one PodGroup per (new) Deployment
    search_legacy_pg: bool = True


@dataclass(frozen=True, slots=True)
class Lookups:
    """What the shell read for the rules.

    `priority_classes`: names of the PriorityClasses that exist.
    `related`: answers to the `ObjectRef`s a previous call asked for (see `NeedObjects`).
    `kind_defaults`: the parsed defaults ConfigMap, keyed `Kind.group` and `Kind` (None when not configured).
    """

    priority_classes: Collection[str] = frozenset(keys.PRIORITY_CLASSES)
    related: Mapping[ObjectRef, Obj | list[Obj] | None] = field(default_factory=dict)
    kind_defaults: Mapping[str, KindDefaults] | None = None

    def with_related(self, answers: Mapping[ObjectRef, Obj | list[Obj] | None]) -> Lookups:
        merged = dict(self.related)
        merged.update(answers)
        return Lookups(self.priority_classes, merged, self.kind_defaults)


@dataclass(frozen=True, slots=True)
class GroupingError:
    """A user-facing failure: becomes a `PodGrouperWarning` event on the pod, then the pod is requeued."""

    message: str
    reason: str = keys.EVENT_POD_GROUPER_WARNING


@dataclass(frozen=True, slots=True)
class NeedObjects:
    """The rules need these objects first: resolve them, add them to `Lookups.related`, call again."""

    refs: tuple[ObjectRef, ...]


@dataclass(frozen=True, slots=True)
class GroupingResult:
    """The desired PodGroup and what the pod must carry to point at it."""

    podgroup: dict[str, Any]
    subgroup: str | None
    rule: str

    @property
    def name(self) -> str:
        return str(self.podgroup["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.podgroup["metadata"]["namespace"])

    @property
    def spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.podgroup["spec"]
        return spec


@dataclass(slots=True)
class SubGroup:
    name: str
    min_member: int
    parent: str | None = None
    topology: dict[str, str] | None = None



@dataclass(slots=True)
class Metadata:
    """What a rule computes; `grouper.to_podgroup` turns it into the wire object."""

    name: str
    namespace: str
    owner: dict[str, str]
    labels: dict[str, str]
    annotations: dict[str, str]
    queue: str
    priority_class: str
    preemptibility: str
    min_member: int
    topology: dict[str, str]
    subgroups: list[SubGroup] = field(default_factory=list)
    pod_subgroup: str | None = None
    preemption_delay: str = ""  # spec.preemptionDelay, a Go duration; empty: none
    safe_to_consolidate: bool | None = None  # spec.safeToConsolidate; None: unset (consolidation may move it)


class GroupingFailure(Exception):
    """Raised inside rules; `group_pod` returns it as a `GroupingError`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class MissingObjects(Exception):
    """Raised inside rules when `Lookups.related` lacks an answer."""

    def __init__(self, refs: tuple[ObjectRef, ...]) -> None:
        super().__init__(refs)
        self.refs = refs
