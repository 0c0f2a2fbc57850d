"""Reading the Prometheus text format by the names on the wire, and the metrics a Grafana dashboard queries.

prometheus-client's own parser renames counter samples (it adds `_total`), so the tests that check names read
the text themselves.
"""

from __future__ import annotations

import re
from typing import Any

TYPE_LINE = re.compile(r"^# TYPE (\S+) (\S+)$", re.M)
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
# A metric name in PromQL: an identifier that is neither a function (followed by "(") nor inside a label
# matcher, a range or a string; this project's metrics all start with `kai_`.
PROMQL_METRIC = re.compile(r"\b(kai_[a-zA-Z0-9_:]*)\b(?!\s*\()")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def declared(text: str) -> dict[str, str]:
    """Family name -> type, from the `# TYPE` lines (present even for a labelled family without series)."""
    return dict(TYPE_LINE.findall(text))


def sample_names(text: str) -> set[str]:
    return {m.group(1) for line in text.splitlines() if (m := SAMPLE.match(line))}


def exposed(text: str) -> set[str]:
    """Every name a PromQL query could select from this exposition."""
    names = sample_names(text)
    for family, kind in declared(text).items():
        names.add(family)
        if kind == "histogram":
            names.update(family + s for s in HISTOGRAM_SUFFIXES)
    return names


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL query of a dashboard: panel targets (also inside rows) and query variables."""
    panels = list(dashboard.get("panels", []))
    for panel in list(panels):
        panels += panel.get("panels", [])
    out = [t["expr"] for p in panels for t in p.get("targets", []) if t.get("expr")]
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]
            out.append(query["query"] if isinstance(query, dict) else query)
    return out


def query_metrics(query: str) -> set[str]:
    without_labels = re.sub(r'\{[^}]*\}|"[^"]*"|\[[^\]]*\]', " ", query)
    return set(PROMQL_METRIC.findall(without_labels))
