"""Booleans as Kubernetes and KAI accept them: Go's `strconv.ParseBool` spellings, nothing else.

KAI's flags (`--fake-gpu-nodes=true`, `--enable-webhook=false`) and boolean plugin arguments are parsed with
ParseBool, so a value KAI refuses is refused here too rather than silently read as false.
"""

from __future__ import annotations

import argparse
from typing import Final

TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


# The scheduler's settings have always taken these too (any case, blanks around): `loose=True`.
LOOSE_TRUE: Final = frozenset({"1", "t", "true", "yes"})
LOOSE_FALSE: Final = frozenset({"0", "f", "false", "no"})


def parse_bool(value: object, *, loose: bool = False) -> bool:
    """A bool, or one of ParseBool's spellings; with `loose`, also any case, surrounding blanks and yes/no.
    ValueError naming the value otherwise."""
    if isinstance(value, bool):
        return value
    text = str(value)
    if text in TRUE:
        return True
    if text in FALSE:
        return False
    if loose:
        folded = text.strip().lower()
        if folded in LOOSE_TRUE:
            return True
        if folded in LOOSE_FALSE:
            return False
    raise ValueError(f"not a boolean (true or false): {value!r}")


def flag_text(value: object) -> str:
    """A values-file setting as the text of a Go bool flag: "true" for True or "true" in any case, else "false"
    (what helm prints for a bool value, so the operator's rendering matches the chart's)."""
    return "true" if value is True or str(value).lower() == "true" else "false"


def _flag_value(text: str) -> bool:
    try:
        return parse_bool(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_bool_flag(parser: argparse.ArgumentParser, *flags: str, default: bool, help: str | None = None) -> None:
    """A Go-style boolean flag: `--flag` (true), `--flag=true|false|1|0|...`."""
    parser.add_argument(*flags, type=_flag_value, nargs="?", const=True, default=default, help=help)
