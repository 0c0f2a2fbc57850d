"""The chart (charts/kai-scheduler) and the pinned helm, for the chart tests (tests/static renders it, the
integration test installs it). Importing this builds nothing: helm is built into the cache, if it is not there
yet, on the first render (`make test` builds it beforehand)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "kai-scheduler"
NS = "kai-scheduler"
KAI_VALUES = ROOT / "tests" / "data" / "kai-values.yaml"  # a values file written for KAI's own chart
KAI_DEFAULT_VALUES = ROOT / "tests" / "data" / "kai-values-defaults.yaml"  # KAI's chart defaults, v0.18 keys

# Deployment name (= pod label app) -> `kai run` component and ServiceAccount, as KAI's operator creates them.
DEPLOYMENTS = {
    "admission": ("admission", "admission"),
    "binder": ("binder", "binder"),
    "pod-grouper": ("pod-grouper", "pod-grouper"),
    "podgroup-controller": ("podgroup-controller", "podgroup-controller"),
    "queue-controller": ("queue-controller", "queue-controller"),
    "kai-scheduler-default": ("scheduler", "scheduler"),
}


@functools.cache
def helm_binary() -> str:
    """Our pinned helm, built into the cache if it is not there yet."""
    from operators.devcluster import build

    return str(build.ensure_binaries().helm)


# The chart's own component templates (its `operator.enabled: false` path), which the static chart tests check;
# the operator's rendering is held to them by tests/static/test_operator_chart_equivalence.py.
CHART_RENDERS = "operator.enabled=false"


def render(*sets: str, values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """`helm template` with `sets` (after CHART_RENDERS unless a set names operator.enabled) and `values`."""
    argv = [helm_binary(), "template", "kai-scheduler", str(CHART), "-n", NS]
    chosen = any(s.startswith("operator.enabled=") for s in sets) or "enabled" in ((values or {}).get("operator") or {})
    if not chosen:
        argv += ["--set", CHART_RENDERS]
    for s in sets:
        argv += ["--set", s]
    if values:
        argv += ["-f", "-"]
    proc = subprocess.run(argv, capture_output=True, text=True, input=yaml.safe_dump(values or {}), timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def rules_of(docs: list[dict[str, Any]], sa: str) -> list[dict[str, Any]]:
    """The ClusterRole rules bound to ServiceAccount `sa` of the chart's namespace."""
    roles = by_kind(docs, "ClusterRole")
    rules: list[dict[str, Any]] = []
    for binding in by_kind(docs, "ClusterRoleBinding").values():
        if any(s["name"] == sa and s.get("namespace") == NS for s in binding["subjects"]):
            rules += roles[binding["roleRef"]["name"]]["rules"]
    return rules


def allows(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)
