"""A list page's records leave the cyclic GC's view as the page is taken (`freeze_records`), and young cyclic
garbage from before the page is collected first, not frozen with them."""

from __future__ import annotations

import gc
import json
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from operators.core.cache import PODS, Informer


class Record:
    """A GC-tracked record, as the components' dataclass records are."""

    def __init__(self, name: str) -> None:
        self.name = name


def parse(obj: dict[str, Any]) -> Record:
    return Record(obj["metadata"]["name"])


def page(names: list[str], cont: str = "") -> bytes:
    return json.dumps({"metadata": {"resourceVersion": "7", "continue": cont},
                       "items": [{"metadata": {"name": n, "namespace": "ns"}} for n in names]}).encode()


@pytest.fixture
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # what a test froze goes back under the collector, as for the rest of the suite


def in_collector_view(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects())


def test_page_records_are_frozen(thawed: None) -> None:
    informer: Informer[Record] = Informer(None, PODS, parse, freeze_records=True)  # type: ignore[arg-type]
    fresh: dict[str, Record | None] = {}
    meta = informer.take_page(page(["a", "b"], cont="next"), fresh)
    assert meta["continue"] == "next"
    assert sorted(fresh) == ["ns/a", "ns/b"]
    record = fresh["ns/a"]
    assert gc.is_tracked(record) and not in_collector_view(record)
    assert gc.get_freeze_count() > 0


def test_records_stay_in_view_without_freeze_records(thawed: None) -> None:
    informer: Informer[Record] = Informer(None, PODS, parse)  # type: ignore[arg-type]
    fresh: dict[str, Record | None] = {}
    informer.take_page(page(["a"]), fresh)
    assert in_collector_view(fresh["ns/a"])
    assert gc.get_freeze_count() == 0


def test_young_cyclic_garbage_is_collected_not_frozen(thawed: None) -> None:
    informer: Informer[Record] = Informer(None, PODS, parse, freeze_records=True)  # type: ignore[arg-type]
    gc.disable()  # only the informer may collect here
    try:
        cycle = Record("cycle")
        cycle.name = cycle  # type: ignore[assignment]
        gone = weakref.ref(cycle)
        del cycle
        assert gone() is not None
        informer.take_page(page(["a"]), {})
        assert gone() is None  # collected before the page's freeze (frozen, it would live on)
    finally:
        gc.enable()
