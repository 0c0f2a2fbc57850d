"""minruntime: a job that started less than its queue's minimum runtime ago is not a victim (its pods above
minMember still are). Arguments: `defaultPreemptMinRuntime`, `defaultReclaimMinRuntime` (durations) and
`reclaimResolveMethod` (lca | queue: where a reclaim's queue lookup starts). Disabled: nothing is protected."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.scheduler.decide.durations import parse_duration
from operators.scheduler.decide.framework import Plugin


class MinRuntime(Plugin):
    name = "minruntime"
    default_priority = 200
    argument_names = frozenset({"defaultPreemptMinRuntime", "defaultReclaimMinRuntime", "reclaimResolveMethod"})

    @classmethod
    def check_arguments(cls, arguments: Mapping[str, Any]) -> None:
        for arg in ("defaultPreemptMinRuntime", "defaultReclaimMinRuntime"):
            if arguments.get(arg) is not None:
                parse_duration(arguments[arg])
        method = arguments.get("reclaimResolveMethod")
        if method and str(method) not in ("lca", "queue"):
            raise ValueError(f"reclaimResolveMethod must be lca or queue, got {method!r}")


PLUGIN = MinRuntime
