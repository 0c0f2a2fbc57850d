"""RFC3339 timestamps as the API server writes them: UTC, whole seconds, `Z` (`2024-01-02T03:04:05Z`).

The one formatter and the one parser of the project: condition `lastTransitionTime`s, event stamps, annotations
carrying a time, `creationTimestamp`s read back.
"""

from __future__ import annotations

import math
import re
import time
from datetime import datetime
from typing import Final

# RFC3339 (Go's time.RFC3339 / RFC3339Nano): a date, `T`, a time with optional fraction, and `Z` or an offset.
_RFC3339: Final = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def rfc3339(epoch: float | None = None) -> str:
    """`epoch` (seconds; now when None) as RFC3339 in UTC, the fraction dropped as metav1.Time drops it."""
    seconds = math.floor(time.time() if epoch is None else epoch)
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def parse_rfc3339(value: object) -> float | None:
    """Epoch seconds of an RFC3339 string (any offset, any fraction); None when absent or not RFC3339."""
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        return None
    try:
        return datetime.fromisoformat(value).timestamp()  # aware (the pattern requires an offset): absolute
    except ValueError:  # a well-formed string naming no real time (month 13)
        return None
