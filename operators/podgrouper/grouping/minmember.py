"""`kai.scheduler/batch-min-member`: the user's override of a PodGroup's minMember (KAI v0.15+, Deployments v0.18).

The value must be a whole number of at least 1; anything else is a grouping failure (a `PodGrouperWarning` event on
the pod) with KAI's message, naming the kind of the annotated object. Without the annotation the rule's default
stands.
"""

from __future__ import annotations

import re

from operators.podgrouper.grouping.common import annotations_of
from operators.podgrouper.grouping.model import GroupingFailure, Obj

MIN_MEMBER_KEY = "kai.scheduler/batch-min-member"
_INT32 = (-(2**31), 2**31 - 1)
_GO_INT = re.compile(r"[+-]?\d+")


def parse_min_member(value: str, source: str) -> int:
    """The override as KAI parses it (Go's ParseInt, base 10, 32 bits), at least 1."""
    prefix = f"invalid {MIN_MEMBER_KEY} annotation on {source}"
    if not _GO_INT.fullmatch(value):
        raise GroupingFailure(f'{prefix}: strconv.ParseInt: parsing "{value}": invalid syntax')
    number = int(value)
    if not _INT32[0] <= number <= _INT32[1]:
        raise GroupingFailure(f'{prefix}: strconv.ParseInt: parsing "{value}": value out of range')
    if number < 1:
        raise GroupingFailure(f"{prefix}: value {number} must be >= 1")
    return number


def min_member_of(obj: Obj, source: str, fallback: int) -> int:
    """The annotated override on `obj`, or `fallback` when it carries none."""
    value = annotations_of(obj).get(MIN_MEMBER_KEY)
    return fallback if value is None else parse_min_member(value, source)
