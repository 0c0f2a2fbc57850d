"""Go durations (`time.ParseDuration`) as KAI's API fields and annotations carry them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from operators.core import keys

_PART: Final = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                        "h": 3600.0}

DELAY_FORMAT: Final = ('a non-negative Go duration: numbers with units (ns, us, ms, s, m, h), '
                       'e.g. "30s", "5m", "1h30m"')


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration string ("20s", "-5m", "1h30m", "1.5h", "0"); ValueError if it is not one.

    As Go: an optional sign, then one or more number+unit parts; a bare number is refused except "0".
    """
    body = text[1:] if text[:1] in ("+", "-") else text
    sign = -1.0 if text.startswith("-") else 1.0
    if body == "0":
        return 0.0
    position, total = 0, 0.0
    for match in _PART.finditer(body):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    if not body or position != len(body):
        raise ValueError(f"invalid duration {text!r}")
    return sign * total


def parse_seconds(value: str | float | int) -> float:
    """Seconds in a Go duration, or in a plain number of seconds (30, 1.5, "30"); ValueError otherwise.

    The scheduler's settings (flags, SchedulingShard `args` and plugin arguments, Queue min-runtimes) take Go
    durations as KAI does, and have always taken plain seconds too; surrounding blanks are ignored.
    """
    if isinstance(value, int | float):
        return float(value)
    text = value.strip()
    try:
        return float(text)
    except ValueError:
        return parse_go_duration(text)


def parse_delay(value: object) -> float:
    """A non-negative duration in seconds; ValueError (naming the accepted format) otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"must be {DELAY_FORMAT}, got {value!r}")
    try:
        seconds = parse_go_duration(value)
    except ValueError:
        raise ValueError(f"must be {DELAY_FORMAT}, got {value!r}") from None
    if seconds < 0:
        raise ValueError(f"must be {DELAY_FORMAT}, got the negative {value!r}")
    return seconds


def delay_error(path: str, value: object) -> str | None:
    """The message refusing `value` at `path` (a field or annotation) when it is no valid delay, else None."""
    try:
        parse_delay(value)
    except ValueError as exc:
        return f"{path}: {exc}"
    return None


def metadata_delay(metadata: object) -> tuple[str, str] | None:
    """(where, value) of the preemption delay an object's metadata sets: its label (KAI's form), else its
    annotation; None when neither is set."""
    if not isinstance(metadata, Mapping):
        return None
    for kind in ("labels", "annotations"):
        values = metadata.get(kind)
        if isinstance(values, Mapping) and keys.PREEMPTION_DELAY in values:
            return f"metadata.{kind}[{keys.PREEMPTION_DELAY}]", str(values[keys.PREEMPTION_DELAY])
    return None
