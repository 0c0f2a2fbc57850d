"""Back-off of failed scenario searches (KAI v0.18, opt-in): a job whose reclaim, preempt or consolidation search
found no solution is left out of that action until its back-off ends, instead of being searched every cycle.

Configured per action in the SchedulingShard's `scenarioSearchBudgets`: `minFailedSearchBackoff` and
`maxFailedSearchBackoff`, maps of action (`reclaim`, `preempt`, `consolidation`, or `default` for the others) to a
duration. A minimum of 0 or none disables it for that action; the maximum defaults to, and is at least, the minimum.
The first failure backs off the minimum, each further consecutive failure twice the previous back-off, up to the
maximum. A search that solves the job clears its back-off; so does the job's PodGroup going away. A job with no
victim at all counts as a failed search; one ruled out before any search (quota, limits) does not.

The table is carried between cycles by the shell: a cycle reads it from `Snapshot.search_backoff` and returns the
next one in `Decisions.search_backoff`, from the outcomes its actions recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

ACTIONS = ("reclaim", "preempt", "consolidation")
DEFAULT_KEY = "default"
# (action, job key): the job's back-off in that action.
Table = Mapping[tuple[str, str], "Backoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    until: float  # epoch seconds: the action skips the job before this
    delay: float  # seconds of this back-off (the next failure doubles it, up to the maximum)


def bounds(minimums: Mapping[str, float], maximums: Mapping[str, float], action: str) -> tuple[float, float]:
    """(minimum, maximum) back-off of `action`; (0, 0) when it is disabled."""
    low = minimums.get(action, minimums.get(DEFAULT_KEY, 0.0))
    if low <= 0:
        return 0.0, 0.0
    high = maximums.get(action, maximums.get(DEFAULT_KEY, 0.0))
    return low, max(low, high)


def job_key(namespace: str, name: str, uid: str) -> str:
    """A PodGroup's key in the table: its UID (a PodGroup created again under the same name starts afresh)."""
    return uid or f"{namespace}/{name}"


def blocked(table: Table, action: str, key: str, now: float) -> bool:
    entry = table.get((action, key))
    return entry is not None and entry.until > now


def advance(table: Table, outcomes: Iterable[tuple[str, str, bool]], now: float, minimums: Mapping[str, float],
            maximums: Mapping[str, float], live: Iterable[str]) -> dict[tuple[str, str], Backoff]:
    """The next table: entries of PodGroups still in `live`, then each (action, key, solved) outcome applied."""
    alive = set(live)
    out = {k: v for k, v in table.items() if k[1] in alive}
    for action, key, solved in outcomes:
        if solved:
            out.pop((action, key), None)
            continue
        low, high = bounds(minimums, maximums, action)
        if low <= 0:
            continue
        previous = out.get((action, key))
        delay = low if previous is None else min(high, previous.delay * 2)
        out[(action, key)] = Backoff(now + delay, delay)
    return out
