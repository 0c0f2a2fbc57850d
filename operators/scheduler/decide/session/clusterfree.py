"""The cluster's free resources, kept per node and summed incrementally (exact: integer core units)."""

from __future__ import annotations

from collections.abc import Iterable

from operators.scheduler.decide.session.accounting import Accounting
from operators.scheduler.decide.units import GPU


class ClusterFree(Accounting):
    """Idle plus releasing resources of the schedulable nodes, kept per node with their running totals."""

    _free_terms: tuple[list[int], list[int], list[int]] | None
    _free_totals: list[int]

    def cluster_free(self) -> list[int]:
        """Idle plus releasing resources of schedulable nodes: (micro-GPUs, millicores, bytes).

        Per-node terms are cached and refreshed only for nodes changed since the last call; the totals move by
        the changed terms' differences (integers, so the result equals one sum over the nodes).
        """
        nodes = self.nodes
        terms = self._free_terms
        changed: Iterable[int]
        if terms is None:
            terms = self._free_terms = ([0] * len(nodes), [0] * len(nodes), [0] * len(nodes))
            self._free_totals = [0, 0, 0]
            changed = range(len(nodes))
        else:
            changed = self._free_dirty
        g, c, m = terms
        totals = self._free_totals
        for i in changed:
            n = nodes[i]
            if not n.ok:
                continue
            gpu = (n.idle_gpu + n.rel_gpu) * GPU
            if n.groups:
                gpu += sum(gr.free for gr in n.groups.values() if not gr.fully_releasing)
            cpu = n.idle_cpu + n.rel_cpu
            mem = n.idle_mem + n.rel_mem
            totals[0] += gpu - g[i]  # totals: [gpu, cpu, memory]
            totals[1] += cpu - c[i]
            totals[2] += mem - m[i]
            g[i], c[i], m[i] = gpu, cpu, mem
        self.carrying.touched_nodes |= self._free_dirty  # for the next session's open (persist.py)
        self._free_dirty = set()
        return list(totals)
