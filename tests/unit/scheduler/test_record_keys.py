"""Values the records derive once for the hot path (GPU request flags and hashes, constraint hashes, fit keys)
must behave exactly like the fields they come from: equal objects hash equal, copies and pickles agree, and a
record rebuilt with other fields derives its key again."""

from __future__ import annotations

import copy
import pickle
from dataclasses import replace

from operators.core.resources import GpuRequest, gpu_request
from operators.scheduler.decide.records import Constraints, WeightedPodAffinityTerm
from operators.scheduler.decide.snapshot import snapshot_from_objects
from tests.unit.scheduler.sched_builders import pod


def test_gpu_requests_of_equal_pods_are_one_shared_object_with_the_fields_hash() -> None:
    whole = gpu_request({}, {"nvidia.com/gpu": 2})
    assert whole is gpu_request(None, {"nvidia.com/gpu": 2})
    half = gpu_request({"gpu-fraction": "0.5"}, {})
    assert half is gpu_request({"gpu-fraction": "0.5"}, {}) and half.is_shared and not whole.is_shared
    assert gpu_request({"gpu-memory": "2000"}, {}).is_shared
    # A request built by hand equals the shared one and hashes alike, so either finds the other in a set.
    assert GpuRequest(whole=2) == whole and hash(GpuRequest(whole=2)) == hash(whole)
    assert GpuRequest(whole=0, portion=0.5) in {half}
    assert replace(half, portion=None).is_shared is False
    for clone in (copy.copy(half), copy.deepcopy(half), pickle.loads(pickle.dumps(half))):
        assert clone == half and hash(clone) == hash(half) and clone.is_shared


def test_constraints_hash_once_and_equal_constraints_still_hash_equal() -> None:
    a = Constraints(node_selector=(("zone", "a"),), configmaps=("ns/cm",))
    b = Constraints(node_selector=(("zone", "a"),), configmaps=("ns/cm",))
    assert hash(a) == hash(a) == hash(b) and a == b and len({a, b}) == 1
    assert Constraints(node_selector=(("zone", "b"),)) not in {a}
    clone = pickle.loads(pickle.dumps(a))
    assert clone == a and hash(clone) == hash(a)
    term = WeightedPodAffinityTerm(weight=10, term=None)  # type: ignore[arg-type]
    preferring = replace(a, preferred_pod_anti_affinity=(term,))
    assert preferring != a  # preferences are part of equality, not of the feasibility key
    assert preferring.hard == a and hash(preferring.hard) == hash(a)


def test_fit_key_is_derived_from_the_record_and_again_on_replace() -> None:
    snap = snapshot_from_objects([pod("p1", "pg", gpus=1, cpu="2"), pod("p2", "pg", gpus=1, cpu="2"),
                                  pod("p3", "pg", gpus=1, cpu="3")])
    p1, p2, p3 = sorted(snap.pods, key=lambda p: p.name)
    assert p1.fit_key == p2.fit_key and p1.fit_key != p3.fit_key
    assert p1.fit_key == (p1.constraints.hard, 2000, p1.memory, p1.gpu, p1.scalars, "")
    moved = replace(p1, cpu=3000)
    assert moved.fit_key == p3.fit_key
    assert replace(p1, nominated_node="n1").fit_key[-1] == "n1"
