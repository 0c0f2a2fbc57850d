"""The configuration's durations (KAI's flags and SchedulingShard fields): Go-style or plain seconds."""

from __future__ import annotations

import re

_DURATION = re.compile(r"(-?\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: str | float | int) -> float:
    """Go-style duration ("1s", "1m30s", "-1s", "500ms") or plain seconds -> seconds."""
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("+-")
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"invalid duration: {value!r}")
    return sign * sum(float(n) * _UNIT[u] for n, u in parts)

