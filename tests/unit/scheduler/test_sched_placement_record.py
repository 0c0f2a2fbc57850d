"""The search's placement record (a NamedTuple since it is built at every placement) keeps what the frozen dataclass
gave: no field can be assigned, equal placements hash and compare equal and survive pickling (an `Op` holding one
is part of a statement), the defaults hold, and the fields read by name."""

from __future__ import annotations

import pickle

import pytest

from operators.scheduler.decide.placement.gpus import GpuChoice
from operators.scheduler.decide.placement.search import Placement


def test_placement_is_immutable_hashable_and_picklable() -> None:
    choice = GpuChoice(("g0", "g1"), (True, False), (False, False), False)
    p = Placement(3, True, choice, 250_000)
    assert (p.node, p.pipeline, p.gpu, p.portion) == (3, True, choice, 250_000)
    for field in ("node", "pipeline", "gpu", "portion"):
        with pytest.raises(AttributeError):
            setattr(p, field, None)
    q = Placement(node=3, pipeline=True, gpu=GpuChoice(("g0", "g1"), (True, False), (False, False), False),
                  portion=250_000)
    assert p == q and hash(p) == hash(q) and len({p, q}) == 1
    assert p != Placement(3, False, choice, 250_000) and p != Placement(4, True, choice, 250_000)
    assert pickle.loads(pickle.dumps(p)) == p
    plain = Placement(7, False)
    assert plain.gpu is None and plain.portion == 0 and bool(plain)
