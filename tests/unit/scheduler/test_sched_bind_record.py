"""The Bind record: immutable, hashable and picklable (the carry and the writer's thread share it), and its
BindRequest fields unchanged."""

from __future__ import annotations

import pickle

import pytest

from operators.core import keys
from operators.scheduler.decide.decisions import Bind, Decisions


def _bind() -> Bind:
    return Bind("ns", "p-0", "pg", "n1", keys.RESOURCE_TYPE_FRACTION, ("g1",), "0.50", 1, (("c", '{"a": 1}'),))


def test_a_bind_cannot_be_changed() -> None:
    b = _bind()
    with pytest.raises(AttributeError):
        b.node = "n2"  # type: ignore[misc]
    assert b.node == "n1"


def test_binds_hash_compare_and_pickle_by_their_fields() -> None:
    b = _bind()
    same = _bind()
    assert b == same and hash(b) == hash(same) and len({b, same}) == 1
    assert b != Bind("ns", "p-0", "pg", "n2", keys.RESOURCE_TYPE_FRACTION, ("g1",), "0.50", 1, (("c", '{"a": 1}'),))
    assert pickle.loads(pickle.dumps(Decisions(binds=[b]))).binds == [b]


def test_defaults_and_to_dict() -> None:
    plain = Bind("ns", "p", "pg", "n", keys.RESOURCE_TYPE_REGULAR)
    assert plain.to_dict() == {"namespace": "ns", "pod": "p", "podGroup": "pg", "node": "n",
                               "resourceType": keys.RESOURCE_TYPE_REGULAR, "gpuGroups": [], "gpuPortion": "0.00",
                               "gpuCount": 0}
    assert _bind().to_dict()["resourceClaimAllocations"] == [{"name": "c", "allocation": {"a": 1}}]
