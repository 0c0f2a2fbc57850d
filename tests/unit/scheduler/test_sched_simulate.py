"""`kai simulate` end to end on YAML, and configuration loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from sched_builders import PRIORITY_CLASSES, gang, node, pod, podgroup, queue

from operators.core.durations import parse_seconds as parse_duration
from operators.scheduler.decide.config import SchedulerConfig, config_from_mapping, load_config
from operators.scheduler.shell.simulate import main, run_simulation
from tests.support import EXAMPLES

RAY = [
    podgroup("pg-raycluster-sample-1", "team-a", 3,
             subgroups=[{"name": "headgroup", "minMember": 1}, {"name": "worker", "minMember": 2}],
             namespace="default"),
    pod("raycluster-sample-head", "pg-raycluster-sample-1", subgroup="headgroup", namespace="default",
        labels={"ray.io/node-type": "head"}, memory="2Gi"),
    pod("raycluster-sample-worker-a", "pg-raycluster-sample-1", subgroup="worker", namespace="default"),
    pod("raycluster-sample-worker-b", "pg-raycluster-sample-1", subgroup="worker", namespace="default"),
]


def examples(relative: str) -> list[dict]:  # type: ignore[type-arg]
    return [d for d in yaml.safe_load_all((EXAMPLES / relative).read_text()) if d]


def write_stream(path: Path, objs: list[dict]) -> Path:  # type: ignore[type-arg]
    path.write_text(yaml.safe_dump_all(objs))
    return path


def test_kuberay_sample_and_too_large_gang(tmp_path: Path) -> None:
    queue_objs = [q for q in examples("ray-cluster.kai-scheduler.yaml") if q["kind"] == "Queue"]
    assert [q["metadata"]["name"] for q in queue_objs] == ["department-1", "team-a"]
    nodes = {"kind": "List", "items": [node("node-1", gpus=4), node("node-2", gpus=4)]}
    objs = [nodes, *queue_objs, *RAY, *gang("huge", 3, gpus=4, namespace="default", queue_name="team-a")]
    result = run_simulation(objs, SchedulerConfig(), now=0.0, cycles=2)
    binds = {b["pod"]: b["node"] for b in result["binds"]}
    assert set(binds) == {"raycluster-sample-head", "raycluster-sample-worker-a", "raycluster-sample-worker-b"}
    assert all(b["cycle"] == 1 for b in result["binds"])
    [u] = result["unschedulable"]
    assert u["podGroup"] == "huge"
    assert u["message"].startswith("PodSchedulingErrors: Resources were found for 2 pods while 3 are required")
    placement = {p["pod"]: (p["status"], p["node"]) for p in result["placement"]}
    assert placement["raycluster-sample-head"][0] == "Running" and placement["huge-0"] == ("Pending", "")
    names = [q["name"] for q in result["queues"]]
    assert names == ["department-1", "team-a"]


def test_cycles_apply_fractional_groups(tmp_path: Path) -> None:
    objs = [node("n", gpus=1), queue("q"), podgroup("a"), pod("a", "a", fraction="0.5")]
    first = run_simulation(objs, cycles=1)
    group = first["binds"][0]["gpuGroups"][0]
    objs += [podgroup("b", created="2025-03-01T00:00:00Z"), pod("b", "b", fraction="0.5")]
    objs[3] = pod("a", "a", fraction="0.5", node_name="n", phase="Running", gpu_group=group)
    second = run_simulation(objs, cycles=1)
    assert second["binds"][0]["gpuGroups"] == [group]


def test_quickstart_bare_pod_gets_implicit_podgroup() -> None:
    objs = [node("n", gpus=1), *examples("quickstart/default-queues.yaml"), *examples("quickstart/gpu-pod.yaml")]
    result = run_simulation(objs)
    assert [b["node"] for b in result["binds"]] == ["n"]
    assert result["binds"][0]["podGroup"].startswith("pg-")


def test_priority_example_build_pod_preempts_a_train_pod() -> None:
    """examples/priority: train work fills 4 nodes x 8 GPUs; the build pod evicts one train pod for its GPU."""
    job = examples("priority/train-job.yaml")[0]
    template = job["spec"]["template"]
    nodes = [node(f"n{i}", gpus=8) for i in range(4)]
    train = [{"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": f"train-job-{i}", "namespace": "default", "labels": template["metadata"]["labels"]},
              "spec": {**template["spec"], "nodeName": f"n{i}"}, "status": {"phase": "Running"}}
             for i in range(job["spec"]["parallelism"])]
    build = examples("priority/build-pod.yaml")[0]
    objs = [*nodes, *PRIORITY_CLASSES, *examples("queues-default-test.yaml"), *train]
    assert run_simulation(objs)["binds"] == []  # every GPU is taken
    result = run_simulation([*objs, build], cycles=2)
    [eviction] = result["evictions"]
    assert eviction["action"] == "preempt" and eviction["pod"].startswith("train-job-")
    [bind] = result["binds"]
    assert bind["pod"] == "build-pod" and bind["node"] == f"n{eviction['pod'][-1]}"


def test_deterministic_output() -> None:
    objs = [node(f"n{i}", gpus=2) for i in range(3)] + [queue("q")]
    for i in range(5):
        objs += [podgroup(f"f{i}"), pod(f"f{i}", f"f{i}", fraction="0.5")]
    assert run_simulation(objs) == run_simulation(list(reversed(objs)))


def test_cli_main_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write_stream(tmp_path / "in.yaml", [node("n", gpus=2), queue("q"), *gang("g", 2, gpus=1)])
    assert main(["-f", str(f), "-o", "json", "--now", "2025-01-01T00:00:00Z"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["binds"]) == 2 and set(out) >= {"binds", "pipelined", "evictions", "unschedulable", "queues"}
    assert out["annotations"][0]["value"] == "2025-01-01T00:00:00Z"
    assert main(["-f", str(f), "-o", "text", "--cycles", "2", "--placement-strategy", "gpu=spread"]) == 0
    text = capsys.readouterr().out
    assert "bind        ns/g-0 -> n" in text and "placement   ns/g-1 Running n" in text
    assert main(["-f", str(f), "-o", "yaml", "--actions", "allocate,reclaim"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["binds"]
    assert main(["-f", str(tmp_path / "missing.yaml")]) == 2
    assert main(["-f", str(f), "--actions", "bogus"]) == 2


def test_config_loading(tmp_path: Path) -> None:
    shard = {"apiVersion": "kai.scheduler/v1", "kind": "SchedulingShard", "metadata": {"name": "default"},
             "spec": {"placementStrategy": {"gpu": "spread"}, "queueDepthPerAction": {"allocate": 5},
                      "args": {"default-staleness-grace-period": "2m", "schedule-period": "500ms"},
                      "actions": {"consolidation": {"enabled": False}, "preempt": {"priority": 600}}}}
    path = tmp_path / "shard.yaml"
    path.write_text(yaml.safe_dump(shard))
    cfg = load_config(path)
    assert cfg.gpu_placement == "spread" and cfg.cpu_placement == "binpack"
    assert cfg.queue_depth_per_action == {"allocate": 5}
    assert cfg.stale_grace_period == 120 and cfg.schedule_period == 0.5
    assert cfg.actions == ("preempt", "allocate", "reclaim", "stalegangeviction")
    assert "consolidation" not in config_from_mapping({"placementStrategy": {"cpu": "spread"}}).effective_actions
    assert SchedulerConfig().effective_actions[0] == "allocate"
    assert parse_duration("1m30s") == 90 and parse_duration("-1s") == -1
    with pytest.raises(ValueError):
        config_from_mapping({"placementStrategy": {"gpu": "diagonal"}})
