"""Numbers as KAI reads them from annotations: Go's `strconv.ParseFloat` and `ParseUint` grammars, so that the
admission webhook and the scheduler accept exactly the same spellings (a hex float such as `0x1p-1` included)."""

from __future__ import annotations

import math
import re
from typing import Final

_UINT64_MAX: Final = 2**64 - 1
_GO_UINT: Final = re.compile(r"[0-9]+")
_GO_DECIMAL_FLOAT: Final = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_GO_HEX_FLOAT: Final = re.compile(
    r"([+-]?)0[xX]((?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)")
_GO_SPECIAL_FLOAT: Final = re.compile(r"[+-]?(?:inf|infinity|nan)", re.IGNORECASE)


def go_parse_uint(text: str) -> int | None:
    """`strconv.ParseUint(text, 10, 64)`: None where Go returns an error."""
    if not _GO_UINT.fullmatch(text):
        return None
    value = int(text)
    return value if value <= _UINT64_MAX else None


def go_parse_float(text: str) -> float | None:
    """`strconv.ParseFloat(text, 64)`: None where Go returns an error (syntax or overflow to infinity)."""
    if _GO_DECIMAL_FLOAT.fullmatch(text):
        value = float(text)
    elif _GO_SPECIAL_FLOAT.fullmatch(text):
        return float(text)
    elif match := _GO_HEX_FLOAT.fullmatch(text):
        try:
            value = float.fromhex(match.group(1) + "0x" + match.group(2))
        except OverflowError:
            return None
    else:
        return None
    # Go reports ErrRange when a finite literal overflows; Python silently gives inf.
    return None if math.isinf(value) else value
