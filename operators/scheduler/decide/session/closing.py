"""Session close: explanations and annotations turned into decisions."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from operators.core import keys
from operators.scheduler.decide import explain
from operators.scheduler.decide.decisions import AnnotationUpdate, Decisions, NotReady, QueueShare, Unschedulable
from operators.scheduler.decide.model import GATED, PENDING, Job, QueueState, Task
from operators.scheduler.decide.records import UNLIMITED
from operators.scheduler.decide.session.accounting import Accounting, JobOutcome
from operators.scheduler.decide.units import CPU_AXIS, GPU, GPU_AXIS, MB, MEMORY_AXIS

if TYPE_CHECKING:
    from operators.scheduler.decide.session import Session

_PER_MB = 1 / MB  # bytes -> MB as a multiplier: the same float as 1e-6


class Closing(Accounting):
    """Session close: the stale-gang annotation, NotReady / Unschedulable explanations, last-start
    annotations and queue shares."""

    def close(self) -> Decisions:
        d = self.decisions
        for hook in self.framework.session_close:
            hook(cast("Session", self))
        pool = self.config.node_pool_name
        annotations = d.annotations
        now_text = self.now_text
        gang = self.framework.gang
        stale_jobs = gang.stale_jobs(self.jobs)
        lifted = {(u.namespace, u.pod_group) for u in d.ungates}  # quotagates: gated only until their writes land
        for job in self.jobs:
            # The stale-timestamp annotation, and whether the job has pods to explain (alive - active-allocated =
            # Pending + Gated).
            stale = job in stale_jobs
            settled = True
            for p in job.podsets:
                if p.alive != p.active_allocated:
                    settled = False
                    break
            since = job.rec.stale_since
            if stale:
                if since is None:
                    annotations.append(AnnotationUpdate(job.namespace, job.name, keys.STALE_PODGROUP_TIMESTAMP,
                                                        now_text))
            elif since is not None:
                annotations.append(AnnotationUpdate(job.namespace, job.name, keys.STALE_PODGROUP_TIMESTAMP, None))
            if settled:
                continue  # alive - active-allocated = Pending + Gated: nothing to explain (most jobs)
            pending = [t for t in job.tasks if t.status == PENDING]
            gated = any(t.status == GATED for t in job.tasks)
            if not pending and not gated:
                continue
            if not pending and job.key in self.outcomes:  # only gated pods, explained by a plugin (quotagates)
                d.unschedulable.append(self._unschedulable(job, pending, pool))
                continue
            if job.queue is not None and not gang.job_ready(job):
                if lifted and (job.namespace, job.name) in lifted:
                    continue
                d.not_ready.append(NotReady(job.namespace, job.name, gang.not_ready_message(job)))
                continue
            if not pending:
                continue
            d.unschedulable.append(self._unschedulable(job, pending, pool))
        for job_key, stamp in sorted(self.last_start.items()):
            ns, name = job_key.split("/", 1)
            d.annotations.append(AnnotationUpdate(ns, name, keys.LAST_START_TIMESTAMP, stamp))
        d.queues = [self._queue_share(q) for q in sorted(self.queues.values(), key=lambda q: q.name)]
        return d

    def fit_summary(self, task: Task) -> str:
        """Per-node histogram for a task that found no node, on the current (virtual) state.

        Computed once per placement signature and cycle: later failures of identical tasks reuse it, which
        keeps failing gangs cheap at the price of counts that may lag by the nodes filled meanwhile.
        """
        if task.rec.gpu_error:
            return task.rec.gpu_error
        key = task.fit_key
        summary = self._summaries.get(key)
        if summary is None:
            placer = self.placer
            refused = placer.prefilter_reason(task)  # the task's, so the same on every node
            if refused:
                per_node: dict[tuple[str, ...], int] = {(refused,): len(self.nodes)}
            else:
                per_node = self.framework.fit_histogram(placer, task, self.nodes)
            summary = explain.fit_summary_of_histogram(per_node)
            self._summaries[key] = summary
        return summary

    def _unschedulable(self, job: Job, pending: list[Task], pool: str) -> Unschedulable:
        out = self.outcomes.get(job.key) or JobOutcome()
        errors = list(out.errors)
        failure = out.failure
        if failure is not None:
            msg = self.framework.gang.failure_message(failure)
            errors.append(explain.JobError(keys.REASON_POD_SCHEDULING_ERRORS, (msg,)))
        has_allocated = False
        for p in job.podsets:
            if p.active_allocated > 0:
                has_allocated = True
                break
        rec = job.rec
        key = (rec.namespace, rec.name)
        failed = (failure.task.name, failure.summary) if failure is not None else None
        carried, inputs = self.carrying.explanation(key, rec, pending, errors, failed, has_allocated)
        if carried is not None:
            return carried  # the same text from the same inputs (session/carry.py)
        message = explain.job_message(errors)
        backoff = rec.scheduling_backoff
        # explain.pod_message() per pod: the failing task's summary, else the job message (computed once).
        other = explain.with_pool_prefix(explain.pod_message(None, errors) if not errors else message, pool, backoff)
        pod_messages = dict.fromkeys([t.rec.name for t in pending], other)
        if failed is not None and failed[0] in pod_messages:  # the failing task's own message
            pod_messages[failed[0]] = explain.with_pool_prefix(explain.pod_message(failed[1], errors), pool, backoff)
        result = Unschedulable(rec.namespace, rec.name, pool, explain.with_pool_prefix(message, pool, backoff),
                               tuple([e.to_reason() for e in errors]), pod_messages, has_allocated,
                               rec.mark_unschedulable)
        self.carrying.explained(key, inputs, result)
        return result

    def _queue_share(self, q: QueueState) -> QueueShare:
        def vec(v: tuple[int, ...] | list[int]) -> dict[str, float]:
            # Core units (micro-GPUs, millicores, bytes) -> Queue units (GPUs, millicores, MB), 3 decimals.
            def conv(x: int, r: int) -> float:
                if x == UNLIMITED:
                    return -1.0
                return round(x / GPU if r == GPU_AXIS else x * (1.0 if r == CPU_AXIS else _PER_MB), 3)
            gpu, cpu, mem = v
            return {"gpu": conv(gpu, GPU_AXIS), "cpu": conv(cpu, CPU_AXIS), "memory": conv(mem, MEMORY_AXIS)}
        return QueueShare(q.name, vec(q.fair_share), vec(q.allocated), vec(q.request), vec(q.rec.quota),
                          vec(q.rec.limit), q.rec.display_name)
