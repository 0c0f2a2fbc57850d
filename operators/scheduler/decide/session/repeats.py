"""Allocate attempts that provably repeat: a failed attempt's outcome is carried to the next cycle and replayed
instead of the attempt when nothing the attempt reads has changed (issue 26, steady-state cycles).

The rule. An allocate attempt is a deterministic function of the session's state at the moment it runs, of the job
and of the config; it reads no clock (`now` reaches only job gates, victim rules and time stamps, never the node
search, the capacity check or the gang rule). The state at session open is a function of the snapshot and the
config, and a failed attempt is rolled back whole, so until the cycle's first commit every attempt runs on the
state at open ("clean"). The caches an attempt leaves behind (the fit summaries of failing shapes, the placer's
failed-shape memory) hold values of the clean state, and by induction hold the same entries at the same point of
two cycles whose clean-phase attempts are the same jobs in the same order. Hence: when this cycle's snapshot and
config are equal to the previous cycle's (records compared by identity first, then by value), the k-th attempt of
this cycle's clean phase is the previous cycle's k-th, and that attempt failed, it fails again with the same
outcome. Replaying it reproduces everything it left: the job's outcome entry (errors, failure explanation with
its failing task mapped to this session's task at the same position), the fit summaries it computed (in order)
and the shapes it added to the placer's failed memory. The first commit, a different job at some position (a
now-dependent gate, a job that fitted), another snapshot or another config ends replaying for the cycle.

The whole action: when the previous cycle's allocate ran clean to its end (nothing committed, every attempt
replayable) and this cycle's is given the same jobs to try (the gated candidates, by key, in order), its job tree
would pop the same jobs in the same order (the order is a function of the state and the jobs), so the whole action
is the previous one's attempts replayed in order, without building the tree or popping it.

The disruptive searches (reclaim, preempt, consolidation), a whole action at a time: an action that starts before
the cycle's first commit runs on the state at open, and is a deterministic function of that state, the config, the
jobs it is given (gated, by key, in order) and its answers to "is this victim still protected by its minimum
runtime" (`last start + min runtime > now`, the only clock it reads). When the previous cycle's run of the action
started clean and committed nothing, this cycle's starts clean on an equal snapshot and config with the same jobs,
no deadline it compared against lies between the two cycles' `now` (so every answer is the same) and the placer's
failed-shape memory is the same, the action takes the same path to the same end: what it left (the failed-shape
memory, the fit summaries it computed, its metric counters and its search outcomes) is reproduced instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import TYPE_CHECKING

from operators.scheduler.decide.explain import JobError
from operators.scheduler.decide.model import Job
from operators.scheduler.decide.snapshot import Snapshot

if TYPE_CHECKING:
    from operators.scheduler.decide.session.accounting import Accounting

Shape = tuple[object, ...]  # a task's fit_key


@dataclass(frozen=True, slots=True)
class Replay:
    """What one failed clean-phase attempt left behind (see the module doc). `failure` is the FailedAttempt's
    fields with its task as an index into the job's tasks: (index, found, required, subgroup, gang, summary)."""

    outcome: bool  # the attempt left an outcome entry (an attempt with no pods to try leaves none)
    errors: tuple[JobError, ...]
    failure: tuple[int, int, int, str | None, bool, str] | None
    summaries: tuple[tuple[Shape, str], ...]
    failed_shapes: tuple[Shape, ...]


@dataclass(frozen=True, slots=True)
class ActionRun:
    """A disruptive action's run that committed nothing (see the module doc): its inputs beside the state (jobs,
    `now` and the protection deadlines it compared against it, the failed-shape memory at its start) and what it
    left (the failed-shape memory at its end, fit summaries added, counter increments, search outcomes)."""

    jobs: tuple[str, ...]
    now: float
    deadlines: tuple[float, ...]
    failed_before: frozenset[Shape]
    failed_after: frozenset[Shape]
    summaries: tuple[tuple[Shape, str], ...]
    counters: tuple[tuple[str, int], ...]
    search_outcomes: tuple[tuple[str, str, bool], ...]


@dataclass(slots=True)
class ActionWatch:
    """A disruptive action being watched: what the session held at its start."""

    action: str
    jobs: tuple[str, ...]
    failed: frozenset[Shape]
    summaries: int
    counters: dict[str, int]
    search_outcomes: int


@dataclass(frozen=True, slots=True)
class Repeats:
    """A cycle's clean-phase failed attempts, in order (job key, its replay or None when it left something a replay
    cannot reproduce), and the snapshot they ran on."""

    snapshot: Snapshot
    attempts: tuple[tuple[str, Replay | None], ...]
    jobs: tuple[str, ...] | None  # the jobs allocate was given, when it ran clean to its end; else None
    runs: tuple[tuple[str, ActionRun], ...] = ()  # per disruptive action that committed nothing


@dataclass(slots=True)
class Watch:
    """One attempt being watched: what the session held before it."""

    had_outcome: bool
    summaries: int
    failed: int
    missing: list[Shape]


@dataclass(slots=True)
class Repeating:
    """A session's side: replays the previous cycle's attempts while the rule holds, records this cycle's."""

    previous: Repeats | None = None  # for allocate's replays: dropped once they stop
    runs_from: Repeats | None = None  # the previous cycle's, kept for the disruptive actions
    snapshot: Snapshot | None = None  # this cycle's, once allocate began
    attempts: list[tuple[str, Replay | None]] = field(default_factory=list)
    jobs: tuple[str, ...] | None = None
    runs: dict[str, ActionRun] = field(default_factory=dict)
    replayed: int = 0
    replayed_actions: int = 0
    clean: bool = False
    deadlines: list[float] | None = None  # while a disruptive action is watched: the deadlines it compared
    _same: bool | None = None  # the snapshot equals the previous cycle's (computed once)
    _position: int = 0  # the previous cycle's attempt this cycle's next clean-phase attempt must be

    def begin(self, session: Accounting, jobs: Sequence[Job]) -> bool:
        """At allocate's start, given the jobs it tries: the phase is clean while no statement was committed in
        the session yet. True when the whole action was replayed (see the module doc): nothing is left to do."""
        if self.snapshot is not None:  # allocate runs a second time in this cycle: only the first one replays
            self.clean, self.previous, self.jobs = False, None, None
            return False
        self.snapshot = session.snapshot
        self.clean = _clean(session)
        prev = self.previous
        if prev is not None and not (self.clean and self.same_snapshot(session)):
            self.previous = prev = None
        if not self.clean:
            return False
        keys = self.jobs = tuple([j.key for j in jobs])
        if prev is None or prev.jobs != keys:
            return False
        by_key = {j.key: j for j in jobs}
        for key, entry in prev.attempts:
            assert entry is not None, "a complete run records a replay for every attempt"
            self._apply(session, by_key[key], entry)
        self.attempts = list(prev.attempts)
        self.replayed += len(prev.attempts)
        return True

    def same_snapshot(self, session: Accounting) -> bool:
        """This cycle's snapshot equals the previous cycle's (compared once: identity first, then value)."""
        if self._same is None:
            prev = self.runs_from
            self._same = prev is not None and (prev.snapshot is session.snapshot or prev.snapshot == session.snapshot)
        return self._same

    def end(self) -> None:
        """At allocate's end: the action ran clean to its end with every attempt replayable, or not (no `jobs`)."""
        if not self.clean or any(entry is None for _, entry in self.attempts):
            self.jobs = None

    def committed(self) -> None:
        self.clean = False
        self.previous = None
        self.jobs = None

    def run_action(self, session: Accounting, action: str, jobs: Sequence[Job], search: Callable[[], None]) -> None:
        """A disruptive action's search over `jobs`: replayed when its previous run provably repeats, else run
        (and recorded when it commits nothing)."""
        if self.replay_action(session, action, jobs):
            return
        watch = self.watch_action(session, action, jobs)
        search()
        self.action_done(session, watch)

    def replay_action(self, session: Accounting, action: str, jobs: Sequence[Job]) -> bool:
        """At a disruptive action's start, given the jobs it tries: True when its previous run was reproduced
        (see the module doc) and nothing is left to do."""
        self.snapshot = session.snapshot
        prev = self.runs_from
        if prev is None or not _clean(session) or not self.same_snapshot(session):
            return False
        run = dict(prev.runs).get(action)
        if run is None or run.jobs != tuple([j.key for j in jobs]):
            return False
        low, high = sorted((run.now, session.now))
        if any(low < t <= high for t in run.deadlines):
            return False  # some victim's protection ran out (or began) in between
        failed = session.placer.failed
        if failed != run.failed_before:
            return False
        failed.clear()
        failed.update(run.failed_after)
        summaries = session._summaries
        for key, text in run.summaries:
            summaries[key] = text
        counters = session.decisions.counters
        for name, n in run.counters:
            counters[name] = counters.get(name, 0) + n
        session.decisions.search_outcomes.extend(run.search_outcomes)
        # The answers at this `now` are those at the previous one: the run holds from here on.
        self.runs[action] = replace(run, now=session.now)
        self.replayed_actions += 1
        return True

    def watch_action(self, session: Accounting, action: str, jobs: Sequence[Job]) -> ActionWatch | None:
        """Before running a disruptive action: what a replay of it needs (None when it starts after a commit)."""
        self.snapshot = session.snapshot
        if not _clean(session):
            return None
        self.deadlines = []
        d = session.decisions
        return ActionWatch(action, tuple([j.key for j in jobs]), frozenset(session.placer.failed),
                           len(session._summaries), dict(d.counters), len(d.search_outcomes))

    def action_done(self, session: Accounting, seen: ActionWatch | None) -> None:
        """After a disruptive action ran: record it when it committed nothing."""
        deadlines, self.deadlines = self.deadlines, None
        if seen is None or deadlines is None or not _clean(session):
            return
        d = session.decisions
        new = _added_since(session._summaries, seen.summaries)
        counters = tuple((k, n - seen.counters.get(k, 0)) for k, n in d.counters.items()
                         if n != seen.counters.get(k, 0))
        self.runs[seen.action] = ActionRun(seen.jobs, session.now, tuple(sorted(set(deadlines))), seen.failed,
                                           frozenset(session.placer.failed), new, counters,
                                           tuple(d.search_outcomes[seen.search_outcomes:]))

    def deadline(self, at: float) -> None:
        """A victim's protection was compared with `now`: it ends at `at` (recorded while an action is watched)."""
        if self.deadlines is not None:
            self.deadlines.append(at)

    def replay(self, session: Accounting, job: Job) -> bool:
        """Reproduce `job`'s attempt if it is the previous cycle's next one and that failed; False: run it."""
        prev = self.previous
        if prev is None:
            return False
        attempts = prev.attempts
        pos = self._position
        if pos >= len(attempts) or attempts[pos][0] != job.key:
            self.previous = None  # another sequence of attempts: the caches may differ from here on
            return False
        self._position = pos + 1
        entry = attempts[pos][1]
        if entry is None or job.key in session.outcomes:
            return False  # run it: it leaves the same caches as it did last cycle
        self._apply(session, job, entry)
        self.attempts.append((job.key, entry))
        self.replayed += 1
        return True

    @staticmethod
    def _apply(session: Accounting, job: Job, entry: Replay) -> None:
        """What the attempt left behind, reproduced."""
        if entry.outcome:
            out = session.outcome(job)
            out.errors.extend(entry.errors)
            if entry.failure is not None:
                # Imported here: accounting imports the carry, which imports this module.
                from operators.scheduler.decide.session.accounting import FailedAttempt

                index, found, required, subgroup, gang, summary = entry.failure
                out.failure = FailedAttempt(job.tasks[index], found, required, subgroup, gang, summary)
        summaries = session._summaries
        for key, text in entry.summaries:
            summaries[key] = text
        session.placer.failed.update(entry.failed_shapes)

    def watch(self, session: Accounting, job: Job) -> Watch | None:
        """Before a clean-phase attempt: what a replay of it will need (None outside the clean phase)."""
        if not self.clean:
            return None
        failed = session.placer.failed
        return Watch(job.key in session.outcomes, len(session._summaries), len(failed),
                     [k for k in {t.fit_key for t in job.tasks} if k not in failed])

    def failed(self, session: Accounting, job: Job, seen: Watch | None) -> None:
        """After a failed clean-phase attempt (rolled back): record what it left, or None when a replay could not
        reproduce it (an outcome entry before it, a failing task outside the job, shapes added for other tasks)."""
        if seen is None:
            return
        self.attempts.append((job.key, _replay(session, job, seen)))


def _clean(session: Accounting) -> bool:
    """Nothing committed in the session yet (every commit adds a bind, a pipeline or an eviction)."""
    d = session.decisions
    return not (d.binds or d.pipelined or d.evictions)


def _replay(session: Accounting, job: Job, seen: Watch) -> Replay | None:
    if seen.had_outcome:
        return None  # the outcome already held something: a replay would have to tell apart what it added
    out = session.outcomes.get(job.key)
    failure = None
    if out is not None and out.failure is not None:
        f = out.failure
        index = _index(job.tasks, f.task)
        if index is None:
            return None
        failure = (index, f.found, f.required, f.subgroup, f.gang, f.summary)
    new = _added_since(session._summaries, seen.summaries)
    failed = session.placer.failed
    shapes = tuple(k for k in seen.missing if k in failed)
    if len(failed) - seen.failed != len(shapes):
        return None
    return Replay(out is not None, tuple(out.errors) if out is not None else (), failure, new, shapes)


def _added_since(summaries: dict[Shape, str], count: int) -> tuple[tuple[Shape, str], ...]:
    """The entries added to the fit summaries since they held `count` (dicts keep insertion order: the last ones)."""
    added = len(summaries) - count
    return tuple(reversed(list(islice(reversed(summaries.items()), added)))) if added > 0 else ()


def _index(tasks: Sequence[object], task: object) -> int | None:
    for i, t in enumerate(tasks):
        if t is task:
            return i
    return None
