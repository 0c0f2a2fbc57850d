"""resizeeviction (KAI v0.18, off by default): evict pods so that deferred in-place resizes can happen.

A running pod whose `PodResizePending` condition says Deferred asks its node for more than it holds (its record's
cpu / memory are the resize's target, `resize_from` what it holds). Pods are taken in job priority order (higher
first, then age): the node is short of what the resize adds once the targets of the other deferred resizes not
yet enacted are left out (idle plus releasing resources count as free); a resize that fits is left to the kubelet.
For one that does not, victims on that node are taken from preemptible jobs of lower priority in the same queue,
or, while the resizing pod's queue is within its fair share, from other queues above theirs: lowest priority and
newest job first, a gang whole; nothing is evicted when they cannot cover the shortfall.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from operators.core import keys
from operators.scheduler.decide.model import VICTIM_STATUSES, Job, NodeState, QueueState, Task

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session


class ResizeEviction:
    name = "resizeeviction"
    enabled = True

    def execute(self, session: Session) -> None:
        waiting = {t: _delta(t) for job in session.jobs for t in job.tasks
                   if t.rec.resize_from is not None and t.node >= 0 and t.status in VICTIM_STATUSES}
        order = sorted(waiting, key=lambda t: (-_priority(t), t.rec.created, t.namespace, t.name))
        for task in order:
            delta = waiting.pop(task)
            node = session.nodes[task.node]
            others = [d for t, d in waiting.items() if t.node == task.node]
            short = (-(node.idle_cpu + node.rel_cpu + sum(cpu for cpu, _ in others)),
                     -(node.idle_mem + node.rel_mem + sum(mem for _, mem in others)))
            if short[0] <= 0 and short[1] <= 0:
                continue  # enactable: the kubelet will resize it
            victims = _victims(session, task, node, short)
            if victims is None:
                waiting[task] = delta  # still not enacted: later resizes leave its target out too
                continue
            assert task.job is not None
            stmt = session.statement()
            for victim in victims:
                stmt.evict(victim, self.name, task.job.key,
                           f"Pod {victim.namespace}/{victim.name} was evicted so that the deferred resize of pod "
                           f"{task.namespace}/{task.name} on node {node.name} can happen.")
            stmt.commit()


def _delta(task: Task) -> tuple[int, int]:
    """(cpu, memory) the resize adds to what the kubelet gave the pod."""
    assert task.rec.resize_from is not None
    given_cpu, given_mem = task.rec.resize_from
    return max(0, task.rec.cpu - given_cpu), max(0, task.rec.memory - given_mem)


def _priority(task: Task) -> int:
    return task.job.priority if task.job is not None else 0


def _over(queue: QueueState) -> bool:
    return any(a > f for a, f in zip(queue.allocated, queue.fair_share, strict=True))


def _eligible(resizer: Job, victim: Job) -> bool:
    if victim is resizer or not victim.preemptible or victim.queue is None or resizer.queue is None:
        return False
    if victim.rec.preemptibility == keys.SEMI_PREEMPTIBLE:
        return False  # its core is never a victim; its surplus is left to reclaim and preempt
    if victim.queue is resizer.queue:
        return victim.priority < resizer.priority
    return not _over(resizer.queue) and _over(victim.queue)


def _victims(session: Session, task: Task, node: NodeState, short: tuple[int, int]) -> list[Task] | None:
    resizer = task.job
    assert resizer is not None
    jobs: dict[Job, None] = {}
    for job in session.jobs:
        if any(t.node == node.idx and t.status in VICTIM_STATUSES for t in job.tasks) and _eligible(resizer, job):
            jobs[job] = None
    chosen: list[Task] = []
    short_cpu, short_mem = short
    freed_cpu = freed_mem = 0
    for job in sorted(jobs, key=lambda j: (j.priority, -j.rec.created, j.namespace, j.name)):
        if freed_cpu >= short_cpu and freed_mem >= short_mem:
            break
        for t in job.tasks:
            if t.status in VICTIM_STATUSES and t.node >= 0:
                chosen.append(t)  # a gang goes whole
                if t.node == node.idx:
                    freed_cpu += t.rec.cpu
                    freed_mem += t.rec.memory
    return chosen if freed_cpu >= short_cpu and freed_mem >= short_mem else None
