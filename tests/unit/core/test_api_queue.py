"""The Queue's typed records (core/api/queue.py): what every component reads of a Queue."""

from __future__ import annotations

from decimal import Decimal

from operators.core.api.queue import UNLIMITED, QueueStatusRecord, queue_record, queue_status_record
from operators.core.units import MB
from operators.podgrouper.rayjob_admission import queue_view
from operators.queuecontroller.metrics import queue_metric_values


def queue(**spec: object) -> dict[str, object]:
    return {"metadata": {"name": "team", "uid": "u1"}, "spec": spec}


def test_the_spec_in_core_units_with_minus_one_kept() -> None:
    rec = queue_record(queue(parentQueue="dept", displayName="Team", resources={
        "gpu": {"quota": 0.3, "limit": -1, "overQuotaWeight": 2}, "cpu": {"quota": 1500},
        "memory": {"limit": 2048}}))
    assert (rec.name, rec.parent, rec.title, rec.priority) == ("team", "dept", "Team", 100)
    assert rec.quota == (300_000, 1500, 0) and rec.limit == (UNLIMITED, 0, 2048 * MB)
    assert rec.weight == (2.0, 0.0, 0.0)


def test_the_status_parsed_a_malformed_list_reading_as_empty() -> None:
    status = queue_status_record({"status": {"childQueues": ["b", "a"], "allocated": {"cpu": "1500m"},
                                             "requested": {"cpu": "not a quantity"},
                                             "conditions": [{"type": "Orphan", "status": "True"}, "junk"]}})
    assert status.child_queues == ("b", "a")
    assert status.allocated == {"cpu": Decimal("1.5")} and status.listed("requested") == {}
    assert status.listed("allocatedNonPreemptible") == {}
    assert status.conditions == ({"type": "Orphan", "status": "True"},)
    assert queue_status_record({}) == QueueStatusRecord()


def test_the_written_status_reads_back_as_the_same_record() -> None:
    record = QueueStatusRecord(child_queues=("a",),
                               amounts={"allocated": {"cpu": Decimal(2), "memory": Decimal(10**9)}})
    wire = record.to_wire()
    assert wire == {"allocated": {"cpu": "2", "memory": "1000000000"}, "allocatedNonPreemptible": {}, "requested": {},
                    "childQueues": ["a"]}
    assert queue_status_record({"status": wire}).allocated == record.allocated


def test_readers_get_the_numbers_the_spec_wrote() -> None:
    # Micro-GPUs back to GPUs by division: 0.3 stays 0.3, not 0.30000000000000004.
    obj = queue(resources={"gpu": {"quota": 0.3, "limit": 0.7}, "cpu": {"quota": 1500, "limit": -1},
                           "memory": {"quota": 1.5}})
    values = queue_metric_values(obj)
    assert (values["queue_deserved_gpus"], values["queue_limit_gpus"]) == (0.3, 0.7)
    assert (values["queue_quota_cpu_cores"], values["queue_limit_cpu_cores"]) == (1.5, -1)
    assert values["queue_quota_memory_bytes"] == 1.5 * MB
    view = queue_view(obj)
    assert view.limit == (0.7, -1.0, 0.0)
