"""backgroundpods (KAI v0.18, on by default): maintenance pods that give their place up to any workload.

At session open every running pod matching `labelSelector` (default `kai.scheduler/background=true`; `namespaces`,
comma-separated, narrows it) that belongs to a PodGroup is evicted in memory only: its node's capacity shows as
releasing, its queue's allocation and request drop (so fair shares are computed without it), and the actions plan
as if it were gone; a workload that needs the room is pipelined there. At session close each pod, in namespace /
name order, is offered its place back: it stays where the node still has room for it (idle plus releasing: its
own resources are in the releasing part), and only the others are evicted for real (`Evict` event, action
`backgroundpods`). A displacing workload so binds one cycle later, once the pod is gone.
An evicted pod keeps its host ports and its place in the inter-pod affinity index for the session, so nothing
placed meanwhile can conflict with it and putting it back needs no predicate run (KAI re-runs them instead).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import QUEUE_ALLOCATED, NodeState, Task
from operators.scheduler.decide.plugins.backgroundpods.selector import parse_selector
from operators.scheduler.decide.session import Session, Statement
from operators.scheduler.decide.units import GPU

NAME = "backgroundpods"
DEFAULT_SELECTOR = "kai.scheduler/background=true"
EVICTION_MESSAGE = "Evicted to make room for a workload on this node"  # KAI's
KEY_REQUIRED = frozenset({"In", "Exists", "Gt", "Lt"})  # requirement operators no pod without the key matches


class BackgroundPods(Plugin):
    name = NAME
    default_priority = 850  # above proportion: the pods are out before fair shares are computed
    argument_names = frozenset({"labelSelector", "namespaces"})

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        super().__init__(arguments)
        self.selector = parse_selector(str(self.arguments.get("labelSelector") or DEFAULT_SELECTOR))
        raw = str(self.arguments.get("namespaces") or "")
        self.namespaces = frozenset(n.strip() for n in raw.split(",") if n.strip()) or None
        self.statement: Statement | None = None
        self.evicted: list[Task] = []

    @classmethod
    def check_arguments(cls, arguments: Mapping[str, Any]) -> None:
        parse_selector(str(arguments.get("labelSelector") or DEFAULT_SELECTOR))

    def hooks(self) -> Hooks:
        return Hooks(session_open=self, scope=self, session_close=self)

    def on_session_open(self, session: Session) -> None:
        selector, namespaces = self.selector, self.namespaces
        # A pod without a label the selector requires cannot match: with no pod carrying it, nothing is
        # looked at per job (the default selector requires kai.scheduler/background).
        required = next((r.key for r in selector.requirements if r.operator in KEY_REQUIRED), None)
        if required is not None and not session.any_pod(f"label {required}", lambda p: required in p.labels):
            return
        stmt = self.statement = session.statement()
        for job in session.jobs:
            if job.queue is None:
                continue
            for task in job.tasks:
                if task.status not in QUEUE_ALLOCATED or task.node < 0:
                    continue  # holds nothing on a node to give back
                if namespaces is not None and task.namespace not in namespaces:
                    continue
                labels = task.rec.labels
                if (required is not None and required not in labels) or not selector.matches(labels):
                    continue
                stmt.evict(task, NAME, "", EVICTION_MESSAGE)
                _add_request(task, session, -1)
                self.evicted.append(task)

    def in_use(self, session: Session) -> bool:
        return bool(self.evicted)

    def on_session_close(self, session: Session) -> None:
        stmt = self.statement
        if stmt is None:
            return
        for task in sorted(self.evicted, key=lambda t: (t.namespace, t.name)):
            node = session.nodes[task.node]
            if fits_back(node, task):
                stmt.unevict(task)
                _add_request(task, session, +1)
                _settle(node)
        stmt.commit()  # what stays evicted is evicted for real
        self.statement, self.evicted = None, []


def fits_back(node: NodeState, task: Task) -> bool:
    """Room on the pod's own node for it again, after what the session placed there: idle plus releasing (its own
    resources are releasing, and a pipelined pod drew on them first)."""
    rec = task.rec
    if rec.cpu > node.idle_cpu + node.rel_cpu or rec.memory > node.idle_mem + node.rel_mem:
        return False
    if rec.gpu.whole > node.idle_gpu + node.rel_gpu or node.n_pods > node.max_pods:
        return False
    for gid in task.groups:
        g = node.groups.get(gid)
        if g is None or GPU - g.used < task.portion:
            return False
        if g.fully_releasing and node.idle_gpu + node.rel_gpu < 1:
            return False  # the whole device it shared went to a whole-GPU pod
    return True


def _settle(node: NodeState) -> None:
    """A pod put back may have drawn more from `releasing` than is left there: take the rest from idle (the free
    sum is what it is)."""
    if node.rel_cpu < 0:
        node.idle_cpu, node.rel_cpu = node.idle_cpu + node.rel_cpu, 0
    if node.rel_mem < 0:
        node.idle_mem, node.rel_mem = node.idle_mem + node.rel_mem, 0
    if node.rel_gpu < 0:
        node.idle_gpu, node.rel_gpu = node.idle_gpu + node.rel_gpu, 0


def _add_request(task: Task, session: Session, sign: int) -> None:
    """The pod leaves (or rejoins) its queues' request, which fair shares are computed from."""
    assert task.job is not None and task.job.queue is not None
    session.add_up_lineage(task.job.queue, "request", session.task_vector(task), sign)


PLUGIN = BackgroundPods
