"""The CLI shell's behaviour that needs no cluster: exit codes for bad input, kubectl's namespace default."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from operators.insight.shell import current_namespace


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "operators.cli", *args], capture_output=True, text=True,
                          env={"KUBECONFIG": "/nonexistent", "PATH": ""}, timeout=60)


def test_unknown_kind_and_bad_flags_exit_2_with_a_message() -> None:
    proc = run("why", "cronjob", "x")
    assert proc.returncode == 2 and "unknown kind 'cronjob'" in proc.stderr
    assert run("queues", "-o", "table").returncode == 2
    assert run("what-if").returncode == 2  # -f is required


def test_unreachable_cluster_is_an_error_not_a_traceback() -> None:
    proc = run("top")
    assert proc.returncode == 2 and "kai top: error" in proc.stderr and "Traceback" not in proc.stderr


def test_namespace_defaults_to_the_kubeconfig_context(tmp_path: Path) -> None:
    cfg = {"current-context": "b", "contexts": [{"name": "a", "context": {"namespace": "ns-a"}},
                                                 {"name": "b", "context": {"namespace": "ns-b"}}]}
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(cfg))
    assert current_namespace(str(path)) == "ns-b"
    cfg["current-context"] = "a"
    cfg["contexts"][0]["context"] = {}
    path.write_text(yaml.safe_dump(cfg))
    assert current_namespace(str(path)) == "default"


def test_the_commands_are_listed_in_kai_help() -> None:
    out = run("--help").stdout
    for name in ("why", "what-if", "queues", "top"):
        assert name in out
