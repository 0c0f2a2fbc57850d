"""subgroups: the gang rules of PodGroups with elastic SubGroup trees (`minSubGroup`).

A level (the PodGroup, or a SubGroup with children) is satisfied when `minSubGroup` of its direct children meet
their own minimum (a leaf: `minMember` pods); without `minSubGroup` a level needs all its children, which is the
flat gang of the `gang` plugin. For a PodGroup that sets `minSubGroup` anywhere, the session opens with each leaf's
minimum set to what the cheapest way to satisfy every level asks of it (`subgroup_tree.plan`: the leaves already
satisfied first, then those closest to their minimum, ties in spec order): a chosen leaf keeps its `minMember`,
any other leaf gets 0. The flat per-leaf rules (readiness, gang core, elastic state, victims above the minimum,
staleness) then hold exactly for the tree. Beyond the minimum the job grows: a leaf below its own `minMember` one
whole leaf at a time (its pods all or none), a leaf at its minimum one pod at a time. Explanations name the level
that is short.

PodGroups without `minSubGroup` keep the `gang` plugin's behaviour unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.model import SUCCEEDED, Job, PodSet, Task
from operators.scheduler.decide.ordering import tasks_to_allocate as flat_tasks_to_allocate
from operators.scheduler.decide.plugins.gang.plugin import Gang
from operators.scheduler.decide.plugins.subgroups.tree import SubGroupTree, build_tree
from operators.scheduler.decide.session import FailedAttempt, Session

UNFIT_COST = 1000.0
MAX_CHOICES = 8  # leaf choices tried per failed gang attempt (the first included)


def has_min_sub_group(job: Job) -> bool:
    rec = job.rec
    return rec.min_sub_group is not None or any(s.min_sub_group is not None for s in rec.subgroups)


class SubGroups(Plugin):
    name = "subgroups"
    default_priority = 510  # above `gang`: the first plugin with the gang hooks decides all of them
    required = False

    def hooks(self) -> Hooks:
        return Hooks(session_open=self, scope=self, gang=self, gang_choices=self)

    def __init__(self, arguments: dict[str, object] | None = None) -> None:
        super().__init__(arguments)
        self.trees: dict[Job, SubGroupTree] = {}
        self.leaf_min: dict[PodSet, int] = {}  # each leaf's own minMember (its PodSet carries the effective one)

    # --- session ---------------------------------------------------------------------------------------

    def on_session_open(self, session: Session) -> None:
        for job in session.feature_jobs:
            if job.rec.subgroups and has_min_sub_group(job):
                tree = build_tree(job.rec.subgroups, job.rec.min_member, job.rec.min_sub_group)
                self.trees[job] = tree
                self._set_minimums(session, job, tree)

    def in_use(self, session: Session) -> bool:
        """Some PodGroup sets `minSubGroup`; otherwise this plugin's rules are the `gang` plugin's, which then
        decides in its place (when it is the next plugin with the gang rules)."""
        if self.trees:
            return True
        fw = session.framework
        if fw.gang is not self:
            return False
        following = [p for p in fw.plugins if p is not self and callable(getattr(p, "tasks_to_allocate", None))]
        return not following or type(following[0]) is not Gang

    def _set_minimums(self, session: Session, job: Job, tree: SubGroupTree) -> None:
        podsets = {p.name: p for p in job.podsets}
        plan = tree.plan(*self._inputs(session, job, tree))
        for name, p in podsets.items():
            node = tree.nodes.get(name)
            own = node.min_member if node is not None else p.min_available
            self.leaf_min[p] = own
            # Not satisfiable with the pods that exist: every leaf keeps its minimum (the job is not ready).
            p.min_available = own if (not plan.feasible or name in plan.missing) else 0

    def _inputs(self, session: Session, job: Job, tree: SubGroupTree
                ) -> tuple[dict[str, int], dict[str, int], dict[str, float]]:
        """(pods that count, pods that could still be added, cost of one more pod) per leaf, for planning."""
        podsets = {p.name: p for p in job.podsets}
        counts = {name: p.active_allocated for name, p in podsets.items()}
        available = {name: max(0, p.alive - p.gated - p.active_allocated) for name, p in podsets.items()}
        costs = {name: _pod_cost(p) for name, p in podsets.items()}
        if not tree.satisfied(counts):
            # Not started yet: a leaf whose next pod fits no node as the cluster is now is chosen last.
            for name, p in podsets.items():
                if p.pending and p.active_allocated < tree.nodes[name].min_member and session.placer.find(
                        p.pending[0]) is None:
                    costs[name] *= UNFIT_COST
        return counts, available, costs

    def gang_choices(self, session: Session, job: Job) -> Iterator[None] | None:
        """Other choices of the leaves that meet the tree's minimum, for a gang attempt that failed with the
        first: each step sets the leaves' minimums to the next choice (cheapest first); when none is left, the
        first choice is restored. None: nothing to re-choose (no tree, or the job only grows)."""
        tree = self.trees.get(job)
        if tree is None or not any(p.pending and p.active_allocated < p.min_available for p in job.podsets):
            return None
        return self._choices(session, job, tree)

    def _choices(self, session: Session, job: Job, tree: SubGroupTree) -> Iterator[None]:
        first = [p.min_available for p in job.podsets]
        seen = {tuple(first)}
        for plan in tree.plans(*self._inputs(session, job, tree), limit=MAX_CHOICES):
            choice = [self.leaf_min.get(p, p.min_available) if p.name in plan.missing else 0 for p in job.podsets]
            if tuple(choice) in seen:
                continue
            seen.add(tuple(choice))
            for p, minimum in zip(job.podsets, choice, strict=True):
                p.min_available = minimum
            yield
        for p, minimum in zip(job.podsets, first, strict=True):
            p.min_available = minimum

    # --- gang hooks (the gang plugin's own for PodGroups without minSubGroup) --------------------------

    attempt_state = staticmethod(Gang.attempt_state)
    failure = staticmethod(Gang.failure)

    def tasks_to_allocate(self, job: Job) -> list[Task]:
        if job not in self.trees or any(p.pending and p.active_allocated < p.min_available for p in job.podsets):
            return flat_tasks_to_allocate(job)  # the gang core: every chosen leaf up to its minMember
        # Growth: complete the leaf closest to its own minimum (all its missing pods at once), else one more pod of
        # the leaf least above its minimum.
        best: tuple[tuple[object, ...], PodSet, int] | None = None
        for index, p in enumerate(job.podsets):
            if not p.pending:
                continue
            own = self.leaf_min.get(p, p.min_available)
            short = own - p.active_allocated
            if short > len(p.pending):
                continue  # the leaf cannot reach its minimum with the pods that exist
            key = (0, short, index) if short > 0 else (1, p.active_allocated / max(own, 1), index)
            if best is None or key < best[0]:
                best = (key, p, max(short, 1))
        return [] if best is None else best[1].pending[:best[2]]

    def job_ready(self, job: Job) -> bool:
        tree = self.trees.get(job)
        if tree is None:
            return Gang.job_ready(job)
        return tree.satisfied({p.name: p.alive - p.gated for p in job.podsets})

    def ready_jobs(self, jobs: Iterable[Job]) -> list[Job]:
        return [job for job in jobs if self.job_ready(job)]

    def stale_jobs(self, jobs: Iterable[Job]) -> set[Job]:
        return {job for job in jobs if self.is_stale(job)}

    def is_stale(self, job: Job) -> bool:
        tree = self.trees.get(job)
        if tree is None:
            return Gang.is_stale(job)
        if any(t.status == SUCCEEDED for t in job.tasks) or not any(p.active_used for p in job.podsets):
            return False
        return not tree.satisfied({p.name: p.active_used for p in job.podsets})

    def not_ready_message(self, job: Job) -> str:
        tree = self.trees.get(job)
        if tree is None:
            return Gang.not_ready_message(job)
        alive = {p.name: p.alive - p.gated for p in job.podsets}
        gated = sum(p.gated for p in job.podsets)
        suffix = f" ({gated} pods are gated)" if gated else ""
        return f"Job is not ready for scheduling: {tree.explain(alive, what='exist')}{suffix}."

    def failure_message(self, failure: FailedAttempt) -> str:
        message = Gang.failure_message(failure)
        job = failure.task.job
        tree = self.trees.get(job) if job is not None else None
        if tree is None or job is None:
            return message
        allocated = {p.name: p.active_allocated for p in job.podsets}
        if tree.satisfied(allocated):
            root = tree.root
            return (f"{message} The PodGroup's minimum is met ({tree.satisfied_children(allocated, '')} of its "
                    f"{len(root.children)} child SubGroups, {root.need} required); its other pods start when "
                    "resources free up")
        return f"{message} Not yet started: {tree.explain(allocated)}"

    def stale_message(self, job: Job) -> str:
        tree = self.trees.get(job)
        if tree is None:
            return Gang.stale_message(job)
        used = {p.name: p.active_used for p in job.podsets}
        return f"Job is stale. {sum(used.values())} pods are active: {tree.explain(used, what='active')}"


def _pod_cost(podset: PodSet) -> float:
    """What one more pod of the leaf costs when choosing children: 1, plus its GPUs (cheaper leaves first)."""
    task = podset.pending[0] if podset.pending else (podset.tasks[0] if podset.tasks else None)
    if task is None:
        return 1.0
    gpu = task.rec.gpu
    return 1.0 + (gpu.num_devices * (gpu.portion or 0.5) if gpu.is_shared else float(gpu.whole))


PLUGIN = SubGroups
