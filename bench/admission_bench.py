"""What the admission webhook costs a pod create: the create rate with and without it, in one run.

Against a dev cluster started without the KAI components (so nothing but the bench's own admission process
answers reviews, and no scheduler binds anything), on loopback:

    kai dev up --name admit --port-base 12000 --no-components --no-kuberay --detach
    python bench/admission_bench.py --cluster admit [--pods 1000] [--concurrency 32] [--rounds 2]

The bench starts the admission component (`kai run admission`, the editable install's code) with a serving
certificate from the cluster's CA, and registers the webhook configurations `kai dev up` registers (the chart's:
namespace exclusions and the `schedulerName` matchCondition). Each round then creates `--pods` pods in a new
namespace with `--concurrency` requests in flight, for each mode in turn (the order alternates between rounds so
that drift in the machine's load does not favour one mode):

on        plain `kai-scheduler` pods, webhook configurations installed (their matchConditions let no plain pod
          through: nothing to admit, no review)
fraction  `kai-scheduler` pods with `gpu-fraction: 0.5`, webhook configurations installed (one mutating review
          each, the GPU-sharing wiring: the validating condition proves them valid)
fraction2 the same pods with the validating configuration as before that proof (`not-a-proven-valid-create`
          left out: one mutating and one validating review each); not run unless named in --modes
off       plain `kai-scheduler` pods, webhook configurations removed
wired     the `fraction` pods as the webhook leaves them (its mutation applied by the bench), webhook
          configurations removed: the same stored pods without the call, so fraction / wired is what the call
          itself costs them; not run unless named in --modes
floor     the `fraction` pods and the same webhook configurations (same matchConditions, timeouts, certificate),
          but the mutating call answered by `e2e/tools/admission-floor`, a Go webhook (stdlib only) that decodes
          the review as far as `request.uid` and returns a JSONPatch computed once by our pure mutation for the
          bench's pod (HTTP/1.1 keep-alive, as the Python webhook serves): the least one call can cost, so
          floor / wired is the best any webhook could reach and fraction / floor how far ours is from it; not run
          unless named in --modes (the first such run builds the server, cached under the dev cache)
floor2    `floor` with HTTP/2 offered too (ALPN h2, which the API server's client may take); not run unless
          named in --modes (its --direct reviews still use HTTP/1.1: aiohttp has no HTTP/2)
foreign   pods of another scheduler, webhook configurations installed (the matchCondition keeps them away)
kai       plain `kai-scheduler` pods with KAI's configurations (`scheduler-name-match` only: both webhooks called
          for every pod, as before issue 26's pass); not run unless named in --modes

It prints pods/s per mode (and the load average after each round) and the ratios on/off (the target is >= 0.80)
and fraction/off; for the modes with
reviews the reviews per pod,
the admission process's CPU per review (`/proc/<pid>/stat`), the API server's CPU per pod in every mode, the
latency of the webhook calls as the API server measured them (`apiserver_admission_webhook_admission_duration_seconds`,
interpolated within its buckets) and as the webhook measured them (`kai_webhook_review_duration_seconds`).
Finally `--direct` reviews are POSTed straight to the webhook (and to each floor webhook run) over keep-alive TLS
at the same concurrency: its latency p50/p99 and CPU per review without the API server in the way (of plain pods,
half mutating and half validating, or with `--direct-pods fraction` of the fraction pods, all mutating).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch  # type: ignore[import-untyped]  # kopf's own dependency
from apiserver_bench import bounded, cpu_seconds, delete_and_wait, percentiles, pod
from prometheus_client.parser import text_string_to_metric_families

from operators.admission.mutate import mutate_pod
from operators.core import podwebhooks
from operators.core.kube import api_client, is_not_found, raw, raw_stream
from operators.devcluster import pki, webhooks
from operators.devcluster.build import CACHE, TOOLS
from operators.devcluster.cluster import State, load_state

REGISTRATIONS = "/apis/admissionregistration.k8s.io/v1"
PLURAL = {"MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
          "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"}
POD_HOOK = "admission.kai-scheduler.svc"
ADMISSION_FLAGS = ["--gpu-sharing-enabled=true"]  # what the bench's admission process is told, and registered for
FLOOR_TOOL = TOOLS / "admission-floor"


# --- the admission process and its registration ---------------------------------------------------------------
class _Child:
    """A webhook server run as a child process: waits for its readiness URL, counts its reviews, stops it."""

    proc: subprocess.Popen[bytes]
    log: Any
    metrics: int
    what: str
    ready_url: str

    async def ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise SystemExit(f"{self.what} exited: see {self.log.name}")
                try:
                    async with http.get(self.ready_url) as resp:
                        if resp.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
        raise TimeoutError(f"{self.what} is not ready")

    async def reviews(self) -> float:
        return await reviews_at(self.metrics)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Admission(_Child):
    """The admission component as a child process, with its own certificate and ports."""

    def __init__(self, state: State) -> None:
        base = state.ports["apiserver"] - 443
        taken = set(state.ports.values())
        self.webhook, self.metrics, self.probe = [p for p in range(base + 790, base + 800) if p not in taken][:3]
        self.dir = Path(tempfile.mkdtemp(prefix="admission-bench-"))
        ca = pki.CertificateAuthority(Path(state.dir) / "pki")
        pair = ca.issue("admission-bench", "kai-webhooks", server=True, ips=["127.0.0.1"], dns=["localhost"])
        shutil.copyfile(pair.cert, self.dir / "tls.crt")
        shutil.copyfile(pair.key, self.dir / "tls.key")
        self.ca_pem = ca.pem
        self.log = open(self.dir / "admission.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "operators.cli", "run", "admission", f"--webhook-addr=127.0.0.1:{self.webhook}",
             f"--cert-dir={self.dir}", f"--metrics-bind-address=127.0.0.1:{self.metrics}",
             f"--health-probe-bind-address=127.0.0.1:{self.probe}", *ADMISSION_FLAGS],
            env={**os.environ, "KUBECONFIG": state.kubeconfig, "PYTHONUNBUFFERED": "1"},
            stdout=self.log, stderr=subprocess.STDOUT)
        self.what, self.ready_url = "admission", f"http://127.0.0.1:{self.probe}/readyz"

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.dir, ignore_errors=True)


async def reviews_at(metrics_port: int) -> float:
    """Pod reviews answered so far (kai_admission_requests_total over the mutate and validate webhooks)."""
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{metrics_port}/metrics") as resp:
        text = await resp.text()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name.startswith("kai_admission_requests_total") and s.labels.get("webhook") != "topology")


def floor_binary() -> Path:
    """The floor webhook, built once per source and Go version into the dev cache (stdlib only: no downloads)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    version = subprocess.run([go, "env", "GOVERSION"], check=True, capture_output=True, text=True).stdout.strip()
    digest = hashlib.sha256("\0".join([version, *(f.read_text() for f in sorted(FLOOR_TOOL.glob("*.go"))),
                                        (FLOOR_TOOL / "go.mod").read_text()]).encode()).hexdigest()[:12]
    out = CACHE / "bin" / f"admission-floor-{digest}"
    binary = out / "admission-floor"
    if not binary.exists():
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        subprocess.run([go, "build", "-ldflags", "-s -w", "-o", str(tmp / "admission-floor"), "."], cwd=FLOOR_TOOL,
                       check=True)
        tmp.rename(out)
    return binary


def floor_patch() -> list[dict[str, Any]]:
    """What our webhook returns for the bench's fraction pod as the API server sends it: namespace set, and the
    ServiceAccount admission plugin's token volume and mount already added (so the wiring appends to
    `/spec/volumes`). The generated names differ from pod to pod in ours; one fixed set serves the floor (nothing
    stores the ConfigMaps they name)."""
    body = pod("p-00000", "kai-scheduler", fraction="0.5")
    body["metadata"]["namespace"] = "admbench"
    body["spec"]["volumes"] = [{"name": "kube-api-access-00000", "projected": {"sources": []}}]
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "kube-api-access-00000",
                                                      "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    return mutate_pod(body, "admbench", runtime_class_name=None)


class Floor(_Child):
    """The floor webhook as a child process, with the admission's certificate and ports of its own."""

    def __init__(self, state: State, admission: Admission, *, http2: bool) -> None:
        base = state.ports["apiserver"] - 443
        taken = {*state.ports.values(), admission.webhook, admission.metrics, admission.probe}
        free = [p for p in range(base + 770, base + 790) if p not in taken]
        self.webhook, self.metrics = free[2:4] if http2 else free[:2]
        self.ca_pem = admission.ca_pem
        name = "floor2" if http2 else "floor"
        patch = admission.dir / f"{name}-patch.json"
        patch.write_text(json.dumps(floor_patch(), separators=(",", ":")))
        self.log = open(admission.dir / f"{name}.log", "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [str(floor_binary()), f"-addr=127.0.0.1:{self.webhook}", f"-metrics=127.0.0.1:{self.metrics}",
             f"-cert={admission.dir / 'tls.crt'}", f"-key={admission.dir / 'tls.key'}", f"-patch={patch}",
             *(["-http2"] if http2 else [])],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.what, self.ready_url = "the floor webhook", f"http://127.0.0.1:{self.metrics}/readyz"



Server = Admission | Floor


def registrations(admission: Server) -> list[dict[str, Any]]:
    """The pod webhook configurations `kai dev up` registers (the topology one is left out: no Topology here)."""
    configs = webhooks.configurations(ca_pem=admission.ca_pem, admission_port=admission.webhook, queue_port=None,
                                      podgroup_port=None, admission_args=ADMISSION_FLAGS)
    return [c for c in configs if c["webhooks"][0]["name"] == POD_HOOK]


def two_call_registrations(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The configurations without the proven-valid CREATE skip: a GPU-sharing pod reviewed by both webhooks."""
    out = copy.deepcopy(configs)
    for config in out:
        for webhook in config["webhooks"]:
            webhook["matchConditions"] = [c for c in webhook["matchConditions"]
                                          if c["name"] != podwebhooks.PROVEN_VALID_CREATE["name"]]
    return out


def kai_registrations(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same configurations as KAI registers them: `scheduler-name-match` the only matchCondition."""
    out = copy.deepcopy(configs)
    for config in out:
        for webhook in config["webhooks"]:
            webhook["matchConditions"] = webhook["matchConditions"][:1]
    return out


async def install(api: Any, configs: list[dict[str, Any]]) -> None:
    for config in configs:
        await raw(api, "POST", f"{REGISTRATIONS}/{PLURAL[config['kind']]}", body=config)


async def uninstall(api: Any, configs: list[dict[str, Any]]) -> None:
    for config in configs:
        try:
            await raw(api, "DELETE", f"{REGISTRATIONS}/{PLURAL[config['kind']]}/{config['metadata']['name']}")
        except Exception as exc:
            if not is_not_found(exc):
                raise


async def settle(api: Any, admission: Server, namespace: str, *, reviewed: bool, timeout: float = 30) -> None:
    """Wait until the API server's view of the registrations matches: a probe pod (a fraction pod, which both
    webhooks are called for) is reviewed, or no longer is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = await admission.reviews()
        name = f"probe-{uuid.uuid4().hex[:6]}"
        await raw(api, "POST", f"/api/v1/namespaces/{namespace}/pods", body=pod(name, "kai-scheduler", fraction="0.5"))
        await raw(api, "DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}")
        if ((await admission.reviews()) > before) == reviewed:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"the API server did not {'start' if reviewed else 'stop'} calling the webhook")


# --- the API server's numbers ------------------------------------------------------------------------------------
async def scrape(api: Any) -> str:
    resp = await raw_stream(api, "GET", "/metrics")
    async with resp:
        return (await resp.read()).decode()


def histogram(text: str, family_name: str, match: dict[str, str]) -> dict[float, float]:
    """Cumulative bucket counts (le -> count) of the series of `family_name` whose labels include `match`."""
    out: Counter[float] = Counter()
    for family in text_string_to_metric_families(text):
        if family.name != family_name:
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket") and all(sample.labels.get(k) == v for k, v in match.items()):
                out[float(sample.labels["le"])] += sample.value
    return dict(out)


def condition_seconds(text: str) -> float:
    """Seconds the API server spent evaluating the pod webhooks' matchConditions (it times only the evaluations
    that exclude a call)."""
    return sum(s.value for f in text_string_to_metric_families(text)
               if f.name == "apiserver_admission_match_condition_evaluation_seconds" for s in f.samples
               if s.name.endswith("_sum") and s.labels.get("name") == POD_HOOK)


def quantile(before: dict[float, float], after: dict[float, float], q: float) -> float | None:
    """The q-quantile of the observations between two scrapes, interpolated linearly within its bucket."""
    buckets = sorted((le, after.get(le, 0) - before.get(le, 0)) for le in after)
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank, low, below = q * buckets[-1][1], 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if le == float("inf"):
                return low
            return low + (le - low) * (rank - below) / max(count - below, 1e-9)
        low, below = le, count
    return low


# --- the runs ----------------------------------------------------------------------------------------------------
class Result:
    def __init__(self, mode: str, pods: int, seconds: float) -> None:
        self.mode, self.pods, self.seconds = mode, pods, seconds
        self.reviews = 0.0
        self.webhook_cpu = 0.0
        self.apiserver_cpu = 0.0
        self.server_hist: tuple[dict[float, float], dict[float, float]] = ({}, {})
        self.own_hist: tuple[dict[float, float], dict[float, float]] = ({}, {})
        self.condition_seconds = 0.0  # the API server's time evaluating the pod webhooks' matchConditions

    @property
    def rate(self) -> float:
        return self.pods / self.seconds


async def creates(api: Any, admission: Server, pids: dict[str, int], mode: str, count: int,
                  concurrency: int) -> Result:
    namespace = f"admbench-{mode}-{uuid.uuid4().hex[:6]}"
    await raw(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    scheduler = "other-scheduler" if mode == "foreign" else "kai-scheduler"
    base = f"/api/v1/namespaces/{namespace}/pods"
    sharing = mode.startswith(("fraction", "floor")) or mode == "wired"
    bodies = [pod(f"p-{i:05d}", scheduler, fraction="0.5" if sharing else "") for i in range(count)]
    if mode == "wired":
        bodies = [wired(b, namespace) for b in bodies]

    async def create(body: dict[str, Any]) -> None:
        await raw(api, "POST", base, body=body)

    try:
        reviews, own, server = await admission.reviews(), await own_scrape(admission), await scrape(api)
        cpu = cpu_seconds({**pids, "admission": admission.proc.pid})
        started = time.monotonic()
        await bounded(concurrency, [partial(create, b) for b in bodies])
        result = Result(mode, count, time.monotonic() - started)
        cpu_after = cpu_seconds({**pids, "admission": admission.proc.pid})
        result.reviews = await admission.reviews() - reviews
        result.webhook_cpu = cpu_after["admission"] - cpu["admission"]
        result.apiserver_cpu = cpu_after.get("kube-apiserver", 0.0) - cpu.get("kube-apiserver", 0.0)
        family = "apiserver_admission_webhook_admission_duration_seconds"
        server_after = await scrape(api)
        result.server_hist = (histogram(server, family, {"name": POD_HOOK}),
                              histogram(server_after, family, {"name": POD_HOOK}))
        result.condition_seconds = condition_seconds(server_after) - condition_seconds(server)
        mine = "kai_webhook_review_duration_seconds"
        result.own_hist = (histogram(own, mine, {}), histogram(await own_scrape(admission), mine, {}))
    finally:
        await delete_and_wait(api, f"/api/v1/namespaces/{namespace}")
    return result


def wired(body: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The pod as the mutating webhook returns it (the bench's admission runs without runtime classes)."""
    out: dict[str, Any] = jsonpatch.apply_patch(body, mutate_pod(body, namespace, runtime_class_name=None))
    return out


async def own_scrape(admission: Server) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{admission.metrics}/metrics") as resp:
        return await resp.text()


def review_body(i: int, *, fraction: bool = False) -> bytes:
    """An AdmissionReview of a pod CREATE as the API server sends it (the pod carries its managedFields); with
    `fraction`, the bench's GPU-sharing pod with the ServiceAccount plugin's token volume."""
    obj = pod(f"d-{i:05d}", "kai-scheduler", fraction="0.5" if fraction else "")
    if fraction:
        obj["spec"]["volumes"] = [{"name": f"kube-api-access-{i:05d}", "projected": {"sources": []}}]
        obj["spec"]["containers"][0]["volumeMounts"] = [{"name": f"kube-api-access-{i:05d}",
                                                         "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
    obj["metadata"].update({"namespace": "bench", "uid": str(uuid.uuid4()), "creationTimestamp": None,
                            "managedFields": [{"manager": "bench", "operation": "Update", "apiVersion": "v1",
                                               "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}]})
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "bench",
        "operation": "CREATE", "userInfo": {"username": "bench"}, "object": obj, "oldObject": None,
        "dryRun": False}}).encode()


async def direct(admission: Server, count: int, concurrency: int, *,
                 fraction: bool = False) -> tuple[list[float], float, float]:
    """Reviews POSTed straight to the webhook (keep-alive TLS): per-review latencies, wall seconds, CPU seconds.
    Plain pods alternate between the two paths; `fraction` pods go to the mutating one, as the API server sends
    them (the validating condition proves them valid)."""
    ctx = ssl.create_default_context(cadata=admission.ca_pem.decode())
    bodies = [review_body(i, fraction=fraction) for i in range(count)]
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(ssl=ctx, limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        async def one(body: bytes, path: str) -> None:
            begin = time.perf_counter()
            async with http.post(f"https://127.0.0.1:{admission.webhook}{path}", data=body,
                                 headers={"Content-Type": "application/json"}) as resp:
                answer = await resp.read()
            latencies.append(time.perf_counter() - begin)
            if not json.loads(answer)["response"]["allowed"]:
                raise RuntimeError(f"review denied: {answer[:200]!r}")

        await one(bodies[0], "/mutate--v1-pod")  # the connection pool warms up outside the measurement
        latencies.clear()
        cpu = cpu_seconds({"admission": admission.proc.pid})["admission"]
        started = time.monotonic()
        paths = ("/mutate--v1-pod",) if fraction else ("/mutate--v1-pod", "/validate--v1-pod")
        await bounded(concurrency, [partial(one, b, paths[i % len(paths)]) for i, b in enumerate(bodies)])
        wall = time.monotonic() - started
        return latencies, wall, cpu_seconds({"admission": admission.proc.pid})["admission"] - cpu


def ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.1f} ms"


def report(results: list[Result]) -> None:
    by_mode: dict[str, list[Result]] = {}
    for r in results:
        by_mode.setdefault(r.mode, []).append(r)
    rates = {mode: sum(r.pods for r in rs) / sum(r.seconds for r in rs) for mode, rs in by_mode.items()}
    print("\ncreate rate (all rounds: pods / seconds of creating)")
    what = {"on": "kai-scheduler pods, webhook on ", "off": "kai-scheduler pods, webhook off",
            "fraction": "fraction pods, webhook on", "foreign": "other scheduler's pods, webhook on",
            "fraction2": "fraction pods, two calls (before)",
            "kai": "kai-scheduler pods, KAI's conditions",
            "wired": "fraction pods pre-wired, webhook off",
            "floor": "fraction pods, floor webhook (Go)",
            "floor2": "fraction pods, floor webhook, HTTP/2"}
    for mode, rs in by_mode.items():
        rounds = ", ".join(f"{r.rate:.1f}" for r in rs)
        print(f"  {what[mode]:36} {rates[mode]:7.1f} pods/s  (rounds: {rounds})  "
              f"API server CPU {sum(r.apiserver_cpu for r in rs) / sum(r.pods for r in rs) * 1000:.2f} ms/pod, "
              f"matchConditions {sum(r.condition_seconds for r in rs) / sum(r.pods for r in rs) * 1000:.2f} ms/pod")
    if "on" in rates and "off" in rates:
        print(f"  ratio on / off: {rates['on'] / rates['off']:.2f}  (target >= 0.80)")
    for mode in ("fraction", "fraction2", "kai", "floor", "floor2"):
        if mode in rates and "off" in rates:
            print(f"  ratio {mode} / off: {rates[mode] / rates['off']:.2f}")
    if "fraction" in rates and "wired" in rates:
        print(f"  ratio fraction / wired: {rates['fraction'] / rates['wired']:.2f}  (the call alone, same stored pods)")
    for mode in ("floor", "floor2"):
        if mode in rates and "wired" in rates:
            print(f"  ratio {mode} / wired: {rates[mode] / rates['wired']:.2f}  (the cheapest call, same stored pods)")
        if mode in rates and "fraction" in rates:
            print(f"  ratio fraction / {mode}: {rates['fraction'] / rates[mode]:.2f}  (ours against the floor)")
    if "wired" in rates and "off" in rates:
        print(f"  ratio wired / off: {rates['wired'] / rates['off']:.2f}  (what the wiring itself costs a create)")
    if "foreign" in rates and "off" in rates:
        print(f"  ratio foreign (webhook on) / off: {rates['foreign'] / rates['off']:.2f}")
    for mode in ("on", "fraction", "fraction2", "kai", "floor", "floor2"):
        latencies(mode, by_mode.get(mode, []))
    foreign = sum(r.reviews for r in by_mode.get("foreign", []))
    print(f"reviews of the other scheduler's pods: {foreign:.0f}")


def latencies(mode: str, on: list[Result]) -> None:
    """Reviews per pod, the webhook's CPU per review and the calls' latency of one mode's runs."""
    reviews = sum(r.reviews for r in on)
    if on:
        print(f"webhook, `{mode}` runs: {reviews / sum(r.pods for r in on):.2f} reviews per pod")
    if reviews:
        print(f"  CPU {sum(r.webhook_cpu for r in on) / reviews * 1000:.2f} ms per review")
        for label, pick in (("as the API server timed the calls", lambda r: r.server_hist),
                            ("as the webhook timed its handling", lambda r: r.own_hist)):
            before: Counter[float] = Counter()
            after: Counter[float] = Counter()
            for r in on:
                b, a = pick(r)
                before.update(b)
                after.update(a)
            print(f"  latency {label}: p50 {ms(quantile(before, after, 0.5))}  "
                  f"p99 {ms(quantile(before, after, 0.99))}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--cluster", default="admit")
    parser.add_argument("--pods", type=int, default=1000, help="pods per mode and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--direct", type=int, default=4000, help="reviews POSTed straight to the webhook")
    parser.add_argument("--direct-pods", choices=("plain", "fraction"), default="plain",
                        help="the pods of the --direct reviews")
    parser.add_argument("--modes", default="on,fraction,off,foreign")
    args = parser.parse_args()
    state = load_state(args.cluster)
    if state is None:
        raise SystemExit(f"no dev cluster {args.cluster!r}: kai dev up --name {args.cluster} --port-base 12000 "
                         "--no-components --no-kuberay --detach")
    if "admission" in state.pids:
        raise SystemExit("the cluster runs the KAI components: start it with --no-components")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    admission = Admission(state)
    floors = {mode: Floor(state, admission, http2=mode == "floor2") for mode in ("floor", "floor2") if mode in modes}
    servers: dict[str, Server] = {**floors}
    api = await api_client(state.kubeconfig)
    configs = registrations(admission)
    by_mode = {"off": None, "wired": None, "kai": kai_registrations(configs),
               "fraction2": two_call_registrations(configs),
               **{mode: registrations(server) for mode, server in floors.items()}}
    results: list[Result] = []
    try:
        async with api:
            await admission.ready()
            for server in floors.values():
                await server.ready()
            await uninstall(api, configs)
            probe_ns = f"admbench-probe-{uuid.uuid4().hex[:6]}"
            await raw(api, "POST", "/api/v1/namespaces", body={"metadata": {"name": probe_ns}})
            installed: list[dict[str, Any]] | None = None
            answering: Server = admission  # the server the installed configurations call
            for rnd in range(args.rounds):
                for mode in modes if rnd % 2 == 0 else list(reversed(modes)):
                    want = by_mode.get(mode, configs)
                    server = servers.get(mode, admission)
                    if want is not installed:
                        if installed is not None:
                            await uninstall(api, installed)
                            await settle(api, answering, probe_ns, reviewed=False)
                        if want is not None:
                            await install(api, want)
                            await settle(api, server, probe_ns, reviewed=True)
                        installed, answering = want, server
                    result = await creates(api, server, dict(state.pids), mode, args.pods, args.concurrency)
                    print(f"round {rnd + 1} {mode:9} {result.rate:7.1f} pods/s  "
                          f"({result.pods} pods in {result.seconds:.1f} s, {result.reviews:.0f} reviews)  "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
                    results.append(result)
            if installed is not None:
                await uninstall(api, installed)
            await delete_and_wait(api, f"/api/v1/namespaces/{probe_ns}")
            report(results)
            for name, server in ({"webhook": admission, **floors} if args.direct else {}).items():
                latencies, wall, cpu = await direct(server, args.direct, args.concurrency,
                                                    fraction=args.direct_pods == "fraction")
                p50, _, p99 = percentiles(latencies)
                print(f"direct to the {name} ({args.direct} reviews of {args.direct_pods} pods, {args.concurrency} in "
                      f"flight, keep-alive TLS): "
                      f"{args.direct / wall:.0f} reviews/s, p50 {ms(p50)}  p99 {ms(p99)}, "
                      f"CPU {cpu / args.direct * 1000:.2f} ms per review")
    finally:
        for server in floors.values():
            server.stop()
        admission.stop()


if __name__ == "__main__":
    asyncio.run(main())
