"""Shared helpers for the admission tests: a strict RFC 6902 applier and the example manifests."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.support import EXAMPLES

ApplyPatch = Callable[[dict[str, Any], list[dict[str, Any]]], dict[str, Any]]


def _tokens(pointer: str) -> list[str]:
    assert pointer.startswith("/"), pointer
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _apply(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Apply add/replace/remove/test as the API server does, failing on any path RFC 6902 forbids."""
    result = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _tokens(op["path"])
        node: Any = result
        for token in parents:  # every parent must exist: JSON patch never creates them implicitly
            node = node[int(token)] if isinstance(node, list) else node[token]
        kind = op["op"]
        if isinstance(node, list):
            if kind == "add":
                index = len(node) if last == "-" else int(last)
                assert 0 <= index <= len(node), op
                node.insert(index, copy.deepcopy(op["value"]))
            elif kind == "replace":
                node[int(last)] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del node[int(last)]
            else:
                assert kind == "test" and node[int(last)] == op["value"], op
        else:
            assert isinstance(node, dict), op
            if kind == "add":
                node[last] = copy.deepcopy(op["value"])
            elif kind == "replace":
                assert last in node, op
                node[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del node[last]
            else:
                assert kind == "test" and node[last] == op["value"], op
    return result


@pytest.fixture
def apply_patch() -> ApplyPatch:
    return _apply


def load_examples(name: str) -> list[dict[str, Any]]:
    path = EXAMPLES / name
    assert path.exists(), f"example {path} not found in the repository's examples/"
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.fixture
def examples() -> Iterator[Callable[[str], list[dict[str, Any]]]]:
    yield load_examples
