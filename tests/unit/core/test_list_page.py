"""`cache.list_page`: a list page decoded one item at a time gives what `json.loads` gives, and refuses what it
refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from operators.core.cache import list_page

PAGES: list[dict[str, Any]] = [
    {"kind": "PodList", "apiVersion": "v1", "metadata": {"continue": "abc", "resourceVersion": "5"},
     "items": [{"a": [1, 2, {"b": '}],"[\\'}]}, {"c": None}, {}]},
    {"items": []},
    {"items": None, "metadata": {}},
    {},
    {"metadata": {"resourceVersion": "1"}, "items": [{"x": 1}], "kind": "List"},
]


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("indent", [None, 2])
def test_items_and_fields_as_json_loads_reads_them(page: dict[str, Any], indent: int | None) -> None:
    fields = list(list_page(json.dumps(page, indent=indent)))
    assert [v for k, v in fields if k == "items"] == (page.get("items") or [])
    assert {k: v for k, v in fields if k != "items"} == {k: v for k, v in page.items() if k != "items"}


@pytest.mark.parametrize("text", ['{"items":[1 2]}', '{"items"}', "[1]", '{"a":1', '{"a":1 "b":2}'])
def test_a_malformed_page_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        list(list_page(text))
