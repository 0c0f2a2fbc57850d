"""Field readers shared by the records' parse functions (the scheduler's and `operators.core.api`'s).

Every watched object is parsed once per event, so these are lenient (a malformed value reads as unset; the API
server has validated the object against its schema already) and cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from operators.core import keys
from operators.core.durations import parse_delay
from operators.core.times import parse_rfc3339


def parse_time(value: Any) -> float:
    """RFC3339 -> epoch seconds; 0.0 when absent or malformed (sorts first, like a zero Go time)."""
    if not value or not isinstance(value, str):
        return 0.0
    return _epoch(value)


@lru_cache(maxsize=8192)
def _epoch(text: str) -> float:
    # Memoised: a cycle reads the same annotation times again and again (min-runtime, stale gangs).
    return parse_rfc3339(text) or 0.0


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, Mapping) else {}


def owner(meta: Mapping[str, Any]) -> tuple[str, str, str, str] | None:
    refs = meta.get("ownerReferences") or ()
    ref = refs[0] if refs and isinstance(refs[0], Mapping) else None
    if ref is None:
        return None
    return (str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""), str(ref.get("name") or ""),
            str(ref.get("uid") or ""))


def count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def delay(value: Any) -> float | None:
    try:
        return parse_delay(value) if value is not None else None
    except ValueError:
        return None


def provisioning_class(annotations: Mapping[str, Any]) -> str:
    return str(annotations.get(keys.PROVISIONING_CLASS_ANNOTATION) or "").strip()


def provisioning_parameters(annotations: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    prefix = keys.PROVISIONING_PARAMETER_PREFIX
    return tuple(sorted((str(k)[len(prefix):], str(v)) for k, v in annotations.items()
                        if str(k).startswith(prefix) and len(str(k)) > len(prefix)))
