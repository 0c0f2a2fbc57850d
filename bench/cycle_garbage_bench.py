"""A cycle's CPU together with the collection of its garbage, for two code trees alternated in separate processes.

A cycle runs with the cyclic collector off (`decide/cycle.py`); whatever of the session it leaves for the collector
is collected at the first allocation after the cycle returns, outside the cycle CPU that `scheduler_bench.py`
reports, but on the scheduler's CPU all the same. This bench times the cycle, then that first collection
(`gc.callbacks`), in one process per tree and run, trees alternated:

    python bench/cycle_garbage_bench.py --sizes 5000 --trees MAIN_TREE,. --runs 2
    python bench/cycle_garbage_bench.py --case envelope --trees MAIN_TREE,.

(`git archive main operators | tar -x -C MAIN_TREE` gives a tree to compare with.)
"""

from __future__ import annotations

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

_DRIVER = r"""
import gc, pickle, sys, time
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_cycle
with open(sys.argv[1], "rb") as f:
    snapshot = pickle.load(f)
gc.collect()
spent = {}
def timer(phase, info):
    if phase == "start":
        spent["start"] = time.process_time()
    else:
        spent["gc"] = spent.get("gc", 0.0) + time.process_time() - spent["start"]
gc.callbacks.append(timer)
rows = []
for _ in range(int(sys.argv[2])):
    spent.clear()
    c0 = time.process_time()
    decisions = run_cycle(snapshot, SchedulerConfig(), 1.7e9)
    c1 = time.process_time()
    after = [[] for _ in range(1000)]  # the first allocations after the cycle: a deferred collection runs here
    rows.append((c1 - c0, spent.get("gc", 0.0), len(decisions.binds), len(decisions.evictions)))
    del decisions, after
cycle, collected, binds, evictions = min(rows, key=lambda r: r[0] + r[1])
print(f"{cycle:.3f} {collected:.3f} {binds} {evictions}")
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--case", default="plain", choices=["plain", "envelope", "envelope2x", "gang1000"])
    parser.add_argument("--sizes", default="5000", help="nodes of the plain and gang1000 clusters")
    parser.add_argument("--trees", default=".", help="comma-separated code trees (each holding operators/)")
    parser.add_argument("--runs", type=int, default=2, help="processes per tree, alternated")
    parser.add_argument("--cycles", type=int, default=3, help="cycles per process; the cheapest is kept")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(HERE))
    from scheduler_bench import _objects

    from operators.scheduler.decide.simulation import with_implicit_podgroups
    from operators.scheduler.decide.snapshot import snapshot_from_objects

    trees = [str(Path(t).resolve()) for t in args.trees.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")] if args.case in ("plain", "gang1000") else [0]
    print(f"{'case':>10} {'nodes':>6} {'tree':>24} {'cycle cpu s':>12} {'collection after s':>19} "
          f"{'sum s':>7} {'binds':>6} {'evictions':>9}  load")
    for size in sizes:
        snapshot = snapshot_from_objects(with_implicit_podgroups(_objects(args.case, size, False, False)))
        with tempfile.NamedTemporaryFile(suffix=".pkl") as f:
            pickle.dump(snapshot, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
            del snapshot
            for _ in range(args.runs):
                for tree in trees:
                    env = dict(os.environ, PYTHONPATH=tree)
                    out = subprocess.run([sys.executable, "-c", _DRIVER, f.name, str(args.cycles)], env=env,
                                         cwd=tree, check=True, capture_output=True, text=True).stdout.split()
                    cycle, collected = float(out[0]), float(out[1])
                    load = os.getloadavg()[0]
                    print(f"{args.case:>10} {size or '':>6} {tree[-24:]:>24} {cycle:>12.3f} {collected:>19.3f} "
                          f"{cycle + collected:>7.3f} {out[2]:>6} {out[3]:>9}  {load:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
