"""A component process logs JSON lines (`--log-format json`) from its first line: a real process, so not a unit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_component_process_logs_json_lines() -> None:
    # A queue-controller without a cluster: its start-up fails and says so, in JSON.
    proc = subprocess.Popen([sys.executable, "-m", "operators.cli", "run", "queue-controller",
                             "--kubeconfig", str(ROOT / "no-such-kubeconfig"), "--log-format", "json",
                             "--metrics-bind-address=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0",
                             "--enable-webhook=false"],
                            cwd=ROOT, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    lines: list[dict[str, object]] = []
    try:
        for raw in proc.stderr:
            lines.append(json.loads(raw))  # every line is one JSON object
            if any(line["level"] == "error" for line in lines):
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert lines and all(line["component"] == "queue-controller" for line in lines)
    assert all({"ts", "level", "logger", "msg", "object", "reason"} <= set(line) for line in lines)
