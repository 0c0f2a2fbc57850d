"""Topology domains: which node sets a topology-constrained gang may be placed in, best first. Pure.

A Topology lists node-label levels from the coarsest (index 0, e.g. a zone) to the finest. A domain of level i is
the set of nodes that share the values of the labels of levels 0..i (so rack `r1` of zone `a` and rack `r1` of zone
`b` are different domains); a node lacking one of those labels is in no domain of level i or of any finer level.
Workloads name a level by its node label or by its alias.

Candidate order for a gang asking for `request` (its pods' summed requests):
- required level only: the domains of that level whose free resources cover the request, fullest first
  (bin-packing: the least free GPUs, then CPU, then memory; ties by domain id);
- preferred level: the fitting domains of the preferred level (fullest first), then those of each coarser level up
  to the required level, or, without a required level, up to the coarsest level and then the whole cluster;
- a job that already has pods placed (and a required level) may only use domains holding all of them.
When no domain can be a candidate the plan carries an explanation naming the level and what the best domain
lacks. A constraint naming a Topology or a level that does not exist is a `ConstraintError` with a message
that says what to fix; the job stays pending with it.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from operators.scheduler.decide.explain import humanize
from operators.scheduler.decide.records import TopologyConstraintSpec, TopologyRecord
from operators.scheduler.decide.units import GB, GPU, MILLI, to_gpus


class Resources(NamedTuple):
    """Micro-GPUs, CPU (millicores) and memory (bytes), the scheduler core's integer units (a tuple: cheap to
    make)."""

    gpu: int = 0
    cpu: int = 0
    memory: int = 0

    def covers(self, need: Resources) -> bool:
        return self.gpu >= need.gpu and self.cpu >= need.cpu and self.memory >= need.memory

    def lacking(self, need: Resources) -> Resources:
        """What `need` asks beyond these resources (zero where they suffice)."""
        return Resources(max(need.gpu - self.gpu, 0), max(need.cpu - self.cpu, 0),
                         max(need.memory - self.memory, 0))

    def describe(self) -> str:
        """`2 GPUs, 0.5 CPU cores, 1.5 GB memory`, naming only what is non-zero ("nothing" when all are)."""
        parts = []
        if self.gpu > 0:
            parts.append(f"{humanize(to_gpus(self.gpu))} GPU{'' if self.gpu == GPU else 's'}")
        if self.cpu > 0:
            parts.append(f"{humanize(self.cpu / MILLI)} CPU core{'' if self.cpu == MILLI else 's'}")
        if self.memory > 0:
            parts.append(f"{humanize(self.memory / GB)} GB memory")
        return ", ".join(parts) or "nothing"

    def order_key(self) -> tuple[int, int, int]:
        return self.gpu, self.cpu, self.memory


NONE = Resources()


class ConstraintError(ValueError):
    """A topology constraint that cannot be resolved (unknown Topology or level); the message says what to fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def level_label(topology: TopologyRecord, index: int) -> str:
    """How messages name a level: its alias, else its node label."""
    label, alias = topology.levels[index]
    return alias or label


def level_index(topology: TopologyRecord, name: str) -> int | None:
    """The index of the level named `name` (its node label or its alias), or None."""
    for i, (label, alias) in enumerate(topology.levels):
        if name == label or (alias and name == alias):
            return i
    return None


def _describe_levels(topology: TopologyRecord) -> str:
    return ", ".join(f"{alias} ({label})" if alias else label for label, alias in topology.levels) or "none"


@dataclass(frozen=True, slots=True)
class Resolved:
    """A constraint checked against its Topology: level indexes (None = not set)."""

    topology: TopologyRecord
    required: int | None
    preferred: int | None

    def describe(self) -> str:
        parts = []
        if self.required is not None:
            parts.append(f"required level {level_label(self.topology, self.required)}")
        if self.preferred is not None:
            parts.append(f"preferred level {level_label(self.topology, self.preferred)}")
        return f"topology {self.topology.name}, " + " and ".join(parts)


def resolve(constraint: TopologyConstraintSpec, topologies: Iterable[TopologyRecord]) -> Resolved | None:
    """The constraint's levels as indexes; None when it asks for nothing (no level named).

    Raises ConstraintError for a level without a topology, a Topology that does not exist, or a level the
    Topology does not have.
    """
    if not constraint.required and not constraint.preferred:
        return None
    if not constraint.topology:
        level = constraint.required or constraint.preferred
        raise ConstraintError(
            f'the topology placement level "{level}" is set but no topology is named: add the annotation '
            "kai.scheduler/topology with the name of a Topology")
    by_name = {t.name: t for t in topologies}
    topology = by_name.get(constraint.topology)
    if topology is None:
        raise ConstraintError(
            f"Requested topology {constraint.topology} does not exist: create the Topology (kai.scheduler/v1alpha1) "
            "or fix the kai.scheduler/topology annotation of the workload")
    indexes: list[int | None] = []
    for kind, name in (("required", constraint.required), ("preferred", constraint.preferred)):
        if not name:
            indexes.append(None)
            continue
        index = level_index(topology, name)
        if index is None:
            raise ConstraintError(
                f'topology "{topology.name}" has no level "{name}" (the {kind} placement); its levels are '
                f"{_describe_levels(topology)}: name one by its node label or alias")
        indexes.append(index)
    required, preferred = indexes
    if required is not None and preferred is not None and preferred <= required:
        preferred = None  # a preferred level at or above the required one adds nothing
    return Resolved(topology, required, preferred)


@dataclass(frozen=True, slots=True)
class Domain:
    """Nodes sharing the label values of levels 0..level; `free` sums what they have free; `order`: the nodes by
    name (summed in that order, so float sums are reproducible)."""

    level: int
    level_name: str
    values: tuple[str, ...]
    nodes: frozenset[str]
    free: Resources = NONE
    order: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return "/".join(self.values)

    @property
    def value(self) -> str:
        return self.values[-1]

    def describe(self) -> str:
        """`rack r1` (the coarser levels' values follow when they disambiguate: `rack r1 (in a)`)."""
        outer = "/".join(self.values[:-1])
        return f"{self.level_name} {self.value}" + (f" (in {outer})" if outer else "")


def domains_of(topology: TopologyRecord, level: int, labels: Mapping[str, Mapping[str, str]],
               free: Mapping[str, Resources] | None = None) -> tuple[Domain, ...]:
    """The domains of `level` over the nodes (name -> labels), with their summed free resources, by id."""
    wanted = [label for label, _ in topology.levels[:level + 1]]
    members: dict[tuple[str, ...], list[str]] = {}
    for node, node_labels in labels.items():
        if all(label in node_labels for label in wanted):
            members.setdefault(tuple(node_labels[label] for label in wanted), []).append(node)
    name = level_label(topology, level)
    out = [Domain(level, name, values, frozenset(nodes), NONE, tuple(sorted(nodes)))
           for values, nodes in sorted(members.items())]
    return with_free(out, free) if free is not None else tuple(out)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One node set to try: a domain, or the whole cluster (domain None, nodes None)."""

    domain: Domain | None
    nodes: frozenset[str] | None

    def describe(self) -> str:
        return self.domain.describe() if self.domain is not None else "the whole cluster"


@dataclass(frozen=True, slots=True)
class Plan:
    candidates: tuple[Candidate, ...]
    explanation: str = ""  # why there is no candidate (empty when there are some)


def _fullest_first(domains: Iterable[Domain], request: Resources) -> list[Domain]:
    gpu, cpu, memory = request  # `d.free.covers(request)`, inlined: every plan filters every domain of a level
    fitting = [d for d in domains if (f := d.free)[0] >= gpu and f[1] >= cpu and f[2] >= memory]
    if len(fitting) > 1:
        fitting.sort(key=lambda d: (d.free.order_key(), d.values))
    return fitting


def shortfall(level_name: str, domains: Sequence[Domain], request: Resources) -> str:
    """Why no domain of a level can hold the request: the best one (least lacking) and what it lacks."""
    if not domains:
        return f"no node carries the labels of level {level_name}"
    gpu = request[0]
    # The least lacking GPUs first: only the domains with the most free GPUs (or all with enough) can be the best,
    # so the full key is computed for those alone.
    most = max([d.free[0] for d in domains])
    near = [d for d in domains if d.free[0] == most] if most < gpu else [d for d in domains if d.free[0] >= gpu]
    return _least_lacking(level_name, near, request)


def _least_lacking(level_name: str, near: Sequence[Domain], request: Resources) -> str:
    gpu, cpu, memory = request

    def lack_key(d: Domain) -> tuple[tuple[float, float, float], tuple[str, ...]]:
        free = d.free  # `free.lacking(request).order_key()`, without the objects (one call per domain)
        return (max(gpu - free[0], 0.0), max(cpu - free[1], 0.0), max(memory - free[2], 0.0)), d.values

    # A domain's values are unique in its level, so the key is too: the best is the same in any order of `near`.
    best = near[0] if len(near) == 1 else min(near, key=lack_key)
    return (f"no domain of level {level_name} can hold the job ({request.describe()}); best {best.describe()} "
            f"lacks {best.free.lacking(request).describe()}")


# A level's domains as (free, values, domain), sorted: fullest first, then by id, `_fullest_first`'s order (the
# values are unique in a level, so the domains themselves are never compared).
Ordered = Sequence[tuple[Resources, tuple[str, ...], "Domain"]]


def _fullest_first_ordered(ordered: Ordered, request: Resources) -> list[Domain]:
    """`_fullest_first` over a level's domains kept sorted: those with fewer free GPUs than asked are skipped by
    bisection, the rest filtered in order (the same list: a filter keeps the sort)."""
    gpu, cpu, memory = request
    return [d for f, _, d in itertools.islice(ordered, bisect_left(ordered, ((gpu,),)), None)
            if f[1] >= cpu and f[2] >= memory]


def _shortfall_ordered(level_name: str, ordered: Ordered, request: Resources) -> str:
    """`shortfall` over a level's domains kept sorted: the domains with the most free GPUs (or all with enough)
    are a tail of the order."""
    if not ordered:
        return f"no node carries the labels of level {level_name}"
    gpu = request[0]
    most = ordered[-1][0][0]
    start = bisect_left(ordered, ((most,),) if most < gpu else ((gpu,),))
    return _least_lacking(level_name, [d for _, _, d in itertools.islice(ordered, start, None)], request)


def with_free(domains: Iterable[Domain], free: Mapping[str, Resources]) -> tuple[Domain, ...]:
    """The domains with `free` summed over their nodes (a node absent from `free` adds nothing)."""
    out = []
    get = free.get
    for d in domains:
        gpu = cpu = memory = 0
        for node in d.order or sorted(d.nodes):
            r = get(node)
            if r is not None:
                gpu += r[0]
                cpu += r[1]
                memory += r[2]
        out.append(Domain(d.level, d.level_name, d.values, d.nodes, Resources(gpu, cpu, memory), d.order))
    return tuple(out)


def plan(resolved: Resolved, labels: Mapping[str, Mapping[str, str]], free: Mapping[str, Resources],
         request: Resources, placed: Iterable[str] = ()) -> Plan:
    """The node sets to try, best first, for a gang asking `request` (see the module's rules)."""
    return plan_domains(resolved, lambda level: domains_of(resolved.topology, level, labels, free), request, placed)


def plan_levels(resolved: Resolved) -> Sequence[int]:
    """The levels a plan reads: the required level alone, or from the preferred level up to the required one (the
    root level when none is required)."""
    if resolved.preferred is None:
        assert resolved.required is not None
        return (resolved.required,)
    stop = resolved.required if resolved.required is not None else 0
    return range(resolved.preferred, stop - 1, -1)


def plan_domains(resolved: Resolved, domains_at: Callable[[int], Sequence[Domain]], request: Resources,
                 placed: Iterable[str] = (), ordered_at: Callable[[int], Ordered] | None = None) -> Plan:
    """`plan` over domains given per level (with their free resources), e.g. from a per-session cache.

    `ordered_at`: the same domains per level, kept sorted fullest first (`Ordered`), for a plan that need not
    visit every domain; used when no pod is placed yet (no domain filtered out)."""
    topology = resolved.topology
    pinned = frozenset(placed)
    if ordered_at is not None and not pinned:
        return _plan_ordered(resolved, ordered_at, request)

    def allowed(domains: Iterable[Domain]) -> list[Domain]:
        return [d for d in domains if pinned <= d.nodes] if pinned else list(domains)

    if resolved.preferred is None:
        assert resolved.required is not None
        domains = allowed(domains_at(resolved.required))
        fitting = _fullest_first(domains, request)
        if fitting:
            return Plan(tuple(Candidate(d, d.nodes) for d in fitting))
        name = level_label(topology, resolved.required)
        if pinned and not domains:
            return Plan((), f"the job's placed pods span more than one {name}; no {name} holds all of them")
        return Plan((), shortfall(name, domains, request))
    out: list[Candidate] = []
    for level in plan_levels(resolved):
        out += [Candidate(d, d.nodes) for d in _fullest_first(allowed(domains_at(level)), request)]
    if resolved.required is None:
        out.append(Candidate(None, None))
    if out:
        return Plan(tuple(out))
    assert resolved.required is not None
    name = level_label(topology, resolved.required)
    return Plan((), shortfall(name, allowed(domains_at(resolved.required)), request))


def _plan_ordered(resolved: Resolved, ordered_at: Callable[[int], Ordered], request: Resources) -> Plan:
    """`plan_domains` without placed pods, on the levels' sorted domains: the same candidates and explanation."""
    topology = resolved.topology
    if resolved.preferred is None:
        assert resolved.required is not None
        fitting = _fullest_first_ordered(ordered_at(resolved.required), request)
        if fitting:
            return Plan(tuple([Candidate(d, d.nodes) for d in fitting]))
        return Plan((), _shortfall_ordered(level_label(topology, resolved.required), ordered_at(resolved.required),
                                           request))
    out: list[Candidate] = []
    for level in plan_levels(resolved):
        out += [Candidate(d, d.nodes) for d in _fullest_first_ordered(ordered_at(level), request)]
    if resolved.required is None:
        out.append(Candidate(None, None))
    if out:
        return Plan(tuple(out))
    assert resolved.required is not None
    return Plan((), _shortfall_ordered(level_label(topology, resolved.required), ordered_at(resolved.required),
                                       request))
