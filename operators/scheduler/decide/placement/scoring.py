"""Node order as sorted indexes, so a task finds its best node without scoring every node.

KAI sums plugin scores: gpusharingorder 1,000 > nodeavailability 100 > resourcetype 10 > nodeplacement (0..9
binpack, 0..1 spread), then node name. The binpack score is monotone in the free amount of the task's key
resource (GPU, or CPU for CPU-only tasks) and spread in the free ratio, so the same order is obtained by
walking lists of (key, node index) kept sorted and updated incrementally; node index order is name order.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter

from operators.scheduler.decide.config import SPREAD
from operators.scheduler.decide.model import NodeState

# KAI's node-order score tiers: each tier outweighs the whole range of the ones below it.
SHARED_GPU_SCORE = 1000.0  # gpusharing (gpusharingorder): a fractional pod onto a shared GPU with room, binpack
IDLE_FIT_SCORE = 100.0  # nodeavailability: the pod fits in idle resources (bound now, not pipelined)
RESOURCE_TYPE_SCORE = 10.0  # resourcetype: a CPU-only pod on a CPU-only node
BINPACK_SCORE_RANGE = 9.0  # nodeplacement binpack: 0..9 by the used part of the key resource (spread: 0..1 free)


# The binpack orders start at the first entry with a key of at least the pod's request: the first (key, index) at
# or above (min_free, -1), which, indexes being >= 0, is the first whose key alone is >= min_free. Bisected on the
# keys alone: a C key call per probe instead of a tuple comparison (keys are never NaN: counts and finite ratios).
_entry_key = itemgetter(0)


class NodeIndex:
    def __init__(self, nodes: Sequence[NodeState], gpu_strategy: str, cpu_strategy: str) -> None:
        self.nodes = nodes
        self.gpu_spread = gpu_strategy == SPREAD
        self.cpu_spread = cpu_strategy == SPREAD
        n = len(nodes)
        self.gpu_key = [0.0] * n
        self.cpu_key = [0.0] * n
        self.in_shared = bytearray(n)
        # Membership of the GPU-node lists (GPU nodes) and of the CPU-only list, fixed at construction.
        self.is_gpu = bytearray(n)
        self.is_cpu_only = bytearray(n)
        self.gpu_list: list[tuple[float, int]] = []  # GPU nodes, by GPU key
        self.cpu_gpu_list: list[tuple[float, int]] = []  # GPU nodes, by CPU key (for CPU-only tasks)
        self.cpu_only_list: list[tuple[float, int]] = []  # CPU-only nodes, by CPU key
        self.shared_list: list[tuple[float, int]] = []  # nodes with a shared GPU that has room, by GPU key
        self._releasing: set[int] = set()  # nodes with resources still being released
        # Nodes whose free resources changed since the lists were last read: re-keyed when the order is next read.
        # The GPU side (the GPU-key list, the shared list, the releasing set) is re-keyed at every read, as it always
        # was: a disruptive search reads the order while a node's devices are blocked for it without an update
        # (`Solver._move`), so when a GPU key is taken is part of the decisions. The CPU side (the CPU-key lists,
        # read only by CPU-only tasks) is re-keyed only when it is read: a CPU key is the node's free CPU, which
        # changes only through the operations that note it here, so it is the same whenever it is taken, and a node
        # placed on several times between two CPU reads moves there once.
        self._dirty: dict[int, NodeState] = {}
        self._dirty_cpu: dict[int, NodeState] = {}
        for node in nodes:
            if not node.ok:
                continue
            i = node.idx
            self.gpu_key[i] = self._gpu_key(node)
            self.cpu_key[i] = self._cpu_key(node)
            if node.cap_gpu > 0:
                self.gpu_list.append((self.gpu_key[i], i))
                self.cpu_gpu_list.append((self.cpu_key[i], i))
                self.is_gpu[i] = 1
            else:
                self.cpu_only_list.append((self.cpu_key[i], i))
                self.is_cpu_only[i] = 1
            # A node without shared devices (no groups, most of them) is not shareable, and releasing only by its
            # amounts: the groups' scans are skipped for it, as `_rekey_gpu` skips them.
            groups = node.groups
            if groups and self._shareable(node):
                self.in_shared[i] = 1
                self.shared_list.append((self.gpu_key[i], i))
            if (self._is_releasing(node) if groups else node.rel_cpu > 0 or node.rel_mem > 0 or node.rel_gpu > 0):
                self._releasing.add(i)
        for lst in (self.gpu_list, self.cpu_gpu_list, self.cpu_only_list, self.shared_list):
            lst.sort()

    def _gpu_key(self, node: NodeState) -> float:
        if self.gpu_spread:
            total = node.gpu_total or node.cap_gpu
            return -(node.free_gpu / total) if total else 0.0
        return node.free_gpu

    def _cpu_key(self, node: NodeState) -> float:
        if self.cpu_spread:
            return -(node.free_cpu / node.cap_cpu) if node.cap_cpu else 0.0
        return node.free_cpu

    @staticmethod
    def _shareable(node: NodeState) -> bool:
        return any(not g.fully_releasing and g.free > 0 for g in node.groups.values())

    @staticmethod
    def _is_releasing(node: NodeState) -> bool:
        return node.rel_cpu > 0 or node.rel_mem > 0 or node.rel_gpu > 0 or any(
            g.releasing > 0 for g in node.groups.values())

    def update(self, node: NodeState) -> None:
        """Note that a node's free resources changed; it is re-keyed when the order is next read.

        A simulation evicts a scenario's pods, places the job, and rolls back, node by node: deferred, a node
        touched several times between two reads is re-keyed once, and one left as it was is not moved. The lists
        hold (key, index) pairs, unique, so they read the same whatever order the nodes are re-keyed in."""
        self._dirty[node.idx] = self._dirty_cpu[node.idx] = node

    def flush(self) -> None:
        """Re-key the nodes changed since the last read, on both sides."""
        self._flush_gpu()
        self._flush_cpu()

    def _flush_gpu(self) -> None:
        """Bring the GPU side up to date (every reader calls this first, the CPU side's through `flush`)."""
        if self._dirty:
            for node in self._dirty.values():
                self._rekey_gpu(node)
            self._dirty.clear()

    def _flush_cpu(self) -> None:
        """Bring the CPU side up to date (its readers call this first, through `flush`)."""
        if self._dirty_cpu:
            for node in self._dirty_cpu.values():
                self._rekey_cpu(node)
            self._dirty_cpu.clear()

    @property
    def releasing(self) -> set[int]:
        """Nodes with resources still being released (both sides brought up to date: the caller reads the keys)."""
        self.flush()
        return self._releasing

    def _rekey_cpu(self, node: NodeState) -> None:
        if not node.ok:
            return
        i = node.idx
        # `_cpu_key` inlined (once per placed-on node and CPU read).
        free = node.idle_cpu + node.rel_cpu
        if self.cpu_spread:
            cap = node.cap_cpu
            ck: float = -(free / cap) if cap else 0.0
        else:
            ck = free
        old = self.cpu_key[i]
        if ck != old:
            _move(self.cpu_gpu_list if node.cap_gpu > 0 else self.cpu_only_list, old, ck, i)
            self.cpu_key[i] = ck

    def _rekey_gpu(self, node: NodeState) -> None:
        if not node.ok:
            return
        i = node.idx
        # `_gpu_key`, `_shareable` and `_is_releasing` inlined (once per placed-on node and GPU read, the hot path
        # of a backlog's binds): a node without shared devices (no groups) is neither shareable nor releasing any
        # device's portions, so their scans over the groups are skipped.
        free = node.idle_gpu + node.rel_gpu
        if self.gpu_spread:
            total = node.gpu_total or node.cap_gpu
            gk: float = -(free / total) if total else 0.0
        else:
            gk = free
        old_gk = self.gpu_key[i]
        if gk != old_gk and node.cap_gpu > 0:
            _move(self.gpu_list, old_gk, gk, i)
        groups = node.groups
        if groups:  # the two scans as loops, not any() over generators
            shareable = False
            for g in groups.values():
                if not g.fully_releasing and g.free > 0:
                    shareable = True
                    break
            releasing = node.rel_cpu > 0 or node.rel_mem > 0 or node.rel_gpu > 0
            if not releasing:
                for g in groups.values():
                    if g.releasing > 0:
                        releasing = True
                        break
        else:
            shareable = False
            releasing = node.rel_cpu > 0 or node.rel_mem > 0 or node.rel_gpu > 0
        if self.in_shared[i]:
            if shareable:
                if gk != old_gk:
                    _move(self.shared_list, old_gk, gk, i)
            else:
                _remove(self.shared_list, old_gk, i)
                self.in_shared[i] = 0
        elif shareable:
            insort(self.shared_list, (gk, i))
            self.in_shared[i] = 1
        self.gpu_key[i] = gk
        if releasing:
            self._releasing.add(i)
        else:
            self._releasing.discard(i)

    # --- iteration in score order --------------------------------------------------------------

    def gpu_order(self, min_free: float) -> Iterator[int]:
        """GPU nodes, best first. Binpack starts at the first node with enough free GPUs."""
        lst, start = self.gpu_from(min_free)
        for pos in range(start, len(lst)):
            yield lst[pos][1]

    def gpu_from(self, min_free: float) -> tuple[list[tuple[float, int]], int]:
        """`gpu_order` as the sorted (key, index) list, brought up to date now, and the position it starts at: the
        nodes from there on, while nothing changes them, are what `gpu_order` yields."""
        self._flush_gpu()
        lst = self.gpu_list
        return lst, 0 if self.gpu_spread else bisect_left(lst, min_free, key=_entry_key)

    def shared_order(self) -> Iterator[int]:
        self._flush_gpu()
        for _, i in self.shared_list:
            yield i

    def cpu_order(self, min_free: float, cpu_only_nodes: bool) -> Iterator[int]:
        self.flush()
        lst = self.cpu_only_list if cpu_only_nodes else self.cpu_gpu_list
        start = 0 if self.cpu_spread else bisect_left(lst, min_free, key=_entry_key)
        for pos in range(start, len(lst)):
            yield lst[pos][1]

    # The same orders restricted to a few nodes (a topology domain): the members of the list among them, sorted by
    # (key, index) as the list is, from the same start; cheaper than walking the whole list past the others.

    def gpu_order_within(self, min_free: float, within: Iterable[int]) -> list[int]:
        self._flush_gpu()
        return _within(self.gpu_key, self.is_gpu, within, None if self.gpu_spread else min_free)

    def shared_order_within(self, within: Iterable[int]) -> list[int]:
        self._flush_gpu()
        return _within(self.gpu_key, self.in_shared, within, None)

    def cpu_order_within(self, min_free: float, cpu_only_nodes: bool, within: Iterable[int]) -> list[int]:
        self.flush()
        return _within(self.cpu_key, self.is_cpu_only if cpu_only_nodes else self.is_gpu, within,
                       None if self.cpu_spread else min_free)

    def sort_key(self, node: NodeState, cpu_task: bool) -> tuple[float, int]:
        """Within one score tier: the placement key, then name (index) order."""
        self.flush()
        key = self.cpu_key[node.idx] if cpu_task else self.gpu_key[node.idx]
        return key, node.idx


def _within(keys: list[float], member: bytearray, within: Iterable[int], min_free: float | None) -> list[int]:
    """The nodes of `within` that are members, by (key, index), from the first with a key of at least `min_free`
    (None: all): what walking the sorted list from `bisect_left(lst, (min_free, -1))` gives among them."""
    if min_free is None:
        entries = [(keys[i], i) for i in within if member[i]]
    else:
        entries = [(k, i) for i in within if member[i] and (k := keys[i]) >= min_free]
    entries.sort()
    return [i for _, i in entries]


def _remove(lst: list[tuple[float, int]], key: float, idx: int) -> None:
    pos = bisect_left(lst, (key, idx))
    if pos < len(lst) and lst[pos] == (key, idx):
        del lst[pos]


def _move(lst: list[tuple[float, int]], old: float, new: float, idx: int) -> None:
    """Remove (old, idx) and insert (new, idx), keeping the list sorted, as `_remove` then `insort` leave it. The
    new place is searched on the side of the old one it can be on; when it is the old place itself (most moves: a
    placed task's node passes no other node's key), the entry is replaced, without shifting the list twice."""
    entry = (new, idx)
    pos = bisect_left(lst, (old, idx))
    if pos == len(lst) or lst[pos] != (old, idx):
        insort(lst, entry)
        return
    # Lower: every entry from pos on is >= (old, idx) > entry, so the place is at or before pos; it is pos when the
    # entry before stays below. Higher: every entry before pos is < (old, idx) < entry, so the place is after pos,
    # one less once the old entry is out; it is pos when the entry after stays above.
    if new < old:
        if pos == 0 or lst[pos - 1] < entry:
            lst[pos] = entry
            return
        to = bisect_left(lst, entry, 0, pos - 1)
    else:
        if pos + 1 == len(lst) or lst[pos + 1] > entry:
            lst[pos] = entry
            return
        to = bisect_left(lst, entry, pos + 2) - 1
    del lst[pos]
    lst.insert(to, entry)
