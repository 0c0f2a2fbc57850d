"""A bounded fuzz run of every admission boundary through the real API server and its webhooks.

Hypothesis generates malformed Queues (wrong types, negative and huge quotas, NaN-like strings, parent cycles),
PodGroups (minMember and subGroups nonsense) and kai-scheduler pods (bad gpu-fraction / gpu-memory / NaN /
Inf annotations). Each object is sent to the API server as a user would; it must be refused with a 4xx whose
message names the field at fault, or accepted. No answer may be a 5xx or a webhook failure, no component may
restart, and the scheduler must still schedule an ordinary pod afterwards. The counts are printed (run with
-s); KAI_FUZZ_N sets the objects per boundary (default 60) and KAI_FUZZ_SEED the seed.
"""

from __future__ import annotations

import copy
import json
import os
import random
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from operators.core.kube import MERGE_PATCH, RawError, raw
from tests.support import TEST_LABEL, Cluster, poll

pytestmark = pytest.mark.cluster

T = TypeVar("T")
N = int(os.environ.get("KAI_FUZZ_N", "60"))
SEED = int(os.environ.get("KAI_FUZZ_SEED", "1313"))
GPU = "nvidia.com/gpu"
# Answers that mean a component, not the input, is at fault.
FAILURE_MARKERS = ("failed calling webhook", "internal error", "Internal error", "panic", "Traceback")


def examples(strategy: st.SearchStrategy[T], count: int, salt: int) -> list[T]:
    """`count` distinct inputs drawn by hypothesis from `strategy`, reproducibly for the seed.

    Hypothesis starts from the simplest inputs; drawing ten times more and sampling spreads the live run over
    the whole space instead of spending it on empty objects.
    """
    pool: dict[str, T] = {}

    @settings(max_examples=10 * count, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @seed(SEED + salt)
    @given(strategy)
    def collect(value: T) -> None:
        pool.setdefault(json.dumps(value, sort_keys=True, default=str), value)

    collect()
    keys = sorted(pool)
    return [pool[key] for key in random.Random(SEED + salt).sample(keys, min(count, len(keys)))]


# --- what to send ---------------------------------------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(min_size=1, max_size=4),
                                                                                 inner, max_size=2),
                    max_leaves=4)
NAN_LIKE = st.sampled_from(["NaN", "nan", "Infinity", "-Inf", "1e309", "-1e309", "0x1p-2", "1_0", "", " ", "two",
                            "½", "-0", "5Gi"])
QUOTA_VALUES = st.one_of(
    st.sampled_from([-1, 0, 1, -2, 2, 10**15, 2**63 - 1, 2**63, 10**30, 1e308, -1e308, 0.5, -0.5]),
    st.integers(-(10**6), 10**6), st.floats(allow_nan=False, allow_infinity=False), NAN_LIKE, st.booleans(), JSON)
SETTINGS = st.fixed_dictionaries({}, optional={"quota": QUOTA_VALUES, "limit": QUOTA_VALUES,
                                               "overQuotaWeight": QUOTA_VALUES}) | JSON
QUEUE_NAMES = ["qa", "qb", "qc", "qd"]


@st.composite
def queue_specs(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    resources = draw(st.fixed_dictionaries({}, optional={"cpu": SETTINGS, "gpu": SETTINGS, "memory": SETTINGS})
                     | JSON)
    spec: dict[str, Any] = draw(st.fixed_dictionaries({}, optional={
        "parentQueue": st.sampled_from(QUEUE_NAMES) | JSON, "priority": QUOTA_VALUES,
        "preemptMinRuntime": st.sampled_from(["20s", "1h30m", "-5s", "5", "1d"]) | NAN_LIKE | JSON,
        "reclaimMinRuntime": st.sampled_from(["0", "5m"]) | NAN_LIKE}))
    if draw(st.integers(0, 9)):  # mostly with resources, so the deeper checks are reached
        spec["resources"] = resources
    return draw(st.sampled_from(QUEUE_NAMES)), spec


# Mostly well-typed subgroups, so that the webhook's tree checks (duplicates, unknown parents, cycles) are
# reached past the schema, with some of every wrong type and bound.
SUBGROUP_NAMES = st.sampled_from(["a", "b", "c", "d"])
SUBGROUPS = st.lists(st.fixed_dictionaries({
    "name": SUBGROUP_NAMES | SUBGROUP_NAMES | st.sampled_from(["", 7]),
    "minMember": st.sampled_from([1, 2, 1, 2, 1, 0, -1, 2**31, "2", None])}, optional={
    "parent": SUBGROUP_NAMES | SUBGROUP_NAMES | st.sampled_from(["", "zz", 3]) | JSON}), max_size=4)
PODGROUP_SPECS = st.fixed_dictionaries({}, optional={
    "minMember": st.sampled_from([1, 2, 3, 1, 2, 3, -1, 0, 2**31 - 1, 2**31, 2**63, "3", 1.5, None]),
    "queue": st.sampled_from(["default", "no-such-queue", ""]) | JSON,
    "subGroups": SUBGROUPS | SUBGROUPS | JSON,
    "preemptibility": st.sampled_from(["preemptible", "sometimes"]),
    "markUnschedulable": st.booleans() | JSON}) | JSON.map(lambda value: {"minMember": value})
ANNOTATION_VALUES = NAN_LIKE | st.sampled_from(["0.5", "0.25", "1", "0", "1.0", "1e-320", "2", "1024", "-3",
                                                "18446744073709551616", "9" * 300, "true", "main", "nope"])
POD_ANNOTATIONS = st.dictionaries(st.sampled_from(["gpu-fraction", "gpu-memory", "gpu-fraction-num-devices", "mps",
                                                   "gpu-fraction-container-name"]),
                                  ANNOTATION_VALUES, max_size=3)
POD_SHAPES = st.tuples(POD_ANNOTATIONS, st.sampled_from([None, "0", "1", "2"]), st.booleans())


# Inputs every run tries first, whatever the seed draws: a parent cycle built in two steps, a queue as its own
# parent, NaN-like, negative, huge and inverted quotas; a subgroup cycle; NaN / Inf GPU annotations.
UNLIMITED = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
FIXED_QUEUES: list[tuple[str, dict[str, Any]]] = [
    ("cy1", {"parentQueue": "cy2", "resources": {"cpu": UNLIMITED}}),  # parent missing: accepted
    ("cy2", {"parentQueue": "cy1", "resources": {"cpu": UNLIMITED}}),  # closes cy1 -> cy2 -> cy1: refused
    ("self", {"parentQueue": "self", "resources": {"cpu": UNLIMITED}}),
    ("nan", {"resources": {"gpu": {"quota": "NaN", "limit": -1}}}),
    ("neg", {"resources": {"gpu": {"quota": -5, "limit": -1}}}),
    ("inverted", {"resources": {"gpu": {"quota": 4, "limit": 2}}}),  # accepted, as KAI does
    ("huge", {"resources": {"gpu": {"quota": 1e308, "limit": -1}, "cpu": {"quota": 2**62, "limit": -1}}}),
]
FIXED_PODGROUPS: list[dict[str, Any]] = [
    {"minMember": 2, "subGroups": [{"name": "a", "parent": "b", "minMember": 1},
                                   {"name": "b", "parent": "a", "minMember": 1}]},
    {"minMember": 0},
    {"minMember": 2**31},
]
FIXED_PODS: list[tuple[dict[str, str], str | None, bool]] = [
    ({"gpu-fraction": "NaN"}, None, False), ({"gpu-fraction": "Inf"}, None, False),
    ({"gpu-fraction": "1e309"}, None, False), ({"gpu-fraction": "-0.5"}, None, False),
    ({"gpu-memory": "NaN"}, None, False), ({"gpu-memory": "-1"}, None, False),
    ({"gpu-fraction": "0.5", "gpu-fraction-num-devices": "NaN"}, None, False),
    ({"gpu-fraction": "0.5"}, None, False),  # accepted: the control
]


# --- sending and judging ---------------------------------------------------------------------------------------

@dataclass
class Tally:
    boundary: str
    tried: int = 0
    accepted: int = 0
    refused: int = 0
    by_webhook: int = 0  # refusals by our webhook (the rest are the API server's schema and field checks)
    server_errors: int = 0
    webhook_failures: int = 0
    samples: dict[int, str] = field(default_factory=dict)
    unnamed: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    by_code: Counter[int] = field(default_factory=Counter)

    def line(self) -> str:
        codes = ", ".join(f"{code}: {n}" for code, n in sorted(self.by_code.items()))
        return (f"{self.boundary:<9} tried {self.tried:>3}  refused {self.refused:>3} (webhook {self.by_webhook:>3})  "
                f"accepted {self.accepted:>3}  5xx {self.server_errors}  webhook failures {self.webhook_failures}  "
                f"({codes})")


async def send(tally: Tally, call: Callable[[], Any], names_field: Callable[[str], bool], shown: Any) -> str | None:
    """Send one input; None when accepted, else the answer's message."""
    tally.tried += 1
    try:
        await call()
    except RawError as exc:
        tally.by_code[exc.status] += 1
        try:
            message = str(json.loads(exc.body).get("message") or "")
        except ValueError:
            message = str(exc.body)
        if exc.status >= 500:
            tally.server_errors += 1
            tally.failures.append(f"{exc.status} for {shown!r}: {message}")
        elif any(marker in message for marker in FAILURE_MARKERS):
            tally.webhook_failures += 1
            tally.failures.append(f"{exc.status} for {shown!r}: {message}")
        else:
            tally.refused += 1
            tally.by_webhook += "denied the request" in message
            tally.samples.setdefault(exc.status * 10 + ("denied the request" in message), message)
            if not message or not names_field(message):
                tally.unnamed.append(f"{shown!r}: {message!r}")
        return message or "(no message)"
    tally.by_code[201] += 1
    tally.accepted += 1
    return None


async def create_or_update(api: Any, path: str, name: str, body: dict[str, Any]) -> None:
    """POST, or a merge patch of the spec when the object exists (the update path of the webhooks).

    Not server-side apply: the API server answers 500 ("failed to create typed patch object") to an apply whose
    values have the wrong type, before any webhook is called; a merge patch gets the schema's 422.
    """
    try:
        await raw(api, "POST", path, body=body)
    except RawError as exc:
        if exc.status != 409:
            raise
        await raw(api, "PATCH", f"{path}/{name}", body={"spec": body["spec"]}, content_type=MERGE_PATCH)


def queue_message_names_field(message: str) -> bool:
    return "spec." in message or "spec:" in message or "resources must be specified" in message or (
        "metadata.name" in message)


def podgroup_message_names_field(message: str) -> bool:
    return "spec." in message or "spec:" in message or "subgroup" in message or "parent " in message


def pod_message_names_field(message: str) -> bool:
    return any(word in message for word in ("gpu-fraction", "gpu-memory", "fraction count", "MPS", "GPU",
                                            "fraction container", "fraction request", "spec.", "metadata."))


def component_pids(cluster: Cluster) -> dict[str, int]:
    from operators.devcluster import cluster as dev

    state = dev.load_state(cluster.name)
    assert state is not None
    return dict(state.pids)


def component_logs(cluster: Cluster) -> dict[str, str]:
    from operators import components
    from operators.devcluster import cluster as dev

    state = dev.load_state(cluster.name)
    assert state is not None
    return {name: path for name, path in state.logs.items() if name in components.COMPONENTS}


def log_sizes(logs: dict[str, str]) -> dict[str, int]:
    return {name: os.path.getsize(path) if os.path.exists(path) else 0 for name, path in logs.items()}


def new_tracebacks(logs: dict[str, str], since: dict[str, int]) -> dict[str, int]:
    """Per component, tracebacks logged since `since` (a reconcile that fails is handled, not crashed, but a
    traceback means some input reached code that did not expect it)."""
    out = {}
    for name, path in logs.items():
        with open(path, "rb") as f:
            f.seek(since.get(name, 0))
            count = f.read().count(b"Traceback")
        if count:
            out[name] = count
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def healthz_ports(cluster: Cluster) -> list[int]:
    from operators.devcluster import cluster as dev

    state = dev.load_state(cluster.name)
    assert state is not None
    return sorted(ports["probe"] for ports in dev.component_ports(state.ports["apiserver"] - 443).values())


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


async def test_fuzz_every_admission_boundary(cluster: Cluster, namespace: str, api: Any) -> None:
    pids_before = component_pids(cluster)
    logs = component_logs(cluster)
    assert {"admission", "queue-controller", "podgroup-controller", "scheduler"} <= set(logs), logs
    sizes_before = log_sizes(logs)
    started = time.monotonic()
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    queue = f"fz-{namespace}"
    await raw(api, "POST", "/apis/scheduling.run.ai/v2/queues", body={
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
        "metadata": {"name": queue, "labels": {TEST_LABEL: "true"}},
        "spec": {"resources": {"cpu": unlimited, "gpu": unlimited, "memory": unlimited}}})

    # Queues: created, or updated by a merge patch, so that parents among a few names build and try to close cycles.
    queues = Tally("Queue")
    fixed: dict[str, str | None] = {}
    for name, spec in [*copy.deepcopy(FIXED_QUEUES), *examples(queue_specs(), N, 1)]:
        full = f"{name}-{namespace}"
        if isinstance(spec.get("parentQueue"), str):
            spec["parentQueue"] = f"{spec['parentQueue']}-{namespace}"
        body = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
                "metadata": {"name": full, "labels": {TEST_LABEL: "true"}}, "spec": spec}
        fixed[name] = await send(queues, lambda body=body, full=full: create_or_update(
            api, "/apis/scheduling.run.ai/v2/queues", full, body), queue_message_names_field, spec)

    # The fixed inputs: accepted, or refused naming the field (the CRD schema or our webhook, whichever is first).
    expected_queues = {"cy1": None, "huge": None, "cy2": "spec.parentQueue", "self": "spec.parentQueue",
                       "nan": "spec.resources.gpu.quota", "neg": "spec.resources.gpu.quota",
                       "inverted": None}  # a quota above its limit is accepted, as KAI
    for name, field_name in expected_queues.items():
        answer = fixed[name]
        assert (answer is None) if field_name is None else (answer is not None and field_name in answer), (
            name, answer)

    podgroups = Tally("PodGroup")
    for index, spec in enumerate([*FIXED_PODGROUPS, *examples(PODGROUP_SPECS, N, 2)]):
        body = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                "metadata": {"name": f"fz-pg-{index}"}, "spec": spec}
        answer = await send(podgroups, lambda body=body: raw(
            api, "POST", f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups", body=body),
            podgroup_message_names_field, spec)
        if index < len(FIXED_PODGROUPS):
            expected = "cycle detected in subgroups" if index == 0 else "spec.minMember"
            assert answer is not None and expected in answer, (spec, answer)

    pods = Tally("Pod")
    accepted_pods: list[str] = []
    for index, (pod_annotations, gpus, init) in enumerate([*FIXED_PODS, *examples(POD_SHAPES, N, 3)]):
        resources: dict[str, Any] = {"requests": {"cpu": "10m"}}
        if gpus is not None:
            resources["limits"] = {GPU: gpus}
        containers = [{"name": "main", "image": "ubuntu", "resources": resources}]
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"fz-pod-{index}", "labels": {"kai.scheduler/queue": queue},
                         "annotations": pod_annotations},
            "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0, "containers": containers}}
        if init:
            body["spec"]["initContainers"] = [{"name": "init", "image": "ubuntu"}]
        answer = await send(pods, lambda body=body: raw(api, "POST", f"/api/v1/namespaces/{namespace}/pods",
                                                        body=body), pod_message_names_field, pod_annotations)
        if answer is None:
            accepted_pods.append(f"fz-pod-{index}")
        if index < len(FIXED_PODS):
            expected = "gpu-memory" if "gpu-memory" in pod_annotations else (
                "fraction count" if "gpu-fraction-num-devices" in pod_annotations else "gpu-fraction")
            control = index == len(FIXED_PODS) - 1
            assert (answer is None) if control else (answer is not None and expected in answer), (
                pod_annotations, answer)

    # Updates are judged too: a bad gpu-fraction cannot be patched onto an admitted pod.
    updates = Tally("PodUpdate")
    for name, value in zip(accepted_pods, examples(ANNOTATION_VALUES, len(accepted_pods), 4), strict=False):
        await send(updates, lambda name=name, value=value: raw(
            api, "PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}",
            body={"metadata": {"annotations": {"gpu-fraction": value}}},
            content_type=MERGE_PATCH), pod_message_names_field, value)
    fuzz_seconds = time.monotonic() - started

    # The scheduler still schedules ordinary work, and no component restarted or stopped answering.
    await raw(api, "POST", f"/api/v1/namespaces/{namespace}/pods", body={
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ordinary", "labels": {"kai.scheduler/queue": queue}},
        "spec": {"schedulerName": "kai-scheduler", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "main", "image": "ubuntu", "resources": {"requests": {"cpu": "100m"}}}]}})
    scheduled_at = time.monotonic()
    poll(lambda: cluster.get_json("pod", "ordinary", namespace=namespace)["spec"].get("nodeName"),
         "the ordinary pod to be bound after the fuzz run", timeout=90)
    bound_after = time.monotonic() - scheduled_at
    listed = cluster.get_json("pods", namespace=namespace)["items"]
    fuzz_bound = sum(1 for p in listed if p["metadata"]["name"].startswith("fz-pod-") and p["spec"].get("nodeName"))

    pids_after = component_pids(cluster)
    dead = sorted(name for name, pid in pids_after.items() if not alive(pid))
    restarted = sorted(name for name in pids_before if pids_after.get(name) != pids_before[name])
    unhealthy = [port for port in healthz_ports(cluster) if not healthy(port)]
    crashes = len(dead) + len(restarted)
    tracebacks = new_tracebacks(logs, sizes_before)

    tallies = [queues, podgroups, pods, updates]
    print(f"\nfuzz run (seed {SEED}, {N} inputs per boundary, {fuzz_seconds:.1f}s):")
    for tally in tallies:
        print("  " + tally.line())
    print(f"  accepted fuzz pods bound: {fuzz_bound} of {len(accepted_pods)}; ordinary pod bound after "
          f"{bound_after:.1f}s; component crashes/restarts: {crashes}; unhealthy probes: {len(unhealthy)}; "
          f"tracebacks logged: {sum(tracebacks.values())}")
    for tally in tallies:
        for failure in tally.failures[:5]:
            print(f"  FAILURE {tally.boundary}: {failure}")
        for unnamed in tally.unnamed[:5]:
            print(f"  UNNAMED {tally.boundary}: {unnamed}")
        for _, sample in sorted(tally.samples.items()):
            print(f"  e.g. {tally.boundary} refused: {sample[:160]}")

    for tally in tallies:
        assert tally.tried > 0
        assert tally.server_errors == 0 and tally.webhook_failures == 0, tally.failures
        assert not tally.unnamed, f"{tally.boundary}: refusals that do not name the field: {tally.unnamed}"
    for tally in (queues, podgroups, pods):
        assert tally.refused > 0 and tally.accepted > 0, f"{tally.boundary}: the inputs did not reach both outcomes"
    assert not dead and not restarted, f"components died {dead} or restarted {restarted}"
    assert not unhealthy, f"probe ports not healthy: {unhealthy}"
    assert not tracebacks, f"components logged tracebacks during the run: {tracebacks}"
