"""The scheduler's plugin framework: named extension points, the plugin registry, and the hooks of one session.

A plugin is a class deriving from `Plugin` that implements any subset of the extension points below (each a
small Protocol) and registers them explicitly in `hooks()`: a `Hooks`, one field per point typed by its Protocol,
so mypy checks the signatures and a misspelt point or method stops the configuration from loading. Built-in
plugins are the packages of `operators.scheduler.decide.plugins`, each with its class as `plugin.PLUGIN`; they are
found by listing that package, so adding one touches no session code. A plugin from outside the package is named
in the configuration with `class: "package.module:Class"` next to `enabled`, `priority` and `arguments`.

The configuration (`plugins: {name: {enabled, priority, arguments, class}}`) selects the enabled set and its
order (higher priority first, then name); `Framework.build` resolves the hooks once per session into plain lists
and callables, so the hot paths pay for a hook only when a plugin implements it.
"""

from __future__ import annotations

import importlib
import pkgutil
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from operators.scheduler.decide.explain import JobError
    from operators.scheduler.decide.model import Chunk, Job, NodeState, QueueState, Task
    from operators.scheduler.decide.ordering import QueueFacts
    from operators.scheduler.decide.placement.search import NodeFitFunction, Placement, Placer
    from operators.scheduler.decide.session import FailedAttempt, Session

# KAI plugin names this scheduler accepts in a configuration without implementing them as separate plugins
# (their function is part of a built-in plugin, or not implemented): listed as not honoured, never an error.
KAI_PLUGIN_NAMES = frozenset({
    "nodeavailability", "resourcetype", "gpusharingorder", "nominatednode", "gpupack", "gpuspread",
    "kubeflow", "ray", "subgrouporder", "dynamicresources", "snapshot",
})
_PACKAGE = "operators.scheduler.decide.plugins"


class Plugin:
    """Base of every plugin. Class attributes declare it; `arguments` are the configured `arguments` map."""

    name: ClassVar[str] = ""
    default_priority: ClassVar[int] = 0
    default_enabled: ClassVar[bool] = True
    # True: the scheduler cannot work without it, so `enabled: false` is refused with an actionable error.
    required: ClassVar[bool] = False
    # Argument names the plugin reads (None: any); others are reported as not honoured.
    argument_names: ClassVar[frozenset[str] | None] = frozenset()

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        self.arguments: dict[str, Any] = dict(arguments or {})

    @classmethod
    def check_arguments(cls, arguments: Mapping[str, Any]) -> None:
        """Raise ValueError with an actionable message for arguments the plugin cannot use."""

    def hooks(self) -> Hooks:
        """The extension points this plugin implements, each with the object that implements it (usually self)."""
        return Hooks()


# --- extension points (a plugin implements any subset) -------------------------------------------------------


class SessionOpen(Protocol):
    """Once per session, before any action: build the plugin's state for this session."""

    def on_session_open(self, session: Session) -> None: ...


class SessionClose(Protocol):
    """Once per session, after the actions: turn the plugin's state into decisions (conditions, annotations)."""

    def on_session_close(self, session: Session) -> None: ...


class SessionScope(Protocol):
    """Asked once per session, after every plugin's `on_session_open`: False says the plugin has nothing to do in
    this session (no workload uses its feature), and every hook of the plugin is dropped until the session ends,
    so the hot paths neither call it nor loop over it. A plugin without `in_use` always takes part."""

    def in_use(self, session: Session) -> bool: ...


class QueueOrder(Protocol):
    """Queue order of the job tree: `queue_facts` per queue (with the request of its next job), compared by
    `queue_before`. The highest-priority plugin implementing it decides."""

    def queue_facts(self, queue: QueueState, request: Sequence[int]) -> QueueFacts: ...
    def queue_before(self, a: QueueFacts, b: QueueFacts) -> bool: ...


class JobOrder(Protocol):
    """A sort key, smaller first; keys of all implementing plugins are compared in plugin order, then age."""

    def job_order_key(self, job: Job) -> tuple[object, ...]: ...


class VictimOrder(Protocol):
    """A tie-break of victim order inside a queue, smaller evicted first: compared after the job-order rules
    (priority, elastic state) and before age, so it decides only between jobs those rules call equal."""

    def victim_order_key(self, session: Session, job: Job) -> tuple[object, ...]: ...


class TaskOrder(Protocol):
    """Total order of the pods of a job (the highest-priority implementing plugin decides)."""

    def task_order_key(self, task: Task) -> tuple[object, ...]: ...


class NodePreFilter(Protocol):
    """Once per task search: a reason refuses every node for this task, None lets the search run."""

    def prefilter(self, session: Session, task: Task) -> str | None: ...


class NodeFilter(Protocol):
    """Per candidate node, after the built-in predicates: a reason refuses the node, None accepts it."""

    def filter_node(self, session: Session, task: Task, node: NodeState) -> str | None: ...


class NodeScore(Protocol):
    """Extra node score, added to the built-in score times the plugin's `weight` argument (default 1).

    `scores_task` says whether the plugin has something to score for this task: only then is every feasible
    node scored; otherwise the task takes the indexed path (built-in order without scoring every node).
    """

    def scores_task(self, session: Session, task: Task) -> bool: ...
    def score_node(self, session: Session, task: Task, node: NodeState) -> float: ...


class NodeSubsets(Protocol):
    """Node subsets a job's attempt is tried in, in order (first that holds the whole attempt wins).

    Each subset is a collection of node indexes (`NodeState.idx`). None: no opinion (all nodes). An empty
    iterable means no subset can hold the job (the attempt fails).
    """

    def node_subsets(self, session: Session, job: Job) -> Iterable[Iterable[int]] | None: ...


class JobGate(Protocol):
    """May `job` be tried by `action` now? False skips it in that action for this cycle."""

    def may_try(self, session: Session, job: Job, action: str) -> bool: ...


class VictimFilter(Protocol):
    """May `victim`'s pods be evicted (or moved) for `preemptor` by `action`?"""

    def may_evict(self, session: Session, preemptor: Job, victim: Job, action: str) -> bool: ...


class VictimChunkOrder(Protocol):
    """Reorder (or drop) a search's victim chunks, given as each chunk's pods in the action's order: returns
    the indexes of the chunks to try, in the order to try them (PodDisruptionBudgets: chunks that would take a
    budget below its minimum go last, or not at all). Applied after the victim filters, in plugin order."""

    def order_victims(self, session: Session, preemptor: Job, chunks: Sequence[Sequence[Task]],
                      action: str) -> list[int]: ...


class VictimMinRuntime(Protocol):
    """How long after it started a victim job is protected (seconds; 0: not at all): a protected job offers only
    its pods above minMember. `reclaimer` is the reclaiming job's queue (reclaim), None for preempt and
    consolidation. The highest-priority implementing plugin decides; without one nothing is protected."""

    def min_runtime(self, session: Session, victim: QueueState, reclaimer: QueueState | None) -> float: ...


class ScenarioValidator(Protocol):
    """Accept or refuse a victim scenario (the victim jobs, in the order taken) after the action's own rules."""

    def validate_scenario(self, session: Session, preemptor: Job, victims: Sequence[Job], action: str) -> bool: ...


class Capacity(Protocol):
    """Queue capacity and over-quota checks; the first error of the implementing plugins wins.

    `freed` (per queue: what victims could still release under it) lowers the allocation limits are checked
    against."""

    def capacity_error(self, session: Session, job: Job, tasks: Iterable[Task],
                       freed: dict[QueueState, list[int]] | None) -> JobError | None: ...


class ReclaimScenario(Protocol):
    """One reclaimer's fairness test of victim scenarios: `viable` is necessary for any scenario holding the chunk
    (a cheap pre-filter), the call gives a reason per chunk, or None when the scenario is refused."""

    def viable(self, chunk: Chunk) -> bool: ...
    def __call__(self, scenario: Sequence[Chunk]) -> list[str] | None: ...


class ReclaimRules(Protocol):
    """The fairness rules of reclaim (the highest-priority implementing plugin's; proportion's in KAI):
    `may_reclaim` gives (fair-share entry, steady fair-share entry) for a job's request; `may_take_from` says
    whether a victim queue may lose pods to a reclaimer queue at all; `scenario_validator` judges scenarios.
    `sides` caches, per (reclaimer queue, victim queue), the two sibling queues where their paths split."""

    def may_reclaim(self, session: Session, queue: QueueState, request: Sequence[int]) -> tuple[bool, bool]: ...
    def may_take_from(self, session: Session, reclaimer: QueueState, victim: QueueState, contested: Sequence[int],
                      sides: dict[tuple[QueueState, QueueState], tuple[QueueState, QueueState]]) -> bool: ...
    def scenario_validator(self, session: Session, job: Job, request: Sequence[int],
                           sides: dict[tuple[QueueState, QueueState], tuple[QueueState, QueueState]], *,
                           existing: bool, steady_path: bool) -> ReclaimScenario: ...


class NodeFit(Protocol):
    """Does a task fit a node, and if not why (the predicates plugin's one fit function; the highest-priority
    implementing plugin's is the placer's). `why`, when given, receives the reasons of a refusal. `histogram`
    counts, over nodes, each tuple of reasons `fit` gives with `why` (released resources counted): the fit
    summary's histogram."""

    def fit(self, placer: Placer, task: Task, node: NodeState, idle_only: bool,
            why: list[str] | None = None) -> Placement | None: ...
    def histogram(self, placer: Placer, task: Task, nodes: Sequence[NodeState]) -> dict[tuple[str, ...], int]: ...


class Gang(Protocol):
    """Gang rules (the highest-priority implementing plugin decides all of them).

    - `job_ready`: enough live pods for the job to be scheduled at all; `ready_jobs`: the same for a list of jobs
      (one call per action: the session's candidate list is its hot loop);
    - `not_ready_message`: why it is not (a job that is not ready);
    - `tasks_to_allocate`: the pods of the next attempt (the gang core, else one pod for elastic growth);
    - `attempt_state`: (gang, placed) before an attempt: is this attempt a gang one, pods already allocated;
    - `failure`: what to record when the attempt fails on `task` after `placed` pods of it were placed;
    - `failure_message`: the text of a recorded failure (`FailedAttempt`), at session close;
    - `is_stale`: a running gang that lost members below its minimum; `stale_jobs`: those of a list of jobs (one
      call at session close);
    - `stale_message`: the StaleJob text.
    """

    def job_ready(self, job: Job) -> bool: ...
    def ready_jobs(self, jobs: Iterable[Job]) -> list[Job]: ...
    def not_ready_message(self, job: Job) -> str: ...
    def tasks_to_allocate(self, job: Job) -> list[Task]: ...
    def attempt_state(self, job: Job) -> tuple[bool, int]: ...
    def failure(self, job: Job, task: Task, state: tuple[bool, int], placed: int, summary: str) -> FailedAttempt: ...
    def failure_message(self, failure: FailedAttempt) -> str: ...
    def is_stale(self, job: Job) -> bool: ...
    def stale_jobs(self, jobs: Iterable[Job]) -> set[Job]: ...
    def stale_message(self, job: Job) -> str: ...


class GangChoices(Protocol):
    """Other ways to meet a job's gang rule, tried by allocate when its gang attempt failed (the gang plugin's).

    Each step of the iterator changes the job's choice (e.g. which SubGroups' minimums count) and the attempt is
    tried again with the new `tasks_to_allocate`; the iterator restores the first choice when it ends. A choice
    that placed the job is kept. None: the job has no other choice.
    """

    def gang_choices(self, session: Session, job: Job) -> Iterator[None] | None: ...


class Elastic(Protocol):
    """0: some podset below its minimum, 1: all at their minimum, 2: some above (job order and victims)."""

    def elastic_state(self, job: Job) -> int: ...


class AllocateEvent(Protocol):
    """Fired by statement operations when a task takes a placement (allocate, pipeline, and the rollback of an
    eviction). `kind` is allocate | pipeline | rollback."""

    def on_allocate(self, session: Session, task: Task, kind: str) -> None: ...


class DeallocateEvent(Protocol):
    """Fired by statement operations when a task gives a placement up (eviction, and the rollback of an allocate
    or pipeline). `kind` is evict | rollback."""

    def on_deallocate(self, session: Session, task: Task, kind: str) -> None: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class Hooks:
    """What a plugin registers (`Plugin.hooks()`): per extension point, the object implementing that point's
    Protocol (usually the plugin itself), or None. The field types let mypy check a plugin's methods against the
    points it registers them at; a keyword naming no point, or a registered object without the point's methods,
    is an error when the configuration is loaded (`Framework.check`), naming the plugin and the hook."""

    session_open: SessionOpen | None = None
    session_close: SessionClose | None = None
    scope: SessionScope | None = None
    queue_order: QueueOrder | None = None
    job_order: JobOrder | None = None
    task_order: TaskOrder | None = None
    victim_order: VictimOrder | None = None
    node_prefilter: NodePreFilter | None = None
    node_filter: NodeFilter | None = None
    node_fit: NodeFit | None = None
    node_score: NodeScore | None = None
    node_subsets: NodeSubsets | None = None
    job_gate: JobGate | None = None
    victim_filter: VictimFilter | None = None
    victim_chunk_order: VictimChunkOrder | None = None
    victim_min_runtime: VictimMinRuntime | None = None
    scenario_validator: ScenarioValidator | None = None
    reclaim_rules: ReclaimRules | None = None
    capacity: Capacity | None = None
    gang: Gang | None = None
    gang_choices: GangChoices | None = None
    elastic: Elastic | None = None
    allocate_event: AllocateEvent | None = None
    deallocate_event: DeallocateEvent | None = None


def _point_methods() -> dict[str, tuple[str, ...]]:
    """Extension point (a `Hooks` field) -> the method names of its Protocol."""
    out: dict[str, tuple[str, ...]] = {}
    for name, hint in typing.get_type_hints(Hooks).items():
        protocol = typing.get_args(hint)[0]
        out[name] = tuple(m for m, v in vars(protocol).items() if callable(v) and not m.startswith("_"))
    return out


EXTENSION_POINTS: Mapping[str, tuple[str, ...]] = _point_methods()


def hooks_of(plugin: Plugin) -> Hooks:
    """The plugin's registered hooks, checked: ValueError naming the plugin and the hook when it registers a point
    that does not exist or an object that lacks a method of the point's Protocol."""
    try:
        hooks = plugin.hooks()
    except TypeError as exc:  # Hooks(...) got a keyword that names no extension point
        raise ValueError(f"plugin {plugin.name}: {exc} (extension points: {', '.join(EXTENSION_POINTS)})") from None
    if not isinstance(hooks, Hooks):
        raise ValueError(f"plugin {plugin.name}: hooks() must return a Hooks, got {type(hooks).__name__}")
    for point, methods in EXTENSION_POINTS.items():
        target = getattr(hooks, point)
        if target is None:
            continue
        missing = [m for m in methods if not callable(getattr(target, m, None))]
        if missing:
            raise ValueError(f"plugin {plugin.name} registers hook {point} but does not implement "
                             f"{', '.join(missing)}")
    return hooks


# --- registry ---------------------------------------------------------------------------------------------------

_builtin: dict[str, type[Plugin]] | None = None


def builtin_plugins() -> dict[str, type[Plugin]]:
    """Every package of `operators.scheduler.decide.plugins` whose `plugin` module has a `PLUGIN` class (or a
    module with one), by plugin name (found once)."""
    global _builtin
    if _builtin is None:
        package = importlib.import_module(_PACKAGE)
        found: dict[str, type[Plugin]] = {}
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            module = importlib.import_module(f"{_PACKAGE}.{info.name}" + (".plugin" if info.ispkg else ""))
            cls = getattr(module, "PLUGIN", None)
            if isinstance(cls, type) and issubclass(cls, Plugin):
                found[cls.name] = cls
        _builtin = found
    return _builtin


def load_class(path: str) -> type[Plugin]:
    """`package.module:Class` -> the plugin class, or ValueError saying what is wrong."""
    module_name, sep, attr = str(path).partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"plugin class must be given as 'package.module:Class', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"plugin class {path!r}: cannot import {module_name}: {exc}") from None
    cls = getattr(module, attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Plugin)):
        raise ValueError(f"plugin class {path!r}: {attr} is not a subclass of "
                         "operators.scheduler.decide.framework.Plugin")
    return cls


@dataclass(frozen=True)
class PluginSetting:
    """One entry of the configuration's `plugins` map (None: not set there)."""

    name: str
    enabled: bool | None = None
    priority: int | None = None
    arguments: Mapping[str, Any] = field(default_factory=dict)
    cls: str | None = None


def parse_plugin_settings(raw: Mapping[str, Any], base: Sequence[PluginSetting] = ()) -> tuple[PluginSetting, ...]:
    """The `plugins: {name: {enabled, priority, arguments, class}}` map, checked: unknown names, disabled
    required plugins, bad classes and bad arguments raise ValueError with what to change. `base`: the settings
    of the layers below (a plugin whose class one of them names is known here)."""
    out: list[PluginSetting] = []
    known = builtin_plugins()
    classes = {s.name: s.cls for s in base if s.cls is not None}
    for name, opts in raw.items():
        if opts is not None and not isinstance(opts, Mapping):
            raise ValueError(f"plugins.{name} must be an object {{enabled, priority, arguments}}, got {opts!r}")
        opts = opts or {}
        enabled = opts.get("enabled")
        priority = opts.get("priority")
        arguments = opts.get("arguments") or {}
        if not isinstance(arguments, Mapping):
            raise ValueError(f"plugins.{name}.arguments must be a map, got {arguments!r}")
        cls_path = opts.get("class")
        setting = PluginSetting(str(name), None if enabled is None else bool(enabled),
                                None if priority is None else int(priority), dict(arguments),
                                None if cls_path is None else str(cls_path))
        if setting.cls is None and setting.name in classes:
            cls: type[Plugin] | None = load_class(classes[setting.name])
        else:
            cls = _plugin_class(setting, known)
        if cls is not None:
            if cls.required and setting.enabled is False:
                raise ValueError(f"plugin {name} cannot be disabled: the scheduler depends on it")
            cls.check_arguments(setting.arguments)
        out.append(setting)
    return tuple(out)


def _plugin_class(setting: PluginSetting, known: Mapping[str, type[Plugin]]) -> type[Plugin] | None:
    if setting.cls is not None:
        return load_class(setting.cls)
    cls = known.get(setting.name)
    if cls is None and setting.name not in KAI_PLUGIN_NAMES:
        raise ValueError(f"unknown plugin {setting.name!r} (built-in: {', '.join(sorted(known))}); a plugin from "
                         f"outside the scheduler is loaded with plugins.{setting.name}.class: "
                         "'package.module:Class'")
    return cls


def merge_settings(base: Sequence[PluginSetting], changes: Sequence[PluginSetting]) -> tuple[PluginSetting, ...]:
    """`changes` on top of `base`, per plugin name and field (a later configuration layer wins)."""
    by_name = {s.name: s for s in base}
    for c in changes:
        old = by_name.get(c.name)
        if old is None:
            by_name[c.name] = c
            continue
        by_name[c.name] = PluginSetting(
            c.name, c.enabled if c.enabled is not None else old.enabled,
            c.priority if c.priority is not None else old.priority,
            {**old.arguments, **c.arguments}, c.cls if c.cls is not None else old.cls)
    return tuple(by_name[n] for n in sorted(by_name))


def enabled_plugins(settings: Sequence[PluginSetting]) -> list[Plugin]:
    """Instances of the enabled plugins, highest priority first, then by name."""
    known = builtin_plugins()
    chosen: dict[str, tuple[type[Plugin], int, Mapping[str, Any]]] = {
        name: (cls, cls.default_priority, {}) for name, cls in known.items() if cls.default_enabled}
    for s in settings:
        cls = _plugin_class(s, known)
        if cls is None:
            continue  # a KAI name without a plugin here
        if s.enabled is False:
            chosen.pop(s.name, None)
            continue
        if s.enabled is None and s.name not in chosen and s.cls is None:
            continue  # only arguments or a priority for a plugin that is off by default
        priority = s.priority if s.priority is not None else cls.default_priority
        chosen[s.name] = (cls, priority, s.arguments)
    order = sorted(chosen.items(), key=lambda kv: (-kv[1][1], kv[0]))
    out: list[Plugin] = []
    for name, (cls, _, arguments) in order:
        plugin = cls(arguments)
        if plugin.name != name:
            plugin.name = name  # type: ignore[misc]  # an external class may serve under the configured name
        out.append(plugin)
    return out


# --- the hooks of one session ------------------------------------------------------------------------------------


def _fused_job_key(providers: Sequence[Callable[[Job], tuple[object, ...]]]) -> Callable[[Job], tuple[object, ...]]:
    from operators.scheduler.decide import ordering

    if not providers:
        return ordering.age_order_key

    def key(job: Job) -> tuple[object, ...]:
        return (*(p(job) for p in providers), ordering.age_order_key(job))

    return key


class Framework:
    """The enabled plugins of one configuration, with each extension point resolved to plain callables."""

    def __init__(self, plugins: Sequence[Plugin]) -> None:
        self.plugins = list(plugins)
        self.names = frozenset(p.name for p in plugins)
        self._resolve([(p, hooks_of(p)) for p in self.plugins])

    def settle(self, session: Session) -> bool:
        """Drop the hooks of the plugins that say (`in_use`) they have nothing to do in this session; True when
        some were dropped. Call once, after the session-open hooks."""
        active = [(p, h) for p, h in self._registered if h.scope is None or h.scope.in_use(session)]
        if len(active) == len(self._registered):
            return False
        self._resolve(active)
        return True

    def _resolve(self, registered: Sequence[tuple[Plugin, Hooks]]) -> None:
        from operators.scheduler.decide import ordering

        self._registered = list(registered)
        hooks = [h for _, h in registered]

        def first(point: str) -> Any:
            return next((target for h in hooks if (target := getattr(h, point)) is not None), None)

        self.session_open: list[Callable[[Session], None]] = [
            h.session_open.on_session_open for h in hooks if h.session_open is not None]
        self.session_close: list[Callable[[Session], None]] = [
            h.session_close.on_session_close for h in hooks if h.session_close is not None]
        queue_order: QueueOrder | None = first("queue_order")
        if queue_order is None:
            raise ValueError("no enabled plugin implements the queue order (enable the proportion plugin)")
        reclaim_rules: ReclaimRules | None = first("reclaim_rules")
        if reclaim_rules is None:
            raise ValueError("no enabled plugin implements the reclaim rules (enable the proportion plugin)")
        self.reclaim_rules: ReclaimRules = reclaim_rules
        self.queue_facts: Callable[[QueueState, Sequence[int]], QueueFacts] = queue_order.queue_facts
        self.queue_before: Callable[[QueueFacts, QueueFacts], bool] = queue_order.queue_before
        job_keys = [(p, h.job_order) for p, h in registered if h.job_order is not None]
        known = builtin_plugins()
        if [(p.name, type(p)) for p, _ in job_keys] == [("priority", known["priority"]),
                                                        ("elastic", known["elastic"])]:
            self.job_order_key: Callable[[Job], tuple[object, ...]] = ordering.job_order_key  # the same, fused
        else:
            self.job_order_key = _fused_job_key([o.job_order_key for _, o in job_keys])
        task_order: TaskOrder | None = first("task_order")
        self.task_order_key: Callable[[Task], tuple[object, ...]] = (
            task_order.task_order_key if task_order is not None else ordering.task_order_key)
        self.victim_order_keys: list[Callable[[Session, Job], tuple[object, ...]]] = [
            h.victim_order.victim_order_key for h in hooks if h.victim_order is not None]
        self.prefilters: list[Callable[[Session, Task], str | None]] = [
            h.node_prefilter.prefilter for h in hooks if h.node_prefilter is not None]
        self.node_filters: list[Callable[[Session, Task, NodeState], str | None]] = [
            h.node_filter.filter_node for h in hooks if h.node_filter is not None]
        self.scorers: list[tuple[Callable[[Session, Task], bool], Callable[[Session, Task, NodeState], float],
                                 float]] = [
            (h.node_score.scores_task, h.node_score.score_node, float(p.arguments.get("weight", 1.0)))
            for p, h in registered if h.node_score is not None]
        self.node_subsets: list[Callable[[Session, Job], Iterable[Iterable[int]] | None]] = [
            h.node_subsets.node_subsets for h in hooks if h.node_subsets is not None]
        self.job_gates: list[Callable[[Session, Job, str], bool]] = [
            h.job_gate.may_try for h in hooks if h.job_gate is not None]
        self.victim_filters: list[Callable[[Session, Job, Job, str], bool]] = [
            h.victim_filter.may_evict for h in hooks if h.victim_filter is not None]
        self.victim_orders: list[Callable[[Session, Job, Sequence[Sequence[Task]], str], list[int]]] = [
            h.victim_chunk_order.order_victims for h in hooks if h.victim_chunk_order is not None]
        min_runtime: VictimMinRuntime | None = first("victim_min_runtime")
        self.min_runtime: Callable[[Session, QueueState, QueueState | None], float] | None = (
            min_runtime.min_runtime if min_runtime is not None else None)
        self.scenario_validators: list[Callable[[Session, Job, Sequence[Job], str], bool]] = [
            h.scenario_validator.validate_scenario for h in hooks if h.scenario_validator is not None]
        self.capacity: list[Callable[[Session, Job, Iterable[Task], dict[QueueState, list[int]] | None],
                                     JobError | None]] = [
            h.capacity.capacity_error for h in hooks if h.capacity is not None]
        node_fit: NodeFit | None = first("node_fit")
        if node_fit is None:
            raise ValueError("no enabled plugin implements the node fit (enable the predicates plugin)")
        self.node_fit: NodeFitFunction = node_fit.fit
        self.fit_histogram: Callable[[Placer, Task, Sequence[NodeState]], dict[tuple[str, ...], int]] = (
            node_fit.histogram)
        gang: Gang | None = first("gang")
        if gang is None:
            raise ValueError("no enabled plugin implements the gang rules (enable the gang plugin)")
        self.gang: Gang = gang
        # The gang plugin's other ways to meet its rule (only the plugin whose gang rules are in force).
        choices = next((h.gang_choices for h in hooks if h.gang is gang), None)
        self.gang_choices: Callable[[Session, Job], Iterator[None] | None] | None = (
            choices.gang_choices if choices is not None else None)
        elastic: Elastic | None = first("elastic")
        self.elastic_state: Callable[[Job], int] = elastic.elastic_state if elastic is not None else _no_elastic
        self.on_allocate: list[Callable[[Session, Task, str], None]] = [
            h.allocate_event.on_allocate for h in hooks if h.allocate_event is not None]
        self.on_deallocate: list[Callable[[Session, Task, str], None]] = [
            h.deallocate_event.on_deallocate for h in hooks if h.deallocate_event is not None]

    def plugin(self, name: str) -> Plugin | None:
        return next((p for p in self.plugins if p.name == name), None)

    def active_names(self) -> frozenset[str]:
        """The plugins taking part in this session (after `settle`, those whose `in_use` said yes)."""
        return frozenset(p.name for p, _ in self._registered)

    @classmethod
    def build(cls, settings: Sequence[PluginSetting]) -> Framework:
        return cls(enabled_plugins(settings))

    @classmethod
    def check(cls, settings: Sequence[PluginSetting]) -> None:
        """Build once, so a plugin that cannot start (its constructor fails, a non-numeric score `weight`) is a
        configuration error with the reason, not a failing scheduling cycle."""
        try:
            cls.build(settings)
        except Exception as exc:  # any plugin's failure, reported as the configuration's
            raise ValueError(f"plugins cannot start: {exc}") from None


def _no_elastic(job: Job) -> int:
    return 1
