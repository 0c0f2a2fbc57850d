"""A list taken page by page (`Informer.take_page`) stores exactly the records of each object parsed on its own,
and the cyclic GC never resumes while a decoded page is alive."""

from __future__ import annotations

import copy
import gc
import json
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest

from operators.core import slim
from operators.core.cache import PODS, Informer, object_key
from operators.scheduler.shell.assume import pod_transform

MARK = "informer-page-test-mark"


def pods(n: int) -> list[dict[str, Any]]:
    """`n` pods of a few shapes: pending and bound, other schedulers' finished pods, GPUs, sidecars, tolerations."""
    out = []
    for i in range(n):
        resources: dict[str, Any] = {"requests": {"cpu": f"{1 + i % 3}", "memory": f"{i % 5 + 1}Gi"}}
        if i % 4 == 0:
            resources["limits"] = {"nvidia.com/gpu": str(1 + i % 2)}
        pod: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p-{i}", "namespace": f"ns-{i % 7}", "uid": f"u-{i}", "resourceVersion": str(i),
                         "labels": {"app": f"a-{i % 11}"},
                         "annotations": {"pod-group-name": f"pg-{i // 3}", **({"gpu-fraction": "0.5"}
                                                                             if i % 9 == 0 else {})},
                         "managedFields": [{"manager": "kubelet", MARK: {"f:status": {}}}]},  # no record keeps it
            "spec": {"schedulerName": "kai-scheduler" if i % 10 else "default-scheduler",
                     "containers": [{"name": "main", "image": "img", "resources": resources}],
                     "tolerations": [{"key": f"t-{i % 3}", "operator": "Exists"}]},
            "status": {"phase": ("Pending", "Running", "Succeeded", "Failed")[i % 4]}}
        if i % 4:
            pod["spec"]["nodeName"] = f"node-{i % 13}"
        if i % 6 == 0:
            pod["spec"]["initContainers"] = [{"name": "side", "restartPolicy": "Always",
                                              "resources": {"requests": {"cpu": "100m"}}}]
        out.append(pod)
    return out


def pages(objs: list[dict[str, Any]], size: int) -> Iterator[bytes]:
    for start in range(0, len(objs), size):
        meta = {"resourceVersion": "9", **({"continue": str(start)} if start + size < len(objs) else {})}
        yield json.dumps({"kind": "PodList", "metadata": meta, "items": objs[start:start + size]}).encode()


PARSERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "scheduler": partial(pod_transform, "kai-scheduler"), "grouping": slim.grouping_pod,
    "accounting": slim.accounting_pod}


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_a_paged_list_stores_the_records_of_each_object_parsed_alone(name: str) -> None:
    parse = PARSERS[name]
    objs = pods(1234)
    informer: Informer[Any] = Informer(None, PODS, parse)  # type: ignore[arg-type]  # no API: pages handed in
    fresh: dict[str, Any] = {}
    metas = [informer.take_page(body, fresh) for body in pages(objs, 500)]
    informer.replace_all(fresh)
    expected = {object_key(o): r for o in copy.deepcopy(objs) if (r := parse(o)) is not None}
    assert informer.store == expected and list(informer.store) == list(expected)
    assert [m.get("continue") for m in metas] == ["0", "500", None] and metas[-1]["resourceVersion"] == "9"


def test_no_collection_runs_while_a_decoded_page_is_alive() -> None:
    """A young collection right after the GC resumes would traverse the whole page if it were still alive."""
    seen: list[bool] = []

    def watch(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            seen.append(any(isinstance(o, dict) and MARK in o for o in gc.get_objects(0)))

    informer: Informer[Any] = Informer(None, PODS, slim.grouping_pod)  # type: ignore[arg-type]
    body = next(pages(pods(50), 500))
    threshold = gc.get_threshold()
    gc.collect()
    gc.set_threshold(1)  # a collection at the first allocation after the GC resumes
    gc.callbacks.append(watch)
    try:
        informer.take_page(body, {})
        for _ in range(10):
            [object()]  # allocations: the collections the page would have triggered
    finally:
        gc.callbacks.remove(watch)
        gc.set_threshold(*threshold)
    assert seen and not any(seen)
