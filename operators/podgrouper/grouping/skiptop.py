"""Wrapper kinds (Argo Workflow, TrainJob, Run:ai workloads, Dynamo) group as the owner just below them."""

from __future__ import annotations

import copy
from typing import Any

from operators.podgrouper.grouping.common import (
    Context,
    annotations_of,
    api_version_of,
    kind_of,
    labels_of,
    name_of,
    namespace_of,
)
from operators.podgrouper.grouping.model import Metadata, Obj, ObjectRef
from operators.podgrouper.grouping.registry import dispatch, register

SKIPPED_KINDS = (
    ("argoproj.io", "Workflow"),
    ("trainer.kubeflow.org", "TrainJob"),
    ("nvidia.com", "DynamoGraphDeployment"),
    ("run.ai", "TrainingWorkload"),
    ("run.ai", "InteractiveWorkload"),
    ("run.ai", "DistributedWorkload"),
    ("run.ai", "InferenceWorkload"),
    ("run.ai", "DistributedInferenceWorkload"),
)


def _inherit(obj: Obj, skipped: Obj) -> dict[str, Any]:
    """A copy of obj with the skipped owner's labels and annotations where obj has none of its own."""
    out = copy.deepcopy(dict(obj))
    metadata = out.setdefault("metadata", {})
    metadata["labels"] = {**labels_of(skipped), **labels_of(obj)}
    metadata["annotations"] = {**annotations_of(skipped), **annotations_of(obj)}
    return out


def skip_top_owner_rule(ctx: Context, top: Obj) -> Metadata:
    if len(ctx.chain) <= 1:
        # The pod is owned by the wrapper directly: it becomes its own top owner.
        return dispatch(Context(_inherit(ctx.pod, top), (), ctx.lookups, ctx.config))[1]
    below = ctx.chain[-2]
    full = below
    if "spec" not in below:  # intermediate owners may have been read as metadata only
        ref = ObjectRef(api_version_of(below), kind_of(below), namespace_of(below) or namespace_of(ctx.pod),
                        name_of(below))
        full = ctx.get(ref) or below
    chain = (*ctx.chain[:-2], _inherit(full, top))
    return dispatch(Context(ctx.pod, chain, ctx.lookups, ctx.config))[1]


for _group, _kind in SKIPPED_KINDS:
    register(_group, _kind, name="skip-top-owner")(skip_top_owner_rule)
