"""What every rule shares: the rule context and the Default grouper's metadata, the base of almost every kind."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from operators.core import keys
from operators.core.booleans import parse_bool
from operators.core.durations import parse_delay
from operators.podgrouper.grouping.model import (
    GrouperConfig,
    GroupingFailure,
    Lookups,
    Metadata,
    MissingObjects,
    Obj,
    ObjectRef,
)

PG_PREFIX = "pg"
TRAIN = "train"
INFERENCE = "inference"
BUILD = "build"


@dataclass(frozen=True, slots=True)
class Context:
    """The pod, its owners (direct owner first, top owner last) and what the shell looked up."""

    pod: Obj
    chain: tuple[Obj, ...]
    lookups: Lookups
    config: GrouperConfig

    @property
    def top(self) -> Obj:
        return self.chain[-1] if self.chain else self.pod

    def get(self, ref: ObjectRef) -> Obj | None:
        if ref not in self.lookups.related:
            raise MissingObjects((ref,))
        found = self.lookups.related[ref]
        if isinstance(found, list):
            raise GroupingFailure(f"internal error: expected one {ref.kind}, got a list")
        return found

    def list(self, ref: ObjectRef) -> list[Obj]:
        if ref not in self.lookups.related:
            raise MissingObjects((ref,))
        found = self.lookups.related[ref]
        if found is None:
            return []
        if not isinstance(found, list):
            raise GroupingFailure(f"internal error: expected a list of {ref.kind}")
        return found


# --- object accessors ---------------------------------------------------------------------------

def meta(obj: Obj) -> Obj:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def name_of(obj: Obj) -> str:
    return str(meta(obj).get("name") or "")


def uid_of(obj: Obj) -> str:
    return str(meta(obj).get("uid") or "")


def namespace_of(obj: Obj) -> str:
    return str(meta(obj).get("namespace") or "")


def labels_of(obj: Obj) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def annotations_of(obj: Obj) -> dict[str, str]:
    return dict(meta(obj).get("annotations") or {})


def api_version_of(obj: Obj) -> str:
    # Pods from a list response carry no apiVersion/kind; every other owner does.
    return str(obj.get("apiVersion") or "v1")


def kind_of(obj: Obj) -> str:
    return str(obj.get("kind") or "Pod")


def group_version(api_version: str) -> tuple[str, str]:
    if "/" in api_version:
        group, version = api_version.split("/", 1)
        return group, version
    return "", api_version


def owner_reference(obj: Obj) -> dict[str, str]:
    """The PodGroup's ownerReference: apiVersion, kind, name, uid only (no controller flags)."""
    return {"apiVersion": api_version_of(obj), "kind": kind_of(obj), "name": name_of(obj), "uid": uid_of(obj)}


def pg_name(obj: Obj) -> str:
    return f"{PG_PREFIX}-{name_of(obj)}-{uid_of(obj)}"


def nested(obj: Obj, *path: str) -> Any:
    current: Any = obj
    for step in path:
        if not isinstance(current, dict):
            return None
        current = current.get(step)
    return current


def as_int(value: Any) -> int | None:
    """An integer field of a custom resource; None when absent or not an integer."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


# --- top-owner metadata annotation --------------------------------------------------------------

_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
_YAML_SPECIAL = {"true", "false", "yes", "no", "on", "off", "null", "~", "y", "n"}


def _yaml_scalar(value: str) -> str:
    # Same rendering as Go's yaml.v3 for these simple values: plain when safe, else double-quoted.
    if value and _PLAIN.match(value) and value.lower() not in _YAML_SPECIAL and not _looks_numeric(value):
        return value
    return json.dumps(value)


def _looks_numeric(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def top_owner_metadata(obj: Obj) -> str:
    group, version = group_version(api_version_of(obj))
    fields = (("name", name_of(obj)), ("uid", uid_of(obj)), ("group", group), ("version", version),
              ("kind", kind_of(obj)))
    return "".join(f"{key}: {_yaml_scalar(value)}\n" for key, value in fields)


# --- the Default grouper's rules --------------------------------------------------------------

def pg_labels(top: Obj, pod: Obj) -> dict[str, str]:
    labels = labels_of(top)
    user = labels_of(pod).get(keys.USER_LABEL)
    if keys.USER_LABEL not in labels and user is not None:
        labels[keys.USER_LABEL] = user
    return labels


def pg_annotations(top: Obj, pod: Obj) -> dict[str, str]:
    annotations: dict[str, str] = {}
    user = annotations_of(pod).get(keys.USER_LABEL)
    if user is not None:
        annotations[keys.USER_LABEL] = user
    annotations[keys.TOP_OWNER_METADATA] = top_owner_metadata(top)
    annotations.update(annotations_of(top))  # the owner's values win
    return annotations


def resolve_queue(top: Obj, pod: Obj, config: GrouperConfig) -> str:
    top_labels, pod_labels = labels_of(top), labels_of(pod)
    for labels in (top_labels, pod_labels):
        if config.queue_label_key in labels:
            return labels[config.queue_label_key]
    project = top_labels.get(keys.PROJECT_LABEL, pod_labels.get(keys.PROJECT_LABEL, ""))
    if project:
        node_pool = pod_labels.get(config.node_pool_label_key)
        return f"{project}-{node_pool}" if node_pool is not None else project
    return keys.DEFAULT_QUEUE


def _group_kind_keys(obj: Obj) -> tuple[str, str]:
    group, _ = group_version(api_version_of(obj))
    kind = kind_of(obj)
    return (f"{kind}.{group}" if group else kind), kind


def resolve_priority(ctx: Context, owners: Sequence[Obj], fallback: str) -> str:
    """First existing PriorityClass named by owner label, pod label or pod spec, per owner; then defaults."""
    exists = ctx.lookups.priority_classes
    pod_label = labels_of(ctx.pod).get(keys.PRIORITY_CLASS_LABEL)
    pod_spec = nested(ctx.pod, "spec", "priorityClassName")
    for owner in owners:
        for candidate in (labels_of(owner).get(keys.PRIORITY_CLASS_LABEL), pod_label, pod_spec):
            if candidate and candidate in exists:
                return str(candidate)
    defaults = ctx.lookups.kind_defaults
    if defaults:
        for owner in owners:
            for key in _group_kind_keys(owner):
                entry = defaults.get(key)
                if entry is not None and entry.priority_name:
                    if entry.priority_name in exists:
                        return entry.priority_name
                    break
    return fallback


def resolve_preemptibility(ctx: Context, owners: Sequence[Obj]) -> str:
    valid = (keys.PREEMPTIBLE, keys.NON_PREEMPTIBLE, keys.SEMI_PREEMPTIBLE)
    for obj in (*owners, ctx.pod):
        value = labels_of(obj).get(keys.PREEMPTIBILITY_LABEL)
        if value in valid:
            return str(value)
    defaults = ctx.lookups.kind_defaults
    if defaults:
        for owner in owners:
            for key in _group_kind_keys(owner):
                entry = defaults.get(key)
                if entry is not None and entry.preemptibility:
                    lowered = entry.preemptibility.lower()
                    return lowered if lowered in valid else ""
    return ""


def resolve_preemption_delay(ctx: Context) -> str:
    """`kai.scheduler/preemption-delay` of the workload: the first valid value on the owners (top owner first),
    then on the pod (which carries its template's labels and annotations); per object the label (KAI's form),
    then the annotation. A malformed value is skipped (pod admission refuses it on the pod)."""
    for obj in (*reversed(ctx.chain), ctx.pod):
        metadata = obj.get("metadata") or {}
        for kind in ("labels", "annotations"):
            values = metadata.get(kind) if isinstance(metadata, Mapping) else None
            value = values.get(keys.PREEMPTION_DELAY) if isinstance(values, Mapping) else None
            if isinstance(value, str):
                try:
                    parse_delay(value)
                except ValueError:
                    continue
                return value
    return ""


def resolve_safe_to_consolidate(ctx: Context) -> bool | None:
    """`kai.scheduler/safe-to-consolidate` of the workload (KAI v0.18): the first valid annotation on the owners
    (top owner first: the workload object's value wins), then on the pod; an invalid value is skipped."""
    for obj in (*reversed(ctx.chain), ctx.pod):
        metadata = obj.get("metadata") or {}
        values = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        value = values.get(keys.SAFE_TO_CONSOLIDATE) if isinstance(values, Mapping) else None
        if value is not None:
            try:
                return parse_bool(value)
            except ValueError:
                continue
    return None


def topology_from(annotations: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for wire, key in (("topology", keys.TOPOLOGY), ("requiredTopologyLevel", keys.TOPOLOGY_REQUIRED),
                      ("preferredTopologyLevel", keys.TOPOLOGY_PREFERRED)):
        if annotations.get(key):
            out[wire] = annotations[key]
    return out


SEGMENT_REQUIRED = "kai.scheduler/segment-topology-required-placement"
SEGMENT_PREFERRED = "kai.scheduler/segment-topology-preferred-placement"


def template_value(pod: Obj, template: Any, key: str) -> str:
    """A per-role setting: the pod's own annotation, else its template's."""
    value = annotations_of(pod).get(key)
    if value:
        return value
    template_value = nested(template, "metadata", "annotations", key)
    return str(template_value) if template_value else ""


def segment_topology(pod: Obj, template: Any, top: Obj) -> dict[str, str] | None:
    """Topology constraint of each segment (PyTorchJob workers, LeaderWorkerSet groups)."""
    topology = template_value(pod, template, keys.TOPOLOGY) or annotations_of(top).get(keys.TOPOLOGY, "")
    required = template_value(pod, template, SEGMENT_REQUIRED)
    preferred = template_value(pod, template, SEGMENT_PREFERRED)
    if not topology or not (required or preferred):
        return None
    out = {"topology": topology}
    if required:
        out["requiredTopologyLevel"] = required
    if preferred:
        out["preferredTopologyLevel"] = preferred
    return out


def base_metadata(ctx: Context, top: Obj, *, default_priority: str = TRAIN,
                  priority_owners: Sequence[Obj] | None = None) -> Metadata:
    """The Default grouper: one PodGroup per top owner, minMember 1."""
    owners = priority_owners if priority_owners is not None else (top,)
    return Metadata(
        name=pg_name(top),
        namespace=namespace_of(ctx.pod),
        owner=owner_reference(top),
        labels=pg_labels(top, ctx.pod),
        annotations=pg_annotations(top, ctx.pod),
        queue=resolve_queue(top, ctx.pod, ctx.config),
        priority_class=resolve_priority(ctx, owners, default_priority),
        preemptibility=resolve_preemptibility(ctx, owners),
        min_member=1,
        topology=topology_from(annotations_of(top)),
        preemption_delay=resolve_preemption_delay(ctx),
        safe_to_consolidate=resolve_safe_to_consolidate(ctx),
    )
