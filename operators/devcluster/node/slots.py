"""Claim a slot (see `addresses`) for a cluster's real node: one file per slot under the cache, made atomically.

A slot whose owner is gone (no state, or its API server not running) is stale and is taken over after the
owner's leftovers are removed; a live owner is named in the error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from operators.devcluster.node.addresses import SLOTS


class SlotError(RuntimeError):
    pass


def owner(directory: Path, slot: int) -> str | None:
    try:
        return (directory / f"slot-{slot}").read_text().strip() or None
    except FileNotFoundError:
        return None


def slot_of(directory: Path, cluster: str) -> int | None:
    for slot in range(SLOTS):
        if owner(directory, slot) == cluster:
            return slot
    return None


def claim(directory: Path, cluster: str, *, alive: Callable[[str], bool],
          clean: Callable[[str, int], None]) -> int:
    """The cluster's slot: its own if it holds one, else the first free (or stale) one."""
    directory.mkdir(parents=True, exist_ok=True)
    mine = slot_of(directory, cluster)
    if mine is not None:
        return mine
    busy: list[str] = []
    for slot in range(SLOTS):
        path = directory / f"slot-{slot}"
        holder = owner(directory, slot)
        if holder is not None:
            if alive(holder):
                busy.append(holder)
                continue
            clean(holder, slot)
            path.unlink(missing_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:  # another `kai dev up` took it a moment ago
            continue
        with os.fdopen(fd, "w") as out:
            out.write(cluster)
        return slot
    raise SlotError(f"all {SLOTS} real-node slots are held by running clusters ({', '.join(busy[:5])}, ...); "
                    "stop one with `kai dev down --name <name>`")


def release(directory: Path, cluster: str) -> None:
    slot = slot_of(directory, cluster)
    if slot is not None:
        (directory / f"slot-{slot}").unlink(missing_ok=True)
