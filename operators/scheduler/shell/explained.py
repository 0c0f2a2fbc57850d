"""When a pending pod's or PodGroup's explanation is written again: a new reason or wording at once, a change of
its numbers alone at most once per REFRESH seconds.

The scheduler re-derives every pending workload's explanation each cycle, and KAI's messages carry counts ("3
node(s) didn't have enough resources: GPUs", "currently 6 GPUs allocated") that move with every bind in a
backlog. KAI v0.18 patches a pod's `PodScheduled` condition whenever its text changes (podutil.UpdatePodCondition),
so a filling cluster rewrites every pending pod each cycle. kube-scheduler's messages carry counts too, but it
retries an unschedulable pod only on a relevant event or after podMaxInUnschedulablePodsDuration (5 minutes).
Here a numbers-only change waits as long: `kubectl describe` shows a new reason at once and counts at most
REFRESH seconds old (the condition's lastTransitionTime says when they were counted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

REFRESH = 300.0  # seconds: kube-scheduler's DefaultPodMaxInUnschedulablePodsDuration
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def wording(text: str) -> str:
    """The text with every number blanked: two explanations that differ only in their counts word the same."""
    return _NUMBER.sub("#", text)


@dataclass(frozen=True, slots=True)
class Written:
    """The last explanation chosen for one object: its text, that text's wording, when, and what it stands for."""

    text: str
    wording: str
    at: float  # monotonic seconds
    value: Any = None


def chosen(last: Written | None, text: str, now: float, value: Any = None, refresh: float = REFRESH) -> Written:
    """The explanation to show now: `last` when `text` is the same, or the same but for its numbers within `refresh`
    seconds of it; else `text` itself, counted from `now`."""
    if last is not None and (last.text == text or (now - last.at < refresh and last.wording == wording(text))):
        return last
    return Written(text, wording(text), now, value)
