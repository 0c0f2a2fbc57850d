from __future__ import annotations

from decimal import Decimal

import pytest

from operators.core import resources as r


@pytest.mark.parametrize(("raw", "expected"), [
    ("1", Decimal(1)), ("500m", Decimal("0.5")), ("2Gi", Decimal(2 * 2**30)), ("1e3", Decimal(1000)),
    ("128974848", Decimal(128974848)), ("129M", Decimal(129 * 10**6)), (2, Decimal(2)), (0.5, Decimal("0.5")),
])
def test_parse_quantity(raw: object, expected: Decimal) -> None:
    assert r.parse_quantity(raw) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", ["lots", "", "1.2.3", "5Xi"])
def test_parse_quantity_rejects_garbage(raw: str) -> None:
    with pytest.raises(r.QuantityError):
        r.parse_quantity(raw)


@pytest.mark.parametrize(("name", "value", "text"), [
    ("cpu", Decimal("1.5"), "1500m"), ("cpu", Decimal(2), "2"), ("memory", Decimal(3 * 2**30), "3Gi"),
    ("memory", Decimal(1000), "1000"), ("nvidia.com/gpu", Decimal("1.50"), "1.5"), ("nvidia.com/gpu", Decimal(0), "0"),
])
def test_format_quantity(name: str, value: Decimal, text: str) -> None:
    assert r.format_quantity(name, value) == text


def test_pod_requests_sum_containers_max_init_and_overhead() -> None:
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
                       {"resources": {"limits": {"cpu": "500m", "nvidia.com/gpu": "1"}}}],
        "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
        "overhead": {"memory": "1Gi"},
    }
    assert r.pod_container_requests(spec) == {"cpu": Decimal(4), "memory": Decimal(2 * 2**30),
                                              "nvidia.com/gpu": Decimal(1)}


def test_gpu_request_kinds() -> None:
    assert r.gpu_request({}, {"nvidia.com/gpu": Decimal(2)}) == r.GpuRequest(whole=2)
    assert r.gpu_request({"gpu-fraction": "0.5"}, {}) == r.GpuRequest(portion=0.5)
    assert r.gpu_request({"gpu-memory": "2000", "gpu-fraction-num-devices": "2"}, {}) == r.GpuRequest(
        memory_mib=2000, num_devices=2)
    with pytest.raises(r.GpuRequestError):
        r.gpu_request({"gpu-fraction": "1.5"}, {})


@pytest.mark.parametrize(("label", "mib"), [("81920", 81900), ("40536", 40500), (str(80 * 2**30), 81900 - 60),
                                            ("x", None), ("0", None)])
def test_node_gpu_memory(label: str, mib: int | None) -> None:
    expected = mib
    if label == str(80 * 2**30):
        expected = (80 * 2**30 // 2**20) - (80 * 2**30 // 2**20) % 100
    assert r.node_gpu_memory_mib({"nvidia.com/gpu.memory": label}) == expected


@pytest.mark.parametrize(("text", "portion"), [("0x1p-1", 0.5), ("5e-1", 0.5), ("1.", 1.0)])
def test_gpu_fraction_is_read_with_the_admission_webhooks_grammar(text: str, portion: float) -> None:
    # What the webhook admits (Go's ParseFloat: hex floats included), the scheduler reads.
    assert r.gpu_request({"gpu-fraction": text}, {}).portion == portion


@pytest.mark.parametrize("text", ["0_5", " 0.5", "nan", "1.5"])
def test_gpu_fraction_spellings_go_refuses_are_refused(text: str) -> None:
    with pytest.raises(r.GpuRequestError):
        r.gpu_request({"gpu-fraction": text}, {})


def test_pod_requests_count_sidecars_as_kubernetes_does() -> None:
    # Sidecars (restartable init containers) run with the main containers and next to later init containers.
    spec = {
        "initContainers": [
            {"name": "setup", "resources": {"requests": {"cpu": "1", "memory": "3Gi"}}},
            {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "migrate", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
        ],
        "containers": [{"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
    }
    # cpu: init peak 2 + 0.5 (migrate beside the proxy) > main 1 + proxy 0.5; memory: setup's 3Gi > 1Gi + 1Gi.
    assert r.pod_container_requests(spec) == {"cpu": Decimal("2.5"), "memory": Decimal(3 * 2**30)}
    spec["containers"][0]["resources"]["requests"]["cpu"] = "4"
    assert r.pod_container_requests(spec)["cpu"] == Decimal("4.5")  # main + sidecar now above the init peak
