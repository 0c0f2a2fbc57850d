"""A cycle's session is freed by reference counting when the cycle returns (`Session.release`), not left for the
cyclic collector: the cycle runs with the collector off, and its jobs, tasks, queues and plugins are linked both
ways, so without the release the first collection after every cycle traversed all of them."""

from __future__ import annotations

import gc

from operators.core.cache import paused_gc
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_carried_cycle, run_cycle
from operators.scheduler.decide.model import Job, Task
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.session.carry import Opened
from tests.unit.scheduler.sched_builders import PRIORITY_CLASSES, gang, node, pod, podgroup, queue


def _objects() -> list[dict[str, object]]:
    objs: list[dict[str, object]] = [*PRIORITY_CLASSES, queue("dept"), queue("q", "dept"), node("n0"), node("n1")]
    objs += gang("train", 3, gpus=2)
    objs += gang("wide", 4, gpus=8)  # does not fit: explained at close
    objs += [podgroup("solo"), pod("solo-0", "solo", gpus=1)]
    return objs


def _alive(kind: type) -> int:
    return sum(1 for o in gc.get_objects() if type(o) is kind)


def _tasks(opened: Opened) -> int:
    """The tasks handed on: in snapshot order after a full open, by record after a carried one."""
    return len(opened.by_rec) if opened.by_rec is not None else len(opened.tasks_in_order)


def test_a_cycles_session_is_freed_without_the_cyclic_collector() -> None:
    from operators.scheduler.decide.snapshot import snapshot_from_objects

    snapshot = snapshot_from_objects(_objects())
    gc.collect()
    with paused_gc():  # as during a cycle
        before = _alive(Job), _alive(Task), _alive(Session)
        decisions = run_cycle(snapshot, SchedulerConfig(), 1e9)
        assert len(decisions.binds) == 4 and [u.pod_group for u in decisions.unschedulable] == ["wide"]
        # Nothing of the session outlives the cycle, though no collection ran.
        assert (_alive(Job), _alive(Task), _alive(Session)) == before
        # With a carry, its jobs and tasks are handed to the next session's open (session/persist.py), nothing else.
        carried, carry = run_carried_cycle(snapshot, SchedulerConfig(), 1e9, None)
        assert carried.binds == decisions.binds
        opened = carry.opened
        assert opened is not None
        assert (_alive(Job), _alive(Task), _alive(Session)) == (
            before[0] + len(opened.jobs), before[1] + _tasks(opened), before[2])
        # The next cycle takes them over; the jobs it rebuilds are freed as it replaces them.
        again, carry = run_carried_cycle(snapshot, SchedulerConfig(), 1e9 + 1, carry)
        assert again.binds == decisions.binds
        opened = carry.opened
        assert opened is not None
        assert (_alive(Job), _alive(Task), _alive(Session)) == (
            before[0] + len(opened.jobs), before[1] + _tasks(opened), before[2])
        # A carry the next cycle cannot take over (another config) is cut when it is dropped.
        _, carry = run_carried_cycle(snapshot, SchedulerConfig(partition="other"), 1e9 + 2, carry)
        opened = carry.opened
        assert opened is not None
        assert (_alive(Job), _alive(Task), _alive(Session)) == (
            before[0] + len(opened.jobs), before[1] + _tasks(opened), before[2])


def test_without_the_release_the_session_waits_for_the_collector() -> None:
    # The test above can fail: a session whose links are not cut stays alive until a collection finds it.
    from operators.scheduler.decide.snapshot import snapshot_from_objects

    snapshot = snapshot_from_objects(_objects())
    gc.collect()
    with paused_gc():  # as during a cycle
        before = _alive(Job)
        session = Session(snapshot, SchedulerConfig(), 1e9)
        session.close()
        del session
        assert _alive(Job) > before
        gc.collect()
        assert _alive(Job) == before
