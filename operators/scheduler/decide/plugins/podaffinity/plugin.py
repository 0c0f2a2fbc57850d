"""podaffinity: preferred inter-pod affinity and anti-affinity as a node score (kube-scheduler's InterPodAffinity
score, `placement/affinity_score.py`), weighted above every other node-order term as KAI weights it: 100,000
per point, against gpusharing 1,000 > fits idle resources 100 > resource type 10 > nodeplacement 0..9.

A point is the node's score normalized over the nodes the pod fits on (0..100: max-min, truncated; all equal ->
0), or with `normalize: false` the raw sum of weights (KAI's own order, which does not normalize). Alone among
the extra scorers both choose the same node: the fitting nodes with the highest raw score get 100 points, every
other fitting node fewer, and one point outweighs all the built-in terms together. A pod with no preferred terms,
toward which no placed pod has a term, is not scored: it keeps the indexed node order.
Arguments: `weight` (multiplies the score, default 1), `hardPodAffinityWeight` (what a placed pod's required
affinity term toward the pod counts, 0..100, default 1), `normalize` (default true).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from operators.core.booleans import parse_bool
from operators.scheduler.decide.framework import Hooks, Plugin
from operators.scheduler.decide.plugins.podaffinity import score as aff

if TYPE_CHECKING:
    from operators.scheduler.decide.model import NodeState, Task
    from operators.scheduler.decide.session import Session

POINT = 100_000.0  # KAI's weight of the Kubernetes plugins' node score (above topology 10,000)


def _flag(value: Any) -> bool:
    try:
        return parse_bool(value, loose=True)
    except ValueError:
        raise ValueError(f"normalize must be true or false, got {value!r}") from None


class PodAffinity(Plugin):
    name = "podaffinity"
    default_priority = 350
    argument_names = frozenset({"hardPodAffinityWeight", "normalize"})

    def __init__(self, arguments: Mapping[str, Any] | None = None) -> None:
        super().__init__(arguments)
        self.hard_weight = int(self.arguments.get("hardPodAffinityWeight", aff.HARD_POD_AFFINITY_WEIGHT))
        self.normalize = _flag(self.arguments.get("normalize", True))
        # The task being searched: its topology counts, and (normalized) the min and spread of the raw scores
        # of the nodes it fits on, computed at its first node score.
        self._task: Task | None = None
        self._counts: aff.TopologyCounts = {}
        self._range: tuple[int, int] | None = None

    @classmethod
    def check_arguments(cls, arguments: Mapping[str, Any]) -> None:
        raw = arguments.get("hardPodAffinityWeight")
        if raw is not None:
            try:
                weight = int(raw)
            except (TypeError, ValueError):
                weight = -1
            if not 0 <= weight <= 100 or str(raw).strip() != str(weight):
                raise ValueError(f"hardPodAffinityWeight must be an integer from 0 to 100, got {raw!r}")
        if "normalize" in arguments:
            _flag(arguments["normalize"])

    def hooks(self) -> Hooks:
        return Hooks(scope=self, node_score=self)

    def in_use(self, session: Session) -> bool:
        """Some pod has an inter-pod (anti-)affinity term: without one the session has no pod index and no task
        is ever scored."""
        return session.pod_index is not None

    def scores_task(self, session: Session, task: Task) -> bool:
        counts = aff.topology_counts(task.rec, session.nodes, session.pod_index, self.hard_weight) \
            if session.pod_index is not None else {}
        self._task, self._counts, self._range = task, counts, None
        return bool(counts)

    def score_node(self, session: Session, task: Task, node: NodeState) -> float:
        if task is not self._task:
            self.scores_task(session, task)
        raw = aff.raw_scores(self._counts, (node.idx,), session.nodes)[node.idx]
        if not self.normalize:
            return POINT * raw
        if self._range is None:
            self._range = self._fitting_range(session, task)
        low, spread = self._range
        return POINT * (int(aff.MAX_NODE_SCORE * ((raw - low) / spread)) if spread > 0 else 0)

    def _fitting_range(self, session: Session, task: Task) -> tuple[int, int]:
        """(min, max - min) of the raw scores over the nodes the task fits on, as the placer's scored search
        sees them (its feasible mask, then the fit check). Nodes are fit-checked from the lowest and from the
        highest raw score inwards, only until one fits at each end."""
        placer, nodes = session.placer, session.nodes
        mask = placer.mask(task)
        by_score: dict[int, list[int]] = {}
        for i, score in aff.raw_scores(self._counts, (n.idx for n in nodes if mask[n.idx]), nodes).items():
            by_score.setdefault(score, []).append(i)
        order = sorted(by_score)
        fits: dict[int, bool] = {}

        def first_fitting(scores: list[int]) -> int | None:
            for score in scores:
                for i in by_score[score]:
                    fit = fits.get(i)
                    if fit is None:
                        node = nodes[i]
                        fit = fits[i] = (placer.fit(placer, task, node, True)
                                         or placer.fit(placer, task, node, False)) is not None
                    if fit:
                        return score
            return None

        low = first_fitting(order)
        if low is None:
            return 0, 0
        high = first_fitting(order[::-1])
        return low, (high if high is not None else low) - low


PLUGIN = PodAffinity
