"""The matchConditions of the two pod webhooks (mutating and validating `admission.kai-scheduler.svc`).

KAI registers both with one condition, `scheduler-name-match`: every `kai-scheduler` pod costs the API server two
webhook calls at create, which halves the create rate on a busy API server. We keep that condition and add one
beside it (all conditions must hold) so a pod reaches a webhook only when that webhook could change or deny it.
Each condition is a superset of what the handlers act on; the handlers keep their own checks, so a configuration
without the conditions (KAI's) behaves the same.

- validating: denies only a pod carrying a GPU-sharing annotation (`gpu-fraction`, `gpu-memory`,
  `gpu-fraction-num-devices`, `mps`) or a `kai.scheduler/preemption-delay` label or annotation; a plain pod
  always passes, whether GPU sharing is enabled or not. With GPU sharing surely on, a CREATE that CEL proves
  valid skips it too (`PROVEN_VALID_CREATE`, below): a well-formed GPU-sharing pod then costs one call (the
  mutating one), not two;
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


# A GPU-sharing pod the validation surely admits on CREATE (GPU sharing on, the scheduler name checked before): a
# sufficient condition, never a necessary one, so each clause is a narrower form of one of `validate_pod`'s checks
# and anything it does not prove (a fraction written `5e-1`, a preemption delay) still reaches the webhook, which
# decides as before. It is evaluated on the object after every mutating webhook, so another vendor's webhook that
# changes the pod after ours is judged too, and it reads nothing a user could forge to vouch for a pod.
# The numbers are bounded so Go's parsing cannot round them out of range: a fraction of at most 15 decimals with a
# non-zero digit lies in [1e-15, 1 - 1e-15], hence in (0, 1); at most 18 digits never overflow a uint64.
_FRACTION: Final = f"{_ANNOTATIONS}['{keys.GPU_FRACTION}']"
_MEMORY: Final = f"{_ANNOTATIONS}['{keys.GPU_MEMORY}']"
_NUM_DEVICES: Final = f"{_ANNOTATIONS}['{keys.GPU_FRACTION_NUM_DEVICES}']"
_CONTAINER_NAME: Final = f"{_ANNOTATIONS}['{keys.GPU_FRACTION_CONTAINER_NAME}']"
_POSITIVE_UINT: Final = "'^[1-9][0-9]{0,17}$'"
_WHOLE_GPU_LIMIT: Final = f"has(c.resources) && has(c.resources.limits) && '{keys.GPU_RESOURCE}' in c.resources.limits"
_PROVEN_VALID: Final = " && ".join((
    f"has({_ANNOTATIONS})",
    f"(('{keys.GPU_FRACTION}' in {_ANNOTATIONS}) != ('{keys.GPU_MEMORY}' in {_ANNOTATIONS}))",
    f"(!('{keys.GPU_FRACTION}' in {_ANNOTATIONS}) || ({_FRACTION}.matches('^0?[.][0-9]{{1,15}}$')"
    f" && {_FRACTION}.matches('[1-9]')))",
    f"(!('{keys.GPU_MEMORY}' in {_ANNOTATIONS}) || {_MEMORY}.matches({_POSITIVE_UINT}))",
    f"(!('{keys.GPU_FRACTION_NUM_DEVICES}' in {_ANNOTATIONS}) || {_NUM_DEVICES}.matches({_POSITIVE_UINT}))",
    f"!('{keys.PREEMPTION_DELAY}' in {_ANNOTATIONS})",
    f"!(has({_LABELS}) && '{keys.PREEMPTION_DELAY}' in {_LABELS})",
    "has(object.spec.containers) && size(object.spec.containers) > 0",
    f"!object.spec.containers.exists(c, {_WHOLE_GPU_LIMIT})",
    f"!(has(object.spec.initContainers) && object.spec.initContainers.exists(c, {_WHOLE_GPU_LIMIT}))",
    f"(!('{keys.GPU_FRACTION_CONTAINER_NAME}' in {_ANNOTATIONS})"
    f" || object.spec.containers.exists(c, c.name == {_CONTAINER_NAME})"
    f" || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, c.name == {_CONTAINER_NAME})))",
))
# The webhook is called unless the request is a CREATE proven valid (UPDATE is validated as before).
PROVEN_VALID_CREATE: Final = {
    "name": "not-a-proven-valid-create",
    "expression": f"request.operation != 'CREATE' || !({_PROVEN_VALID})",
}

GPU_SHARING_FLAG: Final = "--gpu-sharing-enabled"


def shares_gpus(*, enabled: bool, extra_args: Sequence[str] = ()) -> bool:
    """The admission surely runs with GPU sharing on: its setting is on and no extra argument mentions the flag
    (one might turn it off; then the validating condition stays wide, which only costs calls)."""
    return enabled and not any(str(a).startswith(GPU_SHARING_FLAG) for a in extra_args)


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


def validating_conditions(scheduler_name: str, *, gpu_sharing: bool) -> list[dict[str, Any]]:
    """`gpu_sharing`: the admission surely validates with GPU sharing on (`shares_gpus`); otherwise every
    GPU-sharing pod is refused, so none may skip the webhook."""
    extra = [PROVEN_VALID_CREATE] if gpu_sharing else []
    return [scheduler_name_match(scheduler_name), dict(MAY_BE_DENIED), *(dict(c) for c in extra)]
