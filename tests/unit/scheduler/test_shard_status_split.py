"""One writer per condition type: the scheduler instance leaves Deployed/Available to the operator once the
operator reconciles the object (it writes `Reconciling`), and keeps writing FieldsNotHonoured."""

from __future__ import annotations

from operators.scheduler.decide.shardconfig import status_conditions
from operators.scheduler.shell.shard import KaiObject, _own


def test_the_scheduler_keeps_only_its_own_condition_on_an_operated_object() -> None:
    wanted = status_conditions(2, "", ["spec.usageDBConfig"])
    alone = KaiObject("default", 2, {}, ())
    assert [c["type"] for c in _own(alone, wanted)] == ["Deployed", "Available", "FieldsNotHonoured"]
    operated = KaiObject("default", 2, {}, ({"type": "Reconciling", "status": "False"},))
    assert [c["type"] for c in _own(operated, wanted)] == ["FieldsNotHonoured"]


def test_on_an_operated_config_the_scheduler_writes_nothing() -> None:
    wanted = status_conditions(2, "", ["spec.binder"])
    operated = KaiObject("kai-config", 2, {}, ({"type": "Reconciling", "status": "False"},))
    assert _own(operated, wanted, config=True) == []
    assert _own(KaiObject("kai-config", 2, {}, ()), wanted, config=True) == wanted
