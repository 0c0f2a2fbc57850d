"""Generate the CustomResourceDefinitions in crds/ from the pydantic models.

The models are the single source of truth; `python -m operators.core.api.crdgen crds/` rewrites the YAML and
a unit test fails when crds/ and the models disagree. Pydantic's JSON schema is turned into a Kubernetes
structural schema: references inlined, nullability dropped (absent == null for the API server), titles and
defaults removed (the API server must not invent values KAI leaves unset).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from operators.core.api.bindrequest import BindRequest
from operators.core.api.podgroup import PodGroup
from operators.core.api.queue import Queue
from operators.core.api.schedulingshard import Config, SchedulingShard
from operators.core.api.topology import Topology

_DROP = {"title", "default", "discriminator"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(options) == 1:
            return _structural({**options[0], **rest}, defs)
        types = {o.get("type") for o in options}
        if types <= {"integer", "number"}:
            return _structural({"type": "number", **rest}, defs)
        if types == {"integer", "string"} or types == {"integer", "number", "string"}:
            return _structural({"x-kubernetes-int-or-string": True, "anyOf": [
                {"type": "integer"}, {"type": "string"}], **rest}, defs)
        raise ValueError(f"cannot express {node} structurally")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or key == "$defs":
            continue
        if key == "const":
            out["enum"] = [value]
            continue
        if key == "properties":
            out[key] = {name: _structural(schema, defs) for name, schema in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _structural(value, defs)
        elif key == "anyOf":
            out[key] = [_structural(item, defs) for item in value]
        else:
            out[key] = value
    if out.get("additionalProperties") is True:
        # Extra fields are kept by the models for forward compatibility, but not in the stored schema.
        del out["additionalProperties"]
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="serialization")
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _structural(raw, defs)
    props = schema["properties"]
    props["metadata"] = {"type": "object"}
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    schema.pop("required", None)
    return schema


def _crd(model: type[BaseModel], *, plural: str, singular: str, scope: str, version: str,
         short_names: list[str] | None = None, columns: list[dict[str, Any]] | None = None,
         required_spec: bool = False, group: str = "scheduling.run.ai", status: bool = True) -> dict[str, Any]:
    kind = model.model_fields["kind"].default
    schema = schema_of(model)
    if required_spec:
        schema["required"] = ["spec"]
    names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": singular}
    if short_names:
        names["shortNames"] = short_names
    version_entry: dict[str, Any] = {
        "name": version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
    }
    if status:
        version_entry["subresources"] = {"status": {}}
    if columns:
        version_entry["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "names": names, "scope": scope, "versions": [version_entry]},
    }


_GPU = r".status.allocated.nvidia\.com/gpu"

QUEUE_COLUMNS = [
    {"name": "Priority", "type": "string", "jsonPath": ".spec.priority"},
    {"name": "Parent", "type": "string", "jsonPath": ".spec.parentQueue"},
    {"name": "Children", "type": "string", "jsonPath": ".status.childQueues"},
    {"name": "DisplayName", "type": "string", "jsonPath": ".spec.displayName"},
    {"name": "GPU-Quota", "type": "number", "jsonPath": ".spec.resources.gpu.quota"},
    {"name": "GPU-Limit", "type": "number", "jsonPath": ".spec.resources.gpu.limit"},
    {"name": "GPU-Allocated", "type": "string", "jsonPath": _GPU},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


# `kubectl get pg`: where the group runs, its gang size, the latest scheduling condition's specific reason
# (OverLimit, PodSchedulingErrors, ...) and its pods by phase (counted by the podgroup-controller).
PODGROUP_COLUMNS = [
    {"name": "Queue", "type": "string", "jsonPath": ".spec.queue"},
    {"name": "Priority", "type": "string", "jsonPath": ".spec.priorityClassName"},
    {"name": "Min-Member", "type": "integer", "jsonPath": ".spec.minMember"},
    {"name": "Reason", "type": "string", "jsonPath": ".status.schedulingConditions[-1:].reasons[0].reason"},
    {"name": "Running", "type": "integer", "jsonPath": ".status.running"},
    {"name": "Pending", "type": "integer", "jsonPath": ".status.pending"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def all_crds() -> dict[str, dict[str, Any]]:
    """File name in crds/ -> CRD object."""
    return {
        "scheduling.run.ai_queues.yaml": _crd(
            Queue, plural="queues", singular="queue", scope="Cluster", version="v2", columns=QUEUE_COLUMNS),
        "scheduling.run.ai_podgroups.yaml": _crd(
            PodGroup, plural="podgroups", singular="podgroup", scope="Namespaced", version="v2alpha2",
            short_names=["pg"], columns=PODGROUP_COLUMNS),
        "scheduling.run.ai_bindrequests.yaml": _crd(
            BindRequest, plural="bindrequests", singular="bindrequest", scope="Namespaced", version="v1alpha2"),
        "kai.scheduler_schedulingshards.yaml": _crd(
            SchedulingShard, plural="schedulingshards", singular="schedulingshard", scope="Cluster", version="v1",
            group="kai.scheduler"),
        "kai.scheduler_configs.yaml": _crd(
            Config, plural="configs", singular="config", scope="Cluster", version="v1", group="kai.scheduler"),
        "kai.scheduler_topologies.yaml": _crd(
            Topology, plural="topologies", singular="topology", scope="Cluster", version="v1alpha1",
            group="kai.scheduler", required_spec=True, status=False),
    }


def render(crd: dict[str, Any]) -> str:
    header = "# Generated from operators/core/api by `python -m operators.core.api.crdgen crds/`. Do not edit.\n"
    return header + yaml.safe_dump(crd, sort_keys=False, width=120)


def main(argv: list[str]) -> int:
    target = Path(argv[0] if argv else "crds")
    target.mkdir(parents=True, exist_ok=True)
    for name, crd in all_crds().items():
        (target / name).write_text(render(crd))
        print(f"wrote {target / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
