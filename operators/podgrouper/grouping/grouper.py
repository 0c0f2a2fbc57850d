"""Entry points for the pod-grouper shell: group a pod, merge with the live PodGroup, patch the pod."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

# Importing the rule modules registers them.
from operators.core import keys
from operators.core.api.podgroup import API_VERSION, podgroup_body, subgroup_body
from operators.podgrouper.grouping import (  # noqa: F401
    apps,
    batch,
    default,
    jobset,
    knative,
    kubeflow,
    lws,
    misc,
    ray,
    skiptop,
)
from operators.podgrouper.grouping.common import (
    Context,
    kind_of,
    labels_of,
    name_of,
    namespace_of,
)
from operators.podgrouper.grouping.model import (
    GrouperConfig,
    GroupingError,
    GroupingFailure,
    GroupingResult,
    KindDefaults,
    Lookups,
    Metadata,
    MissingObjects,
    NeedObjects,
    Obj,
)
from operators.podgrouper.grouping.registry import dispatch

PODGROUP_API_VERSION = API_VERSION
SKIP_PODGROUPER = "kai.scheduler/skip-podgrouper"  # KAI v0.17: the PodGroup is made by someone else
# Spec fields the pod-grouper computes; any other spec field on a live PodGroup (markUnschedulable,
# schedulingBackoff, legacy fields, server defaults) belongs to someone else and is kept as is.
OWNED_SPEC_FIELDS = ("minMember", "queue", "priorityClassName", "preemptibility", "subGroups",
                     "topologyConstraint", "preemptionDelay", "safeToConsolidate")


def _go_owner(ref: Mapping[str, Any]) -> str:
    def flag(name: str) -> str:
        value = ref.get(name)
        return "<nil>" if value is None else str(value).lower()
    return (f"{{{ref.get('apiVersion', '')} {ref.get('kind', '')} {ref.get('name', '')} {ref.get('uid', '')} "
            f"{flag('controller')} {flag('blockOwnerDeletion')}}}")


def multiple_owners_message(obj: Obj) -> str | None:
    """The error for an owner with several ownerReferences (the chain cannot be followed), else None."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    if len(refs) <= 1:
        return None
    rendered = " ".join(_go_owner(ref) for ref in refs)
    return (f"found {kind_of(obj)} <{name_of(obj)} in namespace {namespace_of(obj)}> "
            f"with multiple owners: [{rendered}]")


def owner_not_found_message(uid: str) -> str:
    """The error when the object found under an ownerReference's name has another UID."""
    return f"Owner resource with uid {uid} not found"


def failed_to_find_message(kind: str, namespace: str, name: str, uid: str, cause: str) -> str:
    return f"failed to find {kind}: <{namespace}/{name}>, uid: <{uid}>: {cause}"


def parse_kind_defaults(configmap_data: Mapping[str, str] | None) -> dict[str, KindDefaults]:
    """Parse the defaults ConfigMap's `data.types` into `Lookups.kind_defaults` (keyed `Kind.group`, `Kind`).

    Raises ValueError with a readable message on malformed data.
    """
    raw = (configmap_data or {}).get("types")
    if raw is None:
        raise ValueError("default priorities configmap Data does not contain <types> key")
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"failed to unmarshal default priorities configmap data: {exc}") from exc
    if not isinstance(entries, list):
        raise ValueError("failed to unmarshal default priorities configmap data: expected a JSON array")
    out: dict[str, KindDefaults] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not entry.get("typeName"):
            continue
        kind, group = str(entry["typeName"]), str(entry.get("group") or "")
        value = KindDefaults(str(entry.get("priorityName") or ""), str(entry.get("preemptibility") or ""))
        out[f"{kind}.{group}" if group else kind] = value
        out.setdefault(kind, value)
    return out


def to_podgroup(metadata: Metadata) -> dict[str, Any]:
    return podgroup_body(
        name=metadata.name, namespace=metadata.namespace, owner=metadata.owner, labels=metadata.labels,
        annotations=metadata.annotations, min_member=metadata.min_member, queue=metadata.queue,
        priority_class=metadata.priority_class, preemptibility=metadata.preemptibility,
        sub_groups=_subgroup_tree(metadata), topology=metadata.topology, preemption_delay=metadata.preemption_delay,
        safe_to_consolidate=metadata.safe_to_consolidate)


def _subgroup_tree(metadata: Metadata) -> list[dict[str, Any]]:
    """The wire subgroups: a leaf carries its minMember; a SubGroup other SubGroups name as parent carries
    minSubGroup instead, all of its children (a parent's minMember is refused by the PodGroup webhook)."""
    children: dict[str, int] = {}
    for subgroup in metadata.subgroups:
        if subgroup.parent:
            children[subgroup.parent] = children.get(subgroup.parent, 0) + 1
    return [subgroup_body(s.name, min_member=s.min_member, min_sub_group=children.get(s.name), parent=s.parent,
                          topology=s.topology) for s in metadata.subgroups]


def group_pod(pod: Obj, owner_chain: Sequence[Obj], lookups: Lookups | None = None,
              config: GrouperConfig | None = None) -> GroupingResult | GroupingError | NeedObjects:
    """Compute the PodGroup of a pod: walk its owners, pick the rule of the top owner's kind, apply it.

    `owner_chain`: the pod's owners as the shell read them, direct owner first, top owner last (empty for a
    bare pod). The top owner must be the full object (rules read its spec and status); intermediate owners
    may be metadata only. On `NeedObjects`, resolve the refs, extend `lookups` with `Lookups.with_related`
    and call again.
    """
    lookups = lookups or Lookups()
    config = config or GrouperConfig()
    for owner in owner_chain:
        message = multiple_owners_message(owner)
        if message:
            return GroupingError(message)
    ctx = Context(pod, tuple(owner_chain), lookups, config)
    try:
        rule, metadata = dispatch(ctx)
    except GroupingFailure as failure:
        return GroupingError(failure.message)
    except MissingObjects as missing:
        return NeedObjects(missing.refs)
    node_pool = labels_of(pod).get(config.node_pool_label_key)
    if node_pool is not None and config.node_pool_label_key not in metadata.labels:
        metadata.labels[config.node_pool_label_key] = node_pool
    return GroupingResult(to_podgroup(metadata), metadata.pod_subgroup, rule)


def merge_with_existing(desired: Mapping[str, Any], existing: Mapping[str, Any] | None,
                        config: GrouperConfig | None = None) -> tuple[dict[str, Any], bool]:
    """The PodGroup to write and whether a write is needed.

    No existing object: create `desired`. Otherwise the live object keeps its queue (spec and label),
    its node-pool label, spec fields the grouper does not own, and label/annotation keys not in `desired`.
    """
    config = config or GrouperConfig()
    if existing is None:
        return copy.deepcopy(dict(desired)), True
    out = copy.deepcopy(dict(existing))
    live_meta = out.setdefault("metadata", {})
    want_meta = desired.get("metadata") or {}
    want_labels = dict(want_meta.get("labels") or {})
    live_labels = dict(live_meta.get("labels") or {})
    for key in (config.queue_label_key, config.node_pool_label_key):
        # The queue never changes once set; the node pool is the scheduler shard's to decide.
        if key in live_labels:
            want_labels[key] = live_labels[key]
        else:
            want_labels.pop(key, None)
    want_annotations = dict(want_meta.get("annotations") or {})
    live_annotations = dict(live_meta.get("annotations") or {})

    live_spec = dict(out.get("spec") or {})
    spec = {key: value for key, value in live_spec.items() if key not in OWNED_SPEC_FIELDS}
    spec.update(desired.get("spec") or {})
    if "queue" in live_spec:
        spec["queue"] = live_spec["queue"]

    changed = (
        spec != live_spec
        or list(want_meta.get("ownerReferences") or []) != list(live_meta.get("ownerReferences") or [])
        or any(live_labels.get(k) != v for k, v in want_labels.items())
        or any(live_annotations.get(k) != v for k, v in want_annotations.items())
    )
    live_meta["labels"] = {**live_labels, **want_labels}
    live_meta["annotations"] = {**live_annotations, **want_annotations}
    live_meta["ownerReferences"] = copy.deepcopy(list(want_meta.get("ownerReferences") or []))
    out["spec"] = spec
    return out, changed


def pod_patch(pod: Obj, result: GroupingResult) -> dict[str, Any] | None:
    """The merge patch that points the pod at its PodGroup and subgroup (None when already so)."""
    metadata = pod.get("metadata") or {}
    patch: dict[str, Any] = {}
    if (metadata.get("annotations") or {}).get(keys.POD_GROUP_NAME) != result.name:
        patch.setdefault("metadata", {})["annotations"] = {keys.POD_GROUP_NAME: result.name}
    # The subgroup label is only ever set, never removed.
    if result.subgroup and (metadata.get("labels") or {}).get(keys.SUBGROUP_LABEL) != result.subgroup:
        patch.setdefault("metadata", {})["labels"] = {keys.SUBGROUP_LABEL: result.subgroup}
    return patch or None


def _skip_annotated(obj: Obj) -> bool:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(SKIP_PODGROUPER) == "true"


def should_skip(pod: Obj, scheduler_name: str = keys.SCHEDULER_NAME) -> bool:
    """Pods the grouper leaves alone: other schedulers' pods, pods annotated `kai.scheduler/skip-podgrouper: "true"`
    (their creator made the PodGroup and set `pod-group-name` and the subgroup label itself, KAI v0.17), and
    owner-less pods the user already grouped."""
    if (pod.get("spec") or {}).get("schedulerName") != scheduler_name or _skip_annotated(pod):
        return True
    metadata = pod.get("metadata") or {}
    return not metadata.get("ownerReferences") and keys.POD_GROUP_NAME in (metadata.get("annotations") or {})


def owners_skip(owner_chain: Sequence[Obj]) -> bool:
    """Whether any owner of the pod carries `kai.scheduler/skip-podgrouper: "true"` (checked once the chain is
    read, as KAI does: an owner that cannot be read is a grouping problem first)."""
    return any(_skip_annotated(owner) for owner in owner_chain)
