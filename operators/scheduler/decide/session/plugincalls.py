"""The session's calls into the plugins (capacity, gates, node subsets, job order)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from operators.scheduler.decide import explain
from operators.scheduler.decide.model import Job, QueueState, Task
from operators.scheduler.decide.ordering import JobTree
from operators.scheduler.decide.session.accounting import Accounting

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session


class PluginCalls(Accounting):
    """Where the session calls the plugins: capacity checks, job gates, node subsets, the job tree's orders."""

    def capacity_error(self, job: Job, tasks: Iterable[Task],
                       freed: dict[QueueState, list[int]] | None = None) -> explain.JobError | None:
        """The first capacity error of the enabled capacity plugins (proportion: OverLimit and
        NonPreemptibleOverQuota), or None. `freed`: per queue, what victims could still release under it."""
        checks = self.framework.capacity
        session: Session = self  # type: ignore[assignment]  # (a mixin of Session; no cast() call per job)
        if len(checks) == 1:  # the common case (proportion alone): one direct call
            return checks[0](session, job, tasks, freed)
        for check in checks:
            error = check(session, job, tasks, freed)
            if error is not None:
                return error
        return None

    def may_try(self, job: Job, action: str) -> bool:
        """Every job gate lets `action` try `job` now."""
        session = cast("Session", self)
        return all(gate(session, job, action) for gate in self.framework.job_gates)

    def gate_jobs(self, jobs: list[Job], action: str) -> list[Job]:
        """`jobs` that `action` may try (the list itself when no plugin gates jobs)."""
        gates = self.framework.job_gates
        if not gates:
            return jobs
        session = cast("Session", self)
        if len(gates) == 1:  # the common case (preemptiondelay): one call per job, no generator
            gate = gates[0]
            return [j for j in jobs if gate(session, j, action)]
        return [j for j in jobs if self.may_try(j, action)]

    def node_subsets(self, job: Job) -> list[Iterable[int]] | None:
        """Node subsets to try the job's attempt in, in order; None: all nodes (no plugin restricts it)."""
        for hook in self.framework.node_subsets:
            subsets = hook(cast("Session", self), job)
            if subsets is not None:
                return list(subsets)
        return None

    def job_tree(self, jobs: Iterable[Job], action: str) -> JobTree:
        """The action's job tree: queue and job order of the enabled plugins, `queueDepthPerAction`."""
        fw = self.framework
        return JobTree(jobs, fw.gang.tasks_to_allocate, self.job_request,
                       self.config.queue_depth_per_action.get(action), job_key=fw.job_order_key,
                       facts=fw.queue_facts, before=fw.queue_before)
