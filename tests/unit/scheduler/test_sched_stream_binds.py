"""The allocate action's bind stream: each committed job's binds reach the callback as soon as it commits."""

from __future__ import annotations

from sched_builders import PRIORITY_CLASSES, gang, node, pod, podgroup, queue

from operators.scheduler.decide.actions.allocate import Allocate
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_cycle
from operators.scheduler.decide.decisions import Bind
from operators.scheduler.decide.session import Session
from operators.scheduler.decide.snapshot import snapshot_from_objects

T1 = "2025-01-01T00:00:01Z"
T2 = "2025-01-01T00:00:02Z"
T3 = "2025-01-01T00:00:03Z"


def objects() -> list[dict[str, object]]:
    """a-big (3 x 3 GPUs) places two pods and is rolled back; b-small and c-pair bind; d-pipe is pipelined onto a
    releasing GPU (a gang never starts half-bound); e-elastic binds one pod per commit."""
    return [node("n1", gpus=4), node("n2", gpus=4), node("n3", gpus=1), node("n4", gpus=1),
            queue("q"), *PRIORITY_CLASSES,
            *gang("a-big", 3, gpus=3),
            podgroup("b-small", created=T1), pod("small", "b-small", gpus=4),
            podgroup("c-pair", min_member=2, created=T2), pod("pair-0", "c-pair", gpus=2),
            pod("pair-1", "c-pair", gpus=2),
            podgroup("old"), pod("leaving", "old", gpus=1, node_name="n3", phase="Running", deleting=True),
            podgroup("d-pipe", min_member=2, created=T3), pod("pipe-0", "d-pipe", gpus=1),
            pod("pipe-1", "d-pipe", gpus=1),
            podgroup("e-elastic", min_member=1, created="2025-01-01T00:00:04Z"), pod("el-0", "e-elastic"),
            pod("el-1", "e-elastic")]


def test_the_callback_sees_exactly_the_committed_binds_in_commit_order() -> None:
    snapshot = snapshot_from_objects(objects())
    seen: list[Bind] = []
    streamed = run_cycle(snapshot, SchedulerConfig(), 1e9, on_bind=seen.append)
    assert seen == streamed.binds  # the same binds, in the same (commit) order
    assert {b.pod for b in seen} == {"small", "pair-0", "pair-1", "el-0", "el-1"}
    assert not {b.pod for b in seen} & {"a-big-0", "a-big-1", "a-big-2"}  # tried, rolled back
    assert {p.pod for p in streamed.pipelined} == {"pipe-0", "pipe-1"}  # pipelined: not binds
    # A job's binds arrive together, jobs in the order they committed (elastic growth: one pod per commit).
    assert [b.pod_group for b in seen] == ["b-small", "c-pair", "c-pair", "e-elastic", "e-elastic"]


def test_the_callback_changes_no_decision() -> None:
    snapshot = snapshot_from_objects(objects())
    plain = run_cycle(snapshot, SchedulerConfig(), 1e9)
    streamed = run_cycle(snapshot, SchedulerConfig(), 1e9, on_bind=lambda b: None)
    assert streamed.to_dict() == plain.to_dict()


def test_binds_of_later_actions_are_not_streamed() -> None:
    snapshot = snapshot_from_objects(objects())
    seen: list[Bind] = []
    d = run_cycle(snapshot, SchedulerConfig(), 1e9, actions=["consolidation"], on_bind=seen.append)
    assert seen == [] and d.binds == []


def test_each_job_is_streamed_when_it_commits_before_the_next_job_is_tried() -> None:
    session = Session(snapshot_from_objects(objects()), SchedulerConfig(), 1e9)
    calls: list[tuple[Bind, list[Bind]]] = []
    action = Allocate()
    action.on_bind = lambda bind: calls.append((bind, list(session.decisions.binds)))
    action.execute(session)
    assert calls
    for bind, committed in calls:
        # Already a decision, and the newest decisions are its own job's: nothing of a later job yet.
        assert bind in committed and committed[-1].pod_group == bind.pod_group
