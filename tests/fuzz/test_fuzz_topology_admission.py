"""Fuzzing the Topology admission boundary: any JSON the API server could send is judged, nothing raises.

Valid hierarchies (distinct labels, distinct aliases that are no label, hostname last) are admitted; the rest are
refused with messages naming a field; an UPDATE keeping the node labels is judged like a CREATE.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.admission.review import validate_topology_review
from operators.admission.topology import validate_topology

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LABELS = st.sampled_from(["zone", "rack", "example.com/rack", "kubernetes.io/hostname", "", " ", "a/b"])
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                                max_size=3), max_leaves=8)
LEVEL = st.one_of(
    st.fixed_dictionaries({"nodeLabel": LABELS}, optional={"alias": st.one_of(LABELS, st.none(), st.integers())}),
    JSON)
SPEC = st.one_of(st.fixed_dictionaries({"levels": st.lists(LEVEL, max_size=18)}), JSON)


def topology(spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kai.scheduler/v1alpha1", "kind": "Topology", "metadata": {"name": "t"}, "spec": spec}


@FUZZ
@given(new=SPEC, old=st.one_of(st.none(), SPEC))
def test_any_topology_is_judged_without_raising(new: Any, old: Any) -> None:
    errors = validate_topology(topology(new), topology(old) if old is not None else None)
    assert all(isinstance(e, str) and e for e in errors)
    request = {"uid": "u", "operation": "UPDATE" if old is not None else "CREATE", "object": topology(new)}
    if old is not None:
        request["oldObject"] = topology(old)
    answer = validate_topology_review({"request": request})["response"]
    assert answer["allowed"] is (not errors)
    if errors:
        assert answer["status"]["message"] == "Topology t: " + "; ".join(errors)


@FUZZ
@given(st.lists(st.sampled_from(["a.io/zone", "a.io/block", "a.io/rack", "a.io/row"]), min_size=1, max_size=4,
                unique=True),
       st.data())
def test_well_formed_hierarchies_are_admitted_and_may_rename_aliases(labels: list[str], data: st.DataObject) -> None:
    aliases = data.draw(st.lists(st.sampled_from(["zone", "block", "rack", "row", None]), min_size=len(labels),
                                 max_size=len(labels)))
    used = [a for a in aliases if a is not None]
    levels = [{"nodeLabel": label} | ({"alias": alias} if alias is not None else {})
              for label, alias in zip(labels, aliases, strict=True)]
    errors = validate_topology(topology({"levels": [*levels, {"nodeLabel": "kubernetes.io/hostname"}]}))
    assert (errors == []) is (len(used) == len(set(used))), errors
    if not errors:
        renamed = [{"nodeLabel": lv["nodeLabel"]} for lv in levels] + [{"nodeLabel": "kubernetes.io/hostname"}]
        assert validate_topology(topology({"levels": renamed}),
                                 topology({"levels": [*levels, {"nodeLabel": "kubernetes.io/hostname"}]})) == []
