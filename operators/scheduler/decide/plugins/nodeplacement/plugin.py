"""nodeplacement: binpack or spread, per resource (arguments `gpu`, `cpu`: binpack | spread). Built into the
placer's sorted node index (KAI's nodeplacement score, above it nodeavailability and resourcetype)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.scheduler.decide.config import BINPACK, SPREAD
from operators.scheduler.decide.framework import Plugin


class NodePlacement(Plugin):
    name = "nodeplacement"
    default_priority = 300
    required = True
    argument_names = frozenset({"gpu", "cpu"})

    @classmethod
    def check_arguments(cls, arguments: Mapping[str, Any]) -> None:
        for resource in ("gpu", "cpu"):
            value = arguments.get(resource)
            if value and str(value).lower() not in (BINPACK, SPREAD):
                raise ValueError(f"placement strategy must be {BINPACK} or {SPREAD}, got {value!r}")


PLUGIN = NodePlacement
