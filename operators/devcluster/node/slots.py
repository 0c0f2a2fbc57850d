"""Claim a slot (see `addresses`) for a cluster's real node: one lock file per slot under the cache.

A slot is held while any process of its cluster lives: the file is opened and locked (`flock`) by `kai dev up`,
and every process the cluster starts inherits that open file, so the lock outlives `up` and goes only with the
last of them. A slot whose file names a cluster but is not locked, and whose cluster's API server is not running
either, is stale (the cluster died or was killed): it is taken over after that cluster's leftovers are removed. A
held slot's cluster is named in the error.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path

from operators.devcluster.node.addresses import SLOTS

_held: dict[str, int] = {}  # cluster -> this process's locked descriptor, until handed over to the cluster's processes


class SlotError(RuntimeError):
    pass


def _path(directory: Path, slot: int) -> Path:
    return directory / f"slot-{slot}"


def owner(directory: Path, slot: int) -> str | None:
    try:
        return _path(directory, slot).read_text().strip() or None
    except FileNotFoundError:
        return None


def slot_of(directory: Path, cluster: str) -> int | None:
    for slot in range(SLOTS):
        if owner(directory, slot) == cluster:
            return slot
    return None


def _lock(path: Path) -> int | None:
    """A descriptor holding the exclusive lock on `path`, or None if a live process holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # `release` unlinked it between our open and our lock: lock the new file instead


def claim(directory: Path, cluster: str, *, alive: Callable[[str], bool], clean: Callable[[str, int], None]) -> int:
    """Lock a slot for `cluster` (its own stale one first, else the lowest free one) and return it; the lock is
    held by this process until `hand_over` or `release`, and by every process that inherits `held(cluster)`."""
    directory.mkdir(parents=True, exist_ok=True)
    own = slot_of(directory, cluster)
    order = ([own] if own is not None else []) + [s for s in range(SLOTS) if s != own]
    busy: list[str] = []
    for slot in order:
        path = _path(directory, slot)
        fd = _lock(path)
        if fd is None:
            busy.append(owner(directory, slot) or "?")
            continue
        stale = os.read(fd, 4096).decode().strip()
        if stale and stale != cluster and alive(stale):  # running without holding the lock: never take it over
            os.close(fd)
            busy.append(stale)
            continue
        if stale:
            clean(stale, slot)
        os.ftruncate(fd, 0)
        os.pwrite(fd, cluster.encode(), 0)
        _held[cluster] = fd
        return slot
    raise SlotError(f"all {SLOTS} real-node slots are held by running clusters ({', '.join(busy[:5])}, ...); "
                    "stop one with `kai dev down --name <name>`")


def held(cluster: str) -> int | None:
    """This process's locked descriptor for the cluster's slot, for its processes to inherit."""
    return _held.get(cluster)


def hand_over(cluster: str) -> None:
    """Close this process's copy: the cluster's processes hold the lock from now on."""
    fd = _held.pop(cluster, None)
    if fd is not None:
        os.close(fd)


def release(directory: Path, cluster: str) -> None:
    """Give the slot back once the cluster's processes are gone (the file is removed if nobody holds it)."""
    hand_over(cluster)
    slot = slot_of(directory, cluster)
    if slot is None:
        return
    deadline = time.monotonic() + 10  # killed processes close their files as they finish exiting
    while (fd := _lock(_path(directory, slot))) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if fd is None:
        return  # a process of the cluster still runs: the slot stays stale-claimable once it is gone
    try:
        if owner(directory, slot) == cluster:
            _path(directory, slot).unlink(missing_ok=True)
    finally:
        os.close(fd)
