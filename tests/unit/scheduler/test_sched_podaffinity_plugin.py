"""The `podaffinity` score plugin through `kai simulate`: preferred inter-pod (anti-)affinity orders the nodes
above every other node-order term, and never filters a node."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from sched_builders import bound, cycle, node, pod, podgroup, queue

from operators.scheduler.decide.config import config_from_mapping
from operators.scheduler.decide.placement.search import Placer
from operators.scheduler.shell.simulate import main

HOSTNAME = "kubernetes.io/hostname"


def _preferred(kind: str, weight: int = 10) -> dict[str, Any]:
    return {"affinity": {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": weight, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "anchor"}},
                                               "topologyKey": HOSTNAME}}]}}}


def _simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], objs: list[dict[str, Any]]) -> dict[str, str]:
    f = tmp_path / "cluster.yaml"
    f.write_text(yaml.safe_dump_all(objs))
    assert main(["-f", str(f), "-o", "json", "--actions", "allocate"]) == 0
    out = json.loads(capsys.readouterr().out)
    return {b["pod"]: b["node"] for b in out["binds"]}


def _cluster(spec_extra: dict[str, Any] | None, other_cpu: str = "16") -> list[dict[str, Any]]:
    # CPU binpack prefers the node with the least free CPU: node-x, where the anchor runs.
    return [
        node("node-x", gpus=0, cpu="16"), node("node-y", gpus=0, cpu=other_cpu), queue("q"),
        pod("anchor", None, cpu="4", node_name="node-x", phase="Running", labels={"app": "anchor"}),
        podgroup("pg-new"), pod("new", "pg-new", cpu="4", spec_extra=spec_extra),
    ]


def test_without_preference_binpack_picks_the_anchor_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    assert _simulate(tmp_path, capsys, _cluster(None)) == {"new": "node-x"}


def test_preferred_anti_affinity_lands_elsewhere_when_another_node_fits(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _simulate(tmp_path, capsys, _cluster(_preferred("podAntiAffinity"))) == {"new": "node-y"}


def test_preferred_affinity_lands_with_the_anchor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Spread would pick the emptier node-y; the affinity keeps the pod with the anchor.
    objs = _cluster(_preferred("podAffinity"))
    assert _simulate(tmp_path, capsys, objs) == {"new": "node-x"}
    f = tmp_path / "spread.yaml"
    f.write_text(yaml.safe_dump_all(objs))
    assert main(["-f", str(f), "-o", "json", "--actions", "allocate", "--placement-strategy", "cpu=spread"]) == 0
    assert {b["pod"]: b["node"] for b in json.loads(capsys.readouterr().out)["binds"]} == {"new": "node-x"}
    plain = _cluster(None)
    f.write_text(yaml.safe_dump_all(plain))
    assert main(["-f", str(f), "-o", "json", "--actions", "allocate", "--placement-strategy", "cpu=spread"]) == 0
    assert {b["pod"]: b["node"] for b in json.loads(capsys.readouterr().out)["binds"]} == {"new": "node-y"}


def test_preferred_anti_affinity_takes_the_anchor_node_when_only_it_fits(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # node-y has 2 cores: the 4-core pod fits only on node-x; a preference never filters.
    assert _simulate(tmp_path, capsys, _cluster(_preferred("podAntiAffinity"), other_cpu="2")) == {"new": "node-x"}


def test_symmetry_an_existing_pods_anti_affinity_pushes_the_newcomer_away(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    objs = _cluster(None)
    objs[3] = pod("anchor", None, cpu="4", node_name="node-x", phase="Running", labels={"app": "anchor"},
                  spec_extra={"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                      {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}},
                                                         "topologyKey": HOSTNAME}}]}}})
    objs[5] = pod("new", "pg-new", cpu="4", labels={"app": "web"})
    assert _simulate(tmp_path, capsys, objs) == {"new": "node-y"}


def _binds(objs: list[dict[str, Any]], **plugin: Any) -> dict[str, str]:
    cfg = config_from_mapping({"plugins": {"podaffinity": plugin}}) if plugin else None
    return bound(cycle(objs, cfg))


def test_disabled_plugin_ignores_preferences() -> None:
    objs = _cluster(_preferred("podAntiAffinity"))
    assert _binds(objs) == {"new": "node-y"}
    assert _binds(objs, enabled=False) == {"new": "node-x"}


def test_hard_pod_affinity_weight_scores_placed_pods_required_affinity() -> None:
    # The anchor requires to be with app=web pods: a web pod is drawn to it (weight 1), unless the weight is 0.
    objs = _cluster(None, other_cpu="32")  # spread by CPU: node-y (emptier) first
    objs[3] = pod("anchor", None, cpu="4", node_name="node-x", phase="Running", labels={"app": "anchor"},
                  spec_extra={"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                      {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME}]}}})
    objs[5] = pod("new", "pg-new", cpu="4", labels={"app": "web"})
    spread = {"nodeplacement": {"arguments": {"cpu": "spread"}}}
    assert bound(cycle(objs, config_from_mapping({"plugins": spread}))) == {"new": "node-x"}
    cfg = config_from_mapping({"plugins": {**spread, "podaffinity": {"arguments": {"hardPodAffinityWeight": 0}}}})
    assert bound(cycle(objs, cfg)) == {"new": "node-y"}


@pytest.mark.parametrize("arguments", [{"hardPodAffinityWeight": 101}, {"hardPodAffinityWeight": "x"},
                                       {"normalize": "maybe"}])
def test_bad_arguments_are_refused(arguments: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"hardPodAffinityWeight|normalize"):
        config_from_mapping({"plugins": {"podaffinity": {"arguments": arguments}}})


def test_only_tasks_with_something_to_score_take_the_scored_search(monkeypatch: pytest.MonkeyPatch) -> None:
    scored: list[str] = []
    original = Placer._scored

    def spy(self: Placer, task: Any, mask: bytearray) -> Any:
        scored.append(task.rec.name)
        return original(self, task, mask)

    monkeypatch.setattr(Placer, "_scored", spy)
    objs = [*_cluster(_preferred("podAntiAffinity")), podgroup("pg-plain"), pod("plain", "pg-plain", cpu="1"),
            podgroup("pg-web"), pod("web", "pg-web", cpu="1", labels={"app": "web"})]
    objs[3] = pod("anchor", None, cpu="4", node_name="node-x", phase="Running", labels={"app": "anchor"},
                  spec_extra={"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                      {"weight": 5, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}},
                                                        "topologyKey": HOSTNAME}}]}}})
    d = bound(cycle(objs))
    assert d["new"] == "node-y" and d["web"] == "node-y"
    assert sorted(scored) == ["new", "web"]  # `plain` is selected by no term: the indexed order


def _random_cluster(seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    apps = ["a", "b", "c"]

    def terms() -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kind in ("podAffinity", "podAntiAffinity"):
            chosen = [{"weight": rng.randint(1, 100), "podAffinityTerm": {
                "labelSelector": {"matchLabels": {"app": rng.choice(apps)}},
                "topologyKey": rng.choice([HOSTNAME, "zone"])}} for _ in range(rng.randint(0, 2))]
            if chosen:
                out[kind] = {"preferredDuringSchedulingIgnoredDuringExecution": chosen}
        return {"affinity": out} if out else {}

    objs: list[dict[str, Any]] = [queue("q")]
    for i in range(6):
        objs.append(node(f"n{i}", gpus=0, cpu="16", labels={"zone": f"z{i % 3}"}))
    for i in range(12):
        objs.append(pod(f"run-{i}", None, cpu=str(rng.randint(1, 4)), node_name=f"n{rng.randrange(6)}",
                        phase="Running", labels={"app": rng.choice(apps)}, spec_extra=terms()))
    for i in range(8):
        objs += [podgroup(f"pg-{i}", created=f"2025-01-01T00:00:{i:02d}Z"),
                 pod(f"new-{i}", f"pg-{i}", cpu=str(rng.randint(1, 6)), labels={"app": rng.choice(apps)},
                     spec_extra=terms())]
    return objs


def _naive_raw(incoming: dict[str, Any], node_labels: dict[str, str], placed: list[tuple[dict[str, Any],
               dict[str, str]]]) -> int:
    """kube-scheduler's raw score by brute force over (placed pod, term) pairs (matchLabels terms only)."""
    def terms(p: dict[str, Any]) -> list[tuple[int, dict[str, str], str]]:
        aff = p["spec"].get("affinity") or {}
        out = []
        for kind, sign in (("podAffinity", 1), ("podAntiAffinity", -1)):
            for t in (aff.get(kind) or {}).get("preferredDuringSchedulingIgnoredDuringExecution") or ():
                term = t["podAffinityTerm"]
                out.append((sign * t["weight"], term["labelSelector"]["matchLabels"], term["topologyKey"]))
        return out

    def selects(match: dict[str, str], p: dict[str, Any]) -> bool:
        labels = p["metadata"]["labels"]
        return all(labels.get(k) == v for k, v in match.items())

    total = 0
    for other, other_labels in placed:
        for weight, match, key in terms(incoming):
            if selects(match, other) and key in node_labels and node_labels.get(key) == other_labels.get(key):
                total += weight
        for weight, match, key in terms(other):
            if selects(match, incoming) and key in node_labels and node_labels.get(key) == other_labels.get(key):
                total += weight
    return total


@pytest.mark.parametrize("seed", range(20))
def test_each_pod_goes_to_a_best_scoring_fitting_node(seed: int) -> None:
    objs = _random_cluster(seed)
    decisions = cycle(objs)
    nodes = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "Node"}
    pods = {o["metadata"]["name"]: o for o in objs if o.get("kind") == "Pod"}
    free = {n: 16000 for n in nodes}
    placed = []
    for p in pods.values():
        if p["spec"].get("nodeName"):
            free[p["spec"]["nodeName"]] -= int(p["spec"]["containers"][0]["resources"]["requests"]["cpu"]) * 1000
            placed.append((p, nodes[p["spec"]["nodeName"]]["metadata"]["labels"]))
    assert len(decisions.binds) == 8
    for b in decisions.binds:  # in allocation order
        p = pods[b.pod]
        cpu = int(p["spec"]["containers"][0]["resources"]["requests"]["cpu"]) * 1000
        scores = {n: _naive_raw(p, nodes[n]["metadata"]["labels"], placed) for n in nodes if free[n] >= cpu}
        assert scores[b.node] == max(scores.values()), (b.pod, b.node, scores)
        free[b.node] -= cpu
        placed.append((p, nodes[b.node]["metadata"]["labels"]))


@pytest.mark.parametrize("seed", range(20))
def test_normalized_and_raw_scores_choose_the_same_nodes(seed: int) -> None:
    # The best fitting node has the highest raw score and so 100 normalized points, every other fitting node
    # fewer: with a point worth more than all built-in terms together, both pick the same node.
    objs = _random_cluster(seed)
    normalized = _binds(objs)
    assert normalized == _binds(objs, arguments={"normalize": False})
    assert normalized != _binds(objs, enabled=False)  # the preferences change some placement


def test_normalization_is_over_the_nodes_the_pod_fits_on() -> None:
    # Raw scores: node-a 0, node-b 1, node-c 200 (two pods the weight-100 term selects; node-c is full). Over
    # the fitting nodes node-b gets 100 points and wins; over every node it would get int(100 * 1/200) = 0
    # points, a tie with node-a that binpack breaks toward the fuller node-a.
    objs = [
        node("node-a", gpus=0, cpu="16"), node("node-b", gpus=0, cpu="16"), node("node-c", gpus=0, cpu="16"),
        queue("q"),
        pod("filler", None, cpu="8", node_name="node-a", phase="Running"),
        pod("one", None, cpu="1", node_name="node-b", phase="Running", labels={"app": "one"}),
        pod("big-1", None, cpu="7", node_name="node-c", phase="Running", labels={"app": "big"}),
        pod("big-2", None, cpu="7", node_name="node-c", phase="Running", labels={"app": "big"}),
        podgroup("pg-new"),
        pod("new", "pg-new", cpu="4", spec_extra={"affinity": {"podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "one"}},
                                                  "topologyKey": HOSTNAME}},
                {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "big"}},
                                                    "topologyKey": HOSTNAME}}]}}}),
    ]
    assert _binds(objs, enabled=False) == {"new": "node-a"}
    assert _binds(objs) == {"new": "node-b"}
    assert _binds(objs, arguments={"normalize": False}) == {"new": "node-b"}


def test_a_pod_with_preferences_that_fits_nowhere_is_explained_as_any_other() -> None:
    objs = _cluster(_preferred("podAntiAffinity"))
    objs[5] = pod("new", "pg-new", cpu="20", spec_extra=_preferred("podAntiAffinity"))
    d = cycle(objs)
    assert not d.binds
    [u] = d.unschedulable
    assert "2 node(s) didn't have enough resources: CPU cores" in u.message
