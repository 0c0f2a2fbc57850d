"""One scheduling cycle as a pure function: snapshot in, decisions out."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence

from operators.core.units import MS_PER_SECOND
from operators.scheduler.decide.actions import get_action
from operators.scheduler.decide.actions.allocate import Allocate
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.decisions import Bind, Decisions
from operators.scheduler.decide.framework import builtin_plugins
from operators.scheduler.decide.searchbackoff import advance, job_key
from operators.scheduler.decide.session import Carry, Session
from operators.scheduler.decide.snapshot import Snapshot

builtin_plugins()  # the built-in plugin modules are found and imported once, here, not in the first cycle


def run_cycle(snapshot: Snapshot, config: SchedulerConfig, now: float,
              actions: Sequence[str] | None = None, *, on_bind: Callable[[Bind], None] | None = None) -> Decisions:
    """Open a session on `snapshot`, run the actions in order, and return what to write.

    `now` is epoch seconds (used for timestamps and grace periods); `actions` defaults to the config's.
    `on_bind`, if given, is called with each of the allocate action's binds as soon as its job's allocation is
    committed (they are in the returned decisions too); it must not change anything the cycle reads.
    """
    return _run(snapshot, config, now, None, actions, on_bind, persist=False)[0]


def run_carried_cycle(snapshot: Snapshot, config: SchedulerConfig, now: float, carry: Carry | None,
                      actions: Sequence[str] | None = None, *, on_bind: Callable[[Bind], None] | None = None
                      ) -> tuple[Decisions, Carry]:
    """`run_cycle` given the previous cycle's carry (None: none), returning the decisions and the next carry.

    The decisions are those `run_cycle` returns on the same snapshot: the carry only saves recomputing what was
    derived from the same record objects (`session/carry.py`), and the next cycle's session open starts from this
    one's objects (`session/persist.py`): the carry is consumed by the cycle given it.
    """
    return _run(snapshot, config, now, carry, actions, on_bind, persist=True)


def _run(snapshot: Snapshot, config: SchedulerConfig, now: float, carry: Carry | None, actions: Sequence[str] | None,
         on_bind: Callable[[Bind], None] | None, *, persist: bool) -> tuple[Decisions, Carry]:
    # A cycle creates ~10^5 short-lived objects next to a large, long-lived record heap; generational GC
    # passes over that heap cost more than the cycle itself, so collection is deferred until it ends.
    was_enabled = gc.isenabled()
    gc.disable()
    timings: dict[str, float] = {}
    try:
        started = time.perf_counter()
        session = Session(snapshot, config, now, carry, persist)
        timings["open-session"] = (time.perf_counter() - started) * MS_PER_SECOND
        for name in actions if actions is not None else config.effective_actions:
            action = get_action(name)
            if on_bind is not None and isinstance(action, Allocate):
                action.on_bind = on_bind
            if action.enabled:
                started = time.perf_counter()
                action.execute(session)
                timings[name] = (time.perf_counter() - started) * MS_PER_SECOND
        started = time.perf_counter()
        decisions = session.close()
        if snapshot.search_backoff or decisions.search_outcomes:
            decisions.search_backoff = advance(
                snapshot.search_backoff, decisions.search_outcomes, now, config.min_failed_search_backoff,
                config.max_failed_search_backoff, (job_key(g.namespace, g.name, g.uid) for g in snapshot.podgroups))
        timings["close-session"] = (time.perf_counter() - started) * MS_PER_SECOND
        decisions.timings.update(timings)  # the session adds its plugins' ("plugin/<name>")
        session.hand_over()
        carry_out = session.carrying.carry()
        session.release()  # freed by reference counting, not by the next collection (Session.release)
        return decisions, carry_out
    finally:
        if was_enabled:
            gc.enable()
