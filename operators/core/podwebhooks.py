"""The matchConditions of the two pod webhooks (mutating and validating `admission.kai-scheduler.svc`).

KAI registers both with one condition, `scheduler-name-match`: every `kai-scheduler` pod costs the API server two
webhook calls at create, which halves the create rate on a busy API server. We keep that condition and add one
beside it (all conditions must hold) so a pod reaches a webhook only when that webhook could change or deny it.
Each condition is a superset of what the handlers act on; the handlers keep their own checks, so a configuration
without the conditions (KAI's) behaves the same.

- validating: denies only a pod carrying a GPU-sharing annotation (`gpu-fraction`, `gpu-memory`,
  `gpu-fraction-num-devices`, `mps`) or a `kai.scheduler/preemption-delay` label or annotation; a plain pod
  always passes, whether GPU sharing is enabled or not;
- mutating: fills the namespace (never needed: the API server sets it from the request path before admission),
  wires GPU sharing and the fraction runtime class (pods with `gpu-fraction` / `gpu-memory`), sets the GPU-pod
  runtime class (`--gpu-pod-runtime-class-name`: pods with an `nvidia.com/gpu` request or limit too) and adds the
  quota gate (`--quota-gates`: every pod, so no condition beside the scheduler name).

The chart (`kai.podWebhookSelectors` in `_helpers.tpl`) writes the same expressions; the static chart/operator
equivalence test holds them equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any, Final

from operators.core import keys

SCHEDULER_NAME_MATCH: Final = "scheduler-name-match"

_ANNOTATIONS: Final = "object.metadata.annotations"
_LABELS: Final = "object.metadata.labels"
_VALIDATED_KEYS: Final = (keys.GPU_FRACTION, keys.GPU_MEMORY, keys.GPU_FRACTION_NUM_DEVICES, keys.MPS,
                          keys.PREEMPTION_DELAY)


def _quoted(values: Sequence[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


# CEL: `has()` guards every optional map (an evaluation error would fail the call under failurePolicy Fail).
MAY_BE_DENIED: Final = {
    "name": "may-be-denied",
    "expression": f"(has({_ANNOTATIONS}) && [{_quoted(_VALIDATED_KEYS)}].exists(k, k in {_ANNOTATIONS}))"
                  f" || (has({_LABELS}) && '{keys.PREEMPTION_DELAY}' in {_LABELS})",
}
_SHARING: Final = (f"has({_ANNOTATIONS}) && ('{keys.GPU_FRACTION}' in {_ANNOTATIONS}"
                   f" || '{keys.GPU_MEMORY}' in {_ANNOTATIONS})")
REQUESTS_GPU_SHARING: Final = {"name": "requests-gpu-sharing", "expression": _SHARING}
# Any `nvidia.com/gpu` key counts (a zero quantity too): the handler decides, the condition only narrows.
REQUESTS_GPU: Final = {
    "name": "requests-gpu",
    "expression": f"({_SHARING}) || (has(object.spec.containers) && object.spec.containers.exists(c,"
                  f" has(c.resources) && ((has(c.resources.limits) && '{keys.GPU_RESOURCE}' in c.resources.limits)"
                  f" || (has(c.resources.requests) && '{keys.GPU_RESOURCE}' in c.resources.requests))))",
}


class Mutates(Enum):
    """Which kai-scheduler pods the mutating webhook changes, by the admission component's flags."""

    SHARING = "sharing"  # GPU-sharing pods (the default)
    GPU = "gpu"  # every GPU pod: --gpu-pod-runtime-class-name is set
    EVERY_POD = "every-pod"  # --quota-gates


# Flags that widen the mutation when passed as extra arguments (the admission parser takes no abbreviations).
QUOTA_GATES_FLAG: Final = "--quota-gates"
GPU_POD_RUNTIME_CLASS_FLAG: Final = "--gpu-pod-runtime-class-name"


def mutates(*, quota_gates: bool, args: Sequence[str] = ()) -> Mutates:
    """What the mutating webhook changes, from the quota-gates setting and the admission's extra arguments.

    Any mention of a widening flag counts (whatever its value): a wider condition only costs calls.
    """
    if quota_gates or any(str(a).startswith(QUOTA_GATES_FLAG) for a in args):
        return Mutates.EVERY_POD
    if any(str(a).startswith(GPU_POD_RUNTIME_CLASS_FLAG) for a in args):
        return Mutates.GPU
    return Mutates.SHARING


def scheduler_name_match(scheduler_name: str) -> dict[str, str]:
    """KAI's condition, unchanged."""
    return {"name": SCHEDULER_NAME_MATCH, "expression": f"object.spec.schedulerName == '{scheduler_name}'"}


def mutating_conditions(scheduler_name: str, scope: Mutates) -> list[dict[str, Any]]:
    extra = {Mutates.SHARING: [REQUESTS_GPU_SHARING], Mutates.GPU: [REQUESTS_GPU], Mutates.EVERY_POD: []}[scope]
    return [scheduler_name_match(scheduler_name), *(dict(c) for c in extra)]


def validating_conditions(scheduler_name: str) -> list[dict[str, Any]]:
    return [scheduler_name_match(scheduler_name), dict(MAY_BE_DENIED)]
