"""Annotations read the same way on more than one kind of object (a Queue's apply to all of its workloads)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.core import keys


def provisioning_class(annotations: Mapping[str, Any]) -> str:
    return str(annotations.get(keys.PROVISIONING_CLASS_ANNOTATION) or "").strip()


def provisioning_parameters(annotations: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    prefix = keys.PROVISIONING_PARAMETER_PREFIX
    return tuple(sorted((str(k)[len(prefix):], str(v)) for k, v in annotations.items()
                        if str(k).startswith(prefix) and len(str(k)) > len(prefix)))
