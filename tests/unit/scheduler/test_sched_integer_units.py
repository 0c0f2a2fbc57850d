"""Integer resource units of the scheduler core: sums that floats got wrong are exact."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sched_builders import bound, cycle, node, pod, podgroup, queue

from operators.core.api.queue import queue_record
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.records import node_record, pod_record
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects
from operators.scheduler.decide.units import (
    GPU,
    ceil_scaled,
    gpu_fraction,
    gpu_memory_portion,
    gpu_memory_share,
    portion_text,
    queue_amount,
    to_gpus,
)


def session(objs: list[dict[str, Any]]) -> Session:
    return Session(snapshot_from_objects(objs), SchedulerConfig(), 0.0)


def one_pod_jobs(names: list[str], **kw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for name in names:
        out += [podgroup(name), pod(name, name, **kw)]
    return out


# --- the units ----------------------------------------------------------------------------------


def test_gpu_fraction_is_the_decimal_written_in_micro_gpus() -> None:
    assert gpu_fraction(0.1) == 100_000 and gpu_fraction(0.7) == 700_000 and gpu_fraction(1.0) == GPU
    assert gpu_fraction(0.123456) == 123_456
    # Finer than a micro-GPU: rounded up (a pod never gets less than it asked for).
    assert gpu_fraction(0.1234561) == 123_457
    assert gpu_fraction(1 / 3) == 333_334


def test_gpu_memory_portion_is_whole_hundredths_rounded_up_on_integers() -> None:
    assert gpu_memory_portion(10_000, 40_960) == 250_000  # 24.41% -> 0.25
    assert gpu_memory_portion(40_960, 40_960) == GPU
    assert gpu_memory_portion(4_096, 40_960) == 100_000  # exactly 0.10: not rounded up to 0.11
    assert gpu_memory_portion(40_961, 40_960) > GPU  # does not fit one device


def test_gpu_memory_queue_share_rounds_up_to_a_micro_gpu() -> None:
    assert gpu_memory_share(10_000, 40_960) == 244_141  # 244,140.625 -> up
    assert gpu_memory_share(20_480, 40_960) == GPU // 2  # exact stays exact


def test_queue_amounts_and_quantities() -> None:
    assert queue_amount(0.3, GPU) == 300_000 and queue_amount(1.5, GPU) == 1_500_000
    assert queue_amount(2000, 1) == 2000 and queue_amount(0.5, 10**6) == 500_000
    # CPU and memory quantities round up to whole millicores / bytes, as Kubernetes does.
    assert ceil_scaled(Decimal("0.0001"), 1000) == 1 and ceil_scaled(Decimal("1.5"), 1) == 2
    assert to_gpus(300_000) == 0.3 and portion_text(250_000) == "0.25"


def test_records_are_integers() -> None:
    n = node_record(node("n", gpus=2, cpu="1500m", memory="1.5Gi"))
    assert (n.cpu, n.memory, n.gpus) == (1500, 1610612736, 2)
    p = pod_record(pod("p", "g", cpu="100m", memory="0.5Ki"))
    assert (p.cpu, p.memory) == (100, 512) and isinstance(p.cpu, int) and isinstance(p.memory, int)
    q = queue_record(queue("q", gpu=(0.3, 0.7, 1), memory=(1.5, -1, 1)))
    assert q.quota[0] == 300_000 and q.limit[0] == 700_000 and q.quota[2] == 1_500_000 and q.limit[2] == -1


# --- sums that floats got wrong -----------------------------------------------------------------


def test_three_tenths_and_seven_tenths_fill_exactly_one_gpu() -> None:
    # 0.1 + 0.1 + 0.1 is 0.30000000000000004 in floats, leaving less than 0.7: exact here.
    running = [pod(f"r{i}", f"r{i}", fraction="0.1", node_name="n1", phase="Running", gpu_group="g1")
               for i in range(3)]
    objs = [node("n1", gpus=1), queue("q"), *[podgroup(f"r{i}") for i in range(3)], *running,
            *one_pod_jobs(["big"], fraction="0.7"), *one_pod_jobs(["extra"], fraction="0.1")]
    d = cycle(objs)
    assert bound(d) == {"big": "n1"}
    big = next(b for b in d.binds if b.pod == "big")
    assert big.gpu_groups == ("g1",) and big.gpu_portion == "0.70"
    assert [u.pod_group for u in d.unschedulable] == ["extra"]  # the device is exactly full
    s = session(objs)
    assert s.nodes[0].groups["g1"].used == 300_000


def test_ten_tenths_fill_one_gpu_and_an_eleventh_does_not_fit() -> None:
    names = [f"p{i:02d}" for i in range(11)]
    d = cycle([node("n1", gpus=1), queue("q"), *one_pod_jobs(names, fraction="0.1", cpu="100m")])
    assert len(d.binds) == 10 and len({b.gpu_groups for b in d.binds}) == 1
    assert len(d.unschedulable) == 1


def test_queue_limit_of_three_tenths_admits_one_tenth_plus_two_tenths() -> None:
    objs = [node("n1", gpus=1), queue("q", gpu=(0.3, 0.3, 1)),
            podgroup("a", min_member=2), pod("a-0", "a", fraction="0.1"), pod("a-1", "a", fraction="0.2"),
            *one_pod_jobs(["b"], fraction="0.1")]
    d = cycle(objs)
    assert set(bound(d)) == {"a-0", "a-1"}
    (pending,) = d.unschedulable
    assert pending.pod_group == "b"
    assert "Limit is 0.3 GPUs, currently 0.3 GPUs allocated and workload requested 0.1 GPUs" in pending.message


def test_non_preemptible_quota_of_three_tenths_admits_one_tenth_plus_two_tenths() -> None:
    objs = [node("n1", gpus=1), queue("q", gpu=(0.3, -1, 1)),
            podgroup("a", min_member=2, preemptibility="non-preemptible"),
            pod("a-0", "a", fraction="0.1"), pod("a-1", "a", fraction="0.2"),
            podgroup("b", preemptibility="non-preemptible"), pod("b", "b", fraction="0.1")]
    d = cycle(objs)
    assert set(bound(d)) == {"a-0", "a-1"}
    (pending,) = d.unschedulable
    assert "NonPreemptibleOverQuota" in pending.message and "quota is 0.3 GPUs, while 0.3 GPUs" in pending.message


def test_ten_pods_of_100m_fill_exactly_one_core() -> None:
    names = [f"c{i:02d}" for i in range(11)]
    d = cycle([node("n1", gpus=0, cpu="1"), queue("q"), *one_pod_jobs(names, cpu="100m", memory="1Mi")])
    assert len(d.binds) == 10
    (pending,) = d.unschedulable
    assert pending.pod_group == "c10"


def test_queue_accounting_of_fractions_is_exact() -> None:
    s = session([node("n1", gpus=1), queue("q"), *one_pod_jobs(["x", "y"], fraction="0.1"),
                 *one_pod_jobs(["z"], fraction="0.2")])
    assert s.queues["q"].request[0] == 400_000  # 0.1 + 0.1 + 0.2, not 0.4000000000000001
    assert s.queues["q"].request[1] == 3000


def test_gpu_memory_pod_counts_its_rounded_up_share_until_placed() -> None:
    s = session([node("n1", gpus=1, gpu_memory=40960), queue("q"), *one_pod_jobs(["m"], gpu_memory="10000")])
    mib = s.min_gpu_memory  # the node's device memory as the scheduler reads it from its label
    assert -(-10_000 * GPU // mib) == s.queues["q"].request[0] > 10_000 * GPU / mib  # rounded up, not down


def test_a_fraction_over_the_limit_by_less_than_a_micro_gpu_is_over_the_limit() -> None:
    # The request rounds up to 300,001 micro-GPUs: over a 0.3 limit (a float tolerance used to let it in).
    d = cycle([node("n1", gpus=1), queue("q", gpu=(0.3, 0.3, 1)), *one_pod_jobs(["a"], fraction="0.3000000001")])
    assert not d.binds
    (pending,) = d.unschedulable
    assert "OverLimit" in pending.message
