"""`Room.slots` (actions/solver.py), written as integer comparisons: on random node states and Room shapes it is
its definition, the pod-count room and each asked resource's room (idle plus releasing, divided by the smallest
request), the least of them, never below 0; a node outside the mask has none."""

from __future__ import annotations

import random
from types import SimpleNamespace

from operators.scheduler.decide.actions.solver import Room


def _definition(room: Room, node: SimpleNamespace) -> int:
    if not room.mask[node.idx]:
        return 0
    rooms = [node.max_pods - node.n_pods]
    for need, idle, rel in ((room.gpu, node.idle_gpu, node.rel_gpu), (room.cpu, node.idle_cpu, node.rel_cpu),
                            (room.mem, node.idle_mem, node.rel_mem)):
        if need > 0:
            rooms.append((idle + rel) // need)
    return max(min(rooms), 0)


def test_slots_are_the_least_room_over_pods_and_resources() -> None:
    rnd = random.Random(26)
    seen_by: set[str] = set()
    for _ in range(3000):
        room = Room.__new__(Room)
        room.need = rnd.randint(1, 8)
        room.gpu, room.cpu, room.mem = (rnd.choice([0, 0, 1, 2, 4, 8]), rnd.choice([0, 500, 1000, 3000]),
                                        rnd.choice([0, 1 << 30, 3 << 30]))
        room.mask = bytearray(rnd.choice([0, 1, 1, 1]) for _ in range(2))
        # Idle amounts may be negative (a pod over-committed at open), releasing ones make up for them.
        node = SimpleNamespace(idx=rnd.randrange(2), max_pods=rnd.randint(0, 12), n_pods=rnd.randint(0, 14),
                               idle_gpu=rnd.randint(-2, 8), rel_gpu=rnd.randint(0, 4),
                               idle_cpu=rnd.randint(-1000, 16000), rel_cpu=rnd.randint(0, 4000),
                               idle_mem=rnd.randint(-(1 << 30), 16 << 30), rel_mem=rnd.randint(0, 4 << 30))
        want = _definition(room, node)
        assert room.slots(node) == want, (room.gpu, room.cpu, room.mem, vars(node))
        if want > 0:  # which bound decided, to show each one was the least at some point
            bounds = {"pods": node.max_pods - node.n_pods}
            if room.gpu > 0:
                bounds["gpu"] = (node.idle_gpu + node.rel_gpu) // room.gpu
            if room.cpu > 0:
                bounds["cpu"] = (node.idle_cpu + node.rel_cpu) // room.cpu
            if room.mem > 0:
                bounds["mem"] = (node.idle_mem + node.rel_mem) // room.mem
            seen_by.update(k for k, v in bounds.items() if v == want and list(bounds.values()).count(v) == 1)
    assert seen_by == {"pods", "gpu", "cpu", "mem"}
