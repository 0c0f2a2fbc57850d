"""explained.chosen: a pending workload's explanation is shown again at once for a new reason or wording, and for
a change of its numbers alone only once REFRESH seconds have passed since it was last shown."""

from __future__ import annotations

from typing import Any

import pytest

from operators.core import events as events_module
from operators.core import keys
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.decisions import Unschedulable
from operators.scheduler.shell import writer as writer_module
from operators.scheduler.shell.explained import REFRESH, chosen, wording
from operators.scheduler.shell.loop import SchedulerLoop

GPUS = "Resources were not found for pod ns/p-1 due to: {} node(s) didn't have enough resources: GPUs."
TAINT = GPUS + " \n{} node(s) had untolerated taint {{gpu: busy}}."


def test_numbers_alone_wait_for_the_refresh_reasons_do_not() -> None:
    first = chosen(None, GPUS.format(3), 100.0)
    assert first.text == GPUS.format(3) and first.at == 100.0
    # Counts moved: the text shown stays the first one until REFRESH has passed since it was shown.
    assert chosen(first, GPUS.format(4), 100.0 + REFRESH - 1) is first
    later = chosen(first, GPUS.format(5), 100.0 + REFRESH)
    assert later.text == GPUS.format(5) and later.at == 100.0 + REFRESH
    # A new reason in the histogram is shown at once.
    tainted = chosen(later, TAINT.format(5, 1), later.at + 1)
    assert tainted.text == TAINT.format(5, 1)
    # The same text is never news, however late.
    assert chosen(tainted, TAINT.format(5, 1), tainted.at + 10 * REFRESH) is tainted


def test_wording_blanks_integers_and_decimals_only() -> None:
    assert wording("Limit is 2.5 GPUs, currently 10 GPUs allocated") == "Limit is # GPUs, currently # GPUs allocated"
    assert wording(GPUS.format(3)) == wording(GPUS.format(12))
    assert wording(GPUS.format(3)) != wording(TAINT.format(3, 1))


def test_the_value_travels_with_the_text_shown() -> None:
    first = chosen(None, "a 1", 0.0, value=("a 1", (1,)))
    assert chosen(first, "a 2", 1.0, value=("a 2", (2,))).value == ("a 1", (1,))
    assert chosen(first, "b 2", 1.0, value=("b 2", (2,))).value == ("b 2", (2,))


class Recorder:
    """The API as the writer sees it: every request answered with its body, and recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def raw(self, api: Any, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append((method, path))
        return dict(kwargs.get("body") or {})

    def conditions(self) -> int:
        return sum(1 for m, p in self.calls if m == "PATCH" and p.endswith("/pods/p-1/status"))


def pending_pod(uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p-1", "namespace": "ns", "uid": uid,
                         "annotations": {keys.POD_GROUP_NAME: "pg-1"}},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c"}]},
            "status": {"phase": "Pending"}}


async def test_the_writer_rewrites_a_pod_for_a_new_reason_or_a_new_pod_not_for_new_counts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    api = Recorder()
    for module in (writer_module, events_module):
        monkeypatch.setattr(module, "raw", api.raw)
    loop = SchedulerLoop(object(), SchedulerConfig())
    loop.pods._put("ns/p-1", loop.pods.parse(pending_pod("uid-1")), "ADDED")

    def unschedulable(message: str) -> Unschedulable:
        return Unschedulable("ns", "pg-1", "default", message, (), {"p-1": message}, False)

    for nodes in (3, 4, 5):  # counts move every cycle
        await loop.explain(unschedulable(GPUS.format(nodes)))
    assert api.conditions() == 1
    await loop.explain(unschedulable(TAINT.format(5, 1)))  # a new reason
    assert api.conditions() == 2
    # Deleted and created again under the same name: a new pod, explained at once with the same text.
    loop.pods._put("ns/p-1", loop.pods.parse(pending_pod("uid-2")), "MODIFIED")
    await loop.explain(unschedulable(TAINT.format(6, 1)))
    assert api.conditions() == 3


async def test_with_no_refresh_interval_every_change_of_counts_is_written_as_kai_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    api = Recorder()
    for module in (writer_module, events_module):
        monkeypatch.setattr(module, "raw", api.raw)
    loop = SchedulerLoop(object(), SchedulerConfig(), explanation_refresh=0)
    loop.pods._put("ns/p-1", loop.pods.parse(pending_pod("uid-1")), "ADDED")
    for nodes in (3, 4, 5, 5):
        await loop.explain(Unschedulable("ns", "pg-1", "default", GPUS.format(nodes), (),
                                         {"p-1": GPUS.format(nodes)}, False))
    assert api.conditions() == 3  # every new text, the repeated one not


def test_the_scheduler_flag_sets_the_interval() -> None:
    from operators.scheduler.shell.main import parser

    assert parser().parse_args([]).explanation_refresh == REFRESH
    assert parser().parse_args(["--explanation-refresh", "0"]).explanation_refresh == 0
