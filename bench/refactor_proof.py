"""Proof that a refactor of the scheduler changes no decision: `kai simulate` output, byte for byte.

Generates the scheduler benchmark's synthetic clusters (`scheduler_bench.generate`), runs `kai simulate`
(`operators.scheduler.simulate`) for every action alone and for all actions together (and, on the smallest size,
all actions over two cycles), once with the scheduler code of git revision `--baseline` (extracted to a temporary
directory) and once with the working tree, and compares the JSON outputs byte for byte.
Prints one row per run (size, actions, bytes, sha256 before/after, identical) and exits 1 on any difference.
Run: python bench/refactor_proof.py --baseline main [--sizes 500,1000,5000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
HERE = Path(__file__).resolve().parent


def _runs(sizes: list[int]) -> list[tuple[int, str, list[str]]]:
    """(size, label, extra simulate arguments) for every comparison."""
    out: list[tuple[int, str, list[str]]] = []
    for size in sizes:
        for action in ACTIONS:
            out.append((size, action, ["--actions", action]))
        out.append((size, "all", []))
    smallest = min(sizes)
    out.append((smallest, "all --cycles 2", ["--cycles", "2"]))
    return out


_DRIVER = """
import json, sys
from operators.scheduler import simulate
from operators.scheduler.config import config_from_args
objects = json.load(open(sys.argv[1]))["items"]
for i, extra in enumerate(json.loads(sys.argv[3])):
    args = simulate.build_parser().parse_args(["-f", sys.argv[1], "-o", "json", *extra])
    result = simulate.run_simulation(objects, config_from_args(args), None, None, args.cycles)
    with open(f"{sys.argv[2]}.{i}", "w") as out:
        out.write(json.dumps(result, indent=2) + "\\n")
"""


def _simulate(code: Path, objects: Path, runs: list[list[str]], out: Path) -> list[bytes]:
    """`kai simulate -o json` (its parser, configuration and `run_simulation`, the objects parsed once) for each
    argument list, with the `operators` package of `code` first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(code) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    done = subprocess.run([sys.executable, "-c", _DRIVER, str(objects), str(out), json.dumps(runs)], cwd=code,
                          env=env, capture_output=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"kai simulate failed in {code}: {done.stderr.decode()[-2000:]}")
    return [Path(f"{out}.{i}").read_bytes() for i in range(len(runs))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--baseline", default="main", help="git revision whose decisions are the reference")
    parser.add_argument("--sizes", default="500,1000,5000", help="node counts of the generated clusters")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    sys.path.insert(0, str(HERE))
    from scheduler_bench import generate

    root = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=HERE, check=True, capture_output=True,
                               text=True).stdout.strip())
    different = 0
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        base = tmp / "baseline"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(root), "archive", args.baseline, "operators"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        inputs: dict[int, Path] = {}
        for size in sorted(set(sizes)):
            path = tmp / f"cluster-{size}.json"
            path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": generate(size)}))
            inputs[size] = path
        print(f"{'size':>6} {'actions':<20} {'bytes':>10} {'sha256 ' + args.baseline:<18} {'sha256 worktree':<18} "
              f"identical")
        for size in sorted(set(sizes)):
            runs = [(label, extra) for s, label, extra in _runs(sizes) if s == size]
            before = _simulate(base, inputs[size], [e for _, e in runs], tmp / f"before-{size}")
            after = _simulate(root, inputs[size], [e for _, e in runs], tmp / f"after-{size}")
            for (label, _), b, a in zip(runs, before, after, strict=True):
                same = b == a
                different += not same
                print(f"{size:>6} {label:<20} {len(a):>10} {hashlib.sha256(b).hexdigest()[:16]:<18} "
                      f"{hashlib.sha256(a).hexdigest()[:16]:<18} {'yes' if same else 'NO'}", flush=True)
    print("identical" if not different else f"{different} run(s) differ")
    return 1 if different else 0


if __name__ == "__main__":
    raise SystemExit(main())
