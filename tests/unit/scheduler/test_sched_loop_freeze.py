"""The live loop's cycle runs with the collector off and freezes what it leaves (`shell/loop.frozen`); every
`THAW_EVERY` cycles what was frozen meanwhile is unfrozen and collected, so cyclic garbage frozen with it is freed."""

from __future__ import annotations

import gc
import logging
import re
import weakref
from collections.abc import Iterator

import pytest
from sched_builders import PRIORITY_CLASSES, gang, node, queue

from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_carried_cycle
from operators.scheduler.decide.model import Task
from operators.scheduler.decide.snapshot import snapshot_from_objects
from operators.scheduler.shell.loop import frozen


class Cyclic:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()  # the other tests' collections see everything again
    gc.collect()


def test_what_a_cycle_keeps_is_frozen_before_the_collector_is_on_again() -> None:
    snapshot = snapshot_from_objects([*PRIORITY_CLASSES, queue("q"), node("n0"), *gang("g", 2, gpus=1)])
    gc.collect()
    decisions, carry = frozen(False, run_carried_cycle, snapshot, SchedulerConfig(), 1e9, None)
    assert decisions.binds and gc.isenabled()
    opened = carry.opened
    assert opened is not None and opened.tasks_in_order
    tracked = {id(o) for o in gc.get_objects() if type(o) is Task}  # the generations the collector walks
    assert not tracked & set(map(id, opened.tasks_in_order))


def test_garbage_frozen_with_a_cycle_is_freed_by_the_next_thaw(caplog: pytest.LogCaptureFixture) -> None:
    def leave_garbage() -> weakref.ref[Cyclic]:
        return weakref.ref(Cyclic())  # unreachable at once, but a reference cycle: only a collection frees it

    gone = frozen(False, leave_garbage)
    gc.collect()
    assert gone() is not None  # frozen: no collection looks at it
    with caplog.at_level(logging.INFO, logger="scheduler"):
        frozen(True, lambda: None)
    assert gone() is None
    held, freed = map(int, re.findall(r"(\d+) objects had been frozen, (\d+) of them", caplog.text)[0])
    assert held > 0 and freed >= 1  # at least the cyclic instance, which was in the frozen set
