"""bench/kai_snapshot.py: the bench cluster written as KAI's snapshot zip holds every object with its key fields."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def kai_snapshot() -> Any:
    saved = list(sys.path)  # the module puts bench/ and the checkout first on the path: restored after
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("kai_snapshot")
    finally:
        sys.path[:] = saved


def _by_name(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objs}


@pytest.mark.parametrize("case", ["plain", "gang1000"])
def test_round_trip_keeps_every_object_and_its_key_fields(kai_snapshot: Any, tmp_path: Path, case: str) -> None:
    objects = kai_snapshot.bench_objects(case, 24, topology=True)
    path = tmp_path / "snap.zip"
    kai_snapshot.write(str(path), kai_snapshot.snapshot(objects))
    raw = kai_snapshot.read(str(path))["rawObjects"]

    for kind, key in (("Pod", "pods"), ("Node", "nodes"), ("PodGroup", "podGroups"), ("Queue", "queues"),
                      ("PriorityClass", "priorityClasses"), ("Topology", "topologies")):
        want = _by_name([dict(o) for o in objects if o["kind"] == kind])
        got = _by_name(raw[key])
        assert want, kind
        assert got.keys() == want.keys(), kind

    pods = _by_name(raw["pods"])
    groups = _by_name(raw["podGroups"])
    for o in objects:
        meta = o["metadata"]
        if o["kind"] == "Pod":
            pod = pods[(meta["namespace"], meta["name"])]
            assert pod["spec"]["schedulerName"] == "kai-scheduler"
            assert pod["spec"].get("nodeName") == o["spec"].get("nodeName")
            assert pod["status"]["phase"] == o["status"]["phase"]
            assert pod["metadata"]["annotations"] == meta["annotations"]
            assert pod["metadata"]["labels"] == meta.get("labels")
            assert (meta["namespace"], meta["annotations"]["pod-group-name"]) in groups
            # KAI counts requests only: the GPUs, set as a limit, must be requested as the API server defaults them.
            for c_in, c_out in zip(o["spec"]["containers"], pod["spec"]["containers"], strict=True):
                limits = c_in["resources"].get("limits", {})
                assert c_out["resources"]["requests"] == {**limits, **c_in["resources"]["requests"]}
        elif o["kind"] == "PodGroup":
            assert groups[(meta["namespace"], meta["name"])]["spec"] == o["spec"]
        elif o["kind"] == "Queue":
            assert _by_name(raw["queues"])[("", meta["name"])]["spec"] == o["spec"]
        elif o["kind"] == "Node":
            status = _by_name(raw["nodes"])[("", meta["name"])]["status"]
            assert status["allocatable"] == status["capacity"] == o["status"]["allocatable"]
            assert _by_name(raw["nodes"])[("", meta["name"])]["metadata"]["labels"] == meta["labels"]
    if case == "gang1000":
        assert sum(1 for p in raw["pods"] if p["metadata"]["annotations"]["pod-group-name"] == "big-gang") == 1000
        assert groups[("ns-big", "big-gang")]["spec"]["minMember"] == 1000


def test_config_is_kai_operator_default(kai_snapshot: Any) -> None:
    snap = kai_snapshot.snapshot([])
    assert snap["config"]["actions"] == "allocate, consolidation, reclaim, preempt, stalegangeviction"
    names = [p["name"] for p in snap["config"]["tiers"][0]["plugins"]]
    assert names[:3] == ["predicates", "proportion", "priority"]
    assert names[-3:] == ["gpupack", "nodeplacement", "gpusharingorder"]
    assert "gpuspread" not in names
    assert snap["schedulerParams"]["schedulerName"] == "kai-scheduler"


def test_a_kind_kai_has_no_place_for_is_refused(kai_snapshot: Any) -> None:
    with pytest.raises(ValueError, match="Deployment"):
        kai_snapshot.snapshot([{"kind": "Deployment", "metadata": {"name": "x"}}])
