"""kube.merge_patched: what the API server stores for a JSON merge patch (RFC 7386), which the status
controllers record as the echo they expect from their own write."""

from __future__ import annotations

import copy

from operators.core.kube import merge_patched


def test_objects_merge_key_by_key_null_removes_and_lists_replace() -> None:
    stored = {"allocated": {"cpu": "2", "memory": "1Gi"}, "childQueues": ["a", "b"], "conditions": [{"type": "X"}]}
    before = copy.deepcopy(stored)
    patch = {"allocated": {"cpu": "3", "memory": None, "nvidia.com/gpu": "1"}, "childQueues": ["c"],
             "conditions": None, "requested": {"cpu": "3"}}
    assert merge_patched(stored, patch) == {"allocated": {"cpu": "3", "nvidia.com/gpu": "1"}, "childQueues": ["c"],
                                            "requested": {"cpu": "3"}}
    assert stored == before, "the target is not changed"


def test_a_patch_onto_nothing_or_a_non_object() -> None:
    assert merge_patched(None, {"a": {"b": 1, "c": None}}) == {"a": {"b": 1}}
    assert merge_patched({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}
    assert merge_patched({"a": 1}, ["x"]) == ["x"]
