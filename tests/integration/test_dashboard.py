"""Every query of the chart's Grafana dashboard selects a metric the running components expose.

The components of the local control plane serve /metrics; a metric "exists" when a sample or its `# TYPE`
line is there (a labelled family is declared before its first series). Counters must be found under KAI's
names, so a dashboard written for KAI and this one read the same series.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from operators import components
from operators.devcluster.cluster import component_ports, load_state
from tests.promtext import dashboard_queries, exposed, query_metrics
from tests.support import Cluster
from tests.unit.core.test_metric_names import KAI_QUEUE_CONTROLLER, KAI_SCHEDULER

pytestmark = pytest.mark.cluster

DASHBOARD = Path(__file__).resolve().parents[2] / "charts" / "kai-scheduler" / "dashboards" / "kai-scheduler.json"


def live_metrics(cluster: Cluster) -> dict[str, str]:
    state = load_state(cluster.name)
    assert state is not None
    ports = component_ports(state.ports["apiserver"] - 443)
    out = {}
    for name in components.COMPONENTS:
        with urllib.request.urlopen(f"http://127.0.0.1:{ports[name]['metrics']}/metrics", timeout=10) as resp:
            out[name] = resp.read().decode()
    return out


def test_every_dashboard_query_selects_a_live_metric(cluster: Cluster) -> None:
    texts = live_metrics(cluster)
    available = set().union(*(exposed(t) for t in texts.values()))
    queries = dashboard_queries(json.loads(DASHBOARD.read_text()))
    assert len(queries) >= 10
    missing = {q: sorted(query_metrics(q) - available) for q in queries if query_metrics(q) - available}
    assert not missing, missing
    assert all(query_metrics(q) for q in queries)


def test_components_expose_kais_names(cluster: Cluster) -> None:
    texts = live_metrics(cluster)
    assert set(KAI_SCHEDULER) <= exposed(texts["scheduler"]), set(KAI_SCHEDULER) - exposed(texts["scheduler"])
    assert set(KAI_QUEUE_CONTROLLER) <= exposed(texts["queue-controller"])
    for name, text in texts.items():
        # prometheus-client's naming would show up as `<counter>_total` next to KAI's name, or `_created` series.
        doubled = [n for n in exposed(text) if n.endswith("_created") or n.endswith("_total_total")
                   or (n.removesuffix("_total") in KAI_SCHEDULER and n not in KAI_SCHEDULER)]
        assert not doubled, (name, doubled)
