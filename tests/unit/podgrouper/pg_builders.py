"""Builders for grouping tests: example YAML, pods as their controllers create them, and a fake shell."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import yaml

from operators.core import keys
from operators.podgrouper.grouping import (
    GrouperConfig,
    GroupingError,
    GroupingResult,
    Lookups,
    NeedObjects,
    ObjectRef,
    group_pod,
)
from tests.support import EXAMPLES

_uids = itertools.count(1)


def load_examples(relative: str) -> list[dict[str, Any]]:
    with open(EXAMPLES / relative) as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc]


def load_kind(relative: str, kind: str, namespace: str = "default") -> dict[str, Any]:
    """The first object of a kind in an example file, as the API server would return it."""
    doc = next(doc for doc in load_examples(relative) if doc["kind"] == kind)
    return stored(doc, namespace)


def stored(obj: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    if "name" not in meta:
        meta["name"] = f"{meta.pop('generateName', 'obj-')}x7k2p"
    meta.setdefault("namespace", namespace)
    meta.setdefault("uid", f"uid-{meta['name']}-{next(_uids)}")
    return out


def ref_to(owner: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def child(api_version: str, kind: str, name: str, owner: dict[str, Any] | None,
          labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None,
          spec: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(labels or {}),
                            "annotations": dict(annotations or {})}
    if owner is not None:
        meta["namespace"] = owner["metadata"]["namespace"]
        meta["ownerReferences"] = [ref_to(owner)]
    return stored({"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": dict(spec or {})})


def pod_from_template(name: str, owner: dict[str, Any] | None, template: dict[str, Any],
                      extra_labels: dict[str, str] | None = None,
                      namespace: str = "default") -> dict[str, Any]:
    """A pod as a workload controller creates it from its pod template (list form: no apiVersion/kind)."""
    tmeta = template.get("metadata") or {}
    labels = {**(tmeta.get("labels") or {}), **(extra_labels or {})}
    spec = copy.deepcopy(template.get("spec") or {})
    spec.setdefault("schedulerName", keys.SCHEDULER_NAME)
    meta: dict[str, Any] = {"name": name, "labels": labels,
                            "annotations": dict(tmeta.get("annotations") or {}),
                            "namespace": owner["metadata"]["namespace"] if owner else namespace}
    if owner is not None:
        meta["ownerReferences"] = [ref_to(owner)]
    pod = stored({"metadata": meta, "spec": spec, "status": {"phase": "Pending"}})
    return pod


class World:
    """Answers the grouping rules' `NeedObjects` like the shell would, from a list of objects."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = list(objects)
        self.asked: list[ObjectRef] = []

    def answer(self, ref: ObjectRef) -> Any:
        self.asked.append(ref)
        def matches(obj: dict[str, Any]) -> bool:
            meta = obj["metadata"]
            return (obj.get("kind", "Pod") == ref.kind and meta.get("namespace") == ref.namespace
                    and (ref.name is None or meta["name"] == ref.name)
                    and all((meta.get("labels") or {}).get(k) == v for k, v in ref.labels))
        found = [obj for obj in self.objects if matches(obj)]
        if ref.is_list:
            return found
        return found[0] if found else None

    def group(self, pod: dict[str, Any], chain: list[dict[str, Any]], lookups: Lookups | None = None,
              config: GrouperConfig | None = None) -> GroupingResult | GroupingError:
        lookups = lookups or Lookups()
        for _ in range(10):
            result = group_pod(pod, chain, lookups, config)
            if not isinstance(result, NeedObjects):
                return result
            lookups = lookups.with_related({ref: self.answer(ref) for ref in result.refs})
        raise AssertionError("grouping did not converge")


def ok(result: GroupingResult | GroupingError) -> GroupingResult:
    assert isinstance(result, GroupingResult), result
    return result
