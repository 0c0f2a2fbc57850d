"""Exact float sums of per-node terms, and the cluster's free resources built on them."""

from __future__ import annotations

from collections.abc import Iterable
from functools import reduce
from operator import add

from operators.scheduler.session.accounting import Accounting


class ExactSum:
    """The sum of floats that are multiples of 2**-scale, kept as an exact integer (O(1) per replaced term).

    When every term is such a multiple and the sum of their magnitudes stays below 2**53 (in units of
    2**-scale), every partial sum of a left-to-right float sum is exactly representable, so that float sum is
    exact and equals `total()` whatever the order; otherwise `usable()` is False and the caller sums the floats.
    """

    __slots__ = ("exact", "inexact", "magnitude", "unit")

    def __init__(self, scale: int) -> None:
        self.unit = float(1 << scale)  # x * unit is exact (a power of two) and integral iff x is a multiple
        self.exact = 0  # sum of the terms, in units of 2**-scale
        self.magnitude = 0  # sum of their absolute values, same units
        self.inexact = 0  # terms that are not such multiples (or not finite)

    def rebuild(self, terms: list[float]) -> None:
        scaled = [x * self.unit for x in terms]
        if all(map(float.is_integer, scaled)):
            units = list(map(int, scaled))
            self.exact, self.magnitude, self.inexact = sum(units), sum(map(abs, units)), 0
        else:
            units = [int(y) for y in scaled if y.is_integer()]
            self.exact, self.magnitude = sum(units), sum(map(abs, units))
            self.inexact = len(scaled) - len(units)

    def replace(self, old: float, new: float) -> None:
        y = old * self.unit
        if y.is_integer():
            self.exact -= int(y)
            self.magnitude -= abs(int(y))
        else:
            self.inexact -= 1
        y = new * self.unit
        if y.is_integer():
            self.exact += int(y)
            self.magnitude += abs(int(y))
        else:
            self.inexact += 1

    def usable(self) -> bool:
        return self.inexact == 0 and self.magnitude < (1 << 53)

    def total(self) -> float:
        return self.exact / int(self.unit)  # correctly rounded int division: exact, the value is representable


# cluster_free(): which total each per-node term goes to (gpu, shared-gpu free, cpu, memory).
_FREE_RESOURCE = (0, 0, 1, 2)


class ClusterFree(Accounting):
    """Idle plus releasing resources of the schedulable nodes, kept per node and summed exactly."""

    _free_terms: tuple[list[float], list[float], list[float]] | None
    _free_exact: tuple[ExactSum, ExactSum, ExactSum]

    def cluster_free(self) -> list[float]:
        """Idle plus releasing resources of schedulable nodes: (gpu, cpu, memory).

        Per-node terms are cached and refreshed only for nodes changed since the last call; the totals add
        the terms in node order from 0.0 (an absent term is 0.0), exactly as one loop over the nodes would.
        """
        nodes = self.nodes
        terms = self._free_terms
        changed: Iterable[int]
        if terms is None:
            terms = self._free_terms = ([0.0] * (2 * len(nodes)), [0.0] * len(nodes), [0.0] * len(nodes))
            changed = range(len(nodes))
        else:
            changed = self._free_dirty
        g, c, m = terms
        exact = self._free_exact
        initial = isinstance(changed, range)
        for i in changed:
            n = nodes[i]
            if not n.ok:
                continue
            new = (n.idle_gpu + n.rel_gpu,
                   sum((gr.free for gr in n.groups.values() if not gr.fully_releasing), 0.0) if n.groups else 0.0,
                   n.idle_cpu + n.rel_cpu, n.idle_mem + n.rel_mem)
            old = (g[2 * i], g[2 * i + 1], c[i], m[i])
            if new == old:
                continue
            g[2 * i], g[2 * i + 1], c[i], m[i] = new
            if not initial:
                for k in range(4):
                    if new[k] != old[k]:
                        exact[_FREE_RESOURCE[k]].replace(old[k], new[k])
        self._free_dirty = set()
        lists = (g, c, m)
        if initial:
            for r in range(3):
                exact[r].rebuild(lists[r])
        return [exact[r].total() if exact[r].usable() else reduce(add, lists[r], 0.0) for r in range(3)]
