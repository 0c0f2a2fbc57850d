"""Warm cycles with and without the carry (`run_carried_cycle`): session open, close and the cycle, in CPU ms.

Builds an envelope profile (`envelope_cluster`), runs one cold cycle, then `--cycles` warm pairs on snapshots where
`--churn` of the pods (and their PodGroups) are fresh record objects equal to the old ones, as an update or a
re-parse gives them: one cycle carrying the previous carried cycle's carry, one fresh (no carry), alternated in one
process so load shifts hit both. Both decide the same (asserted each pair); what differs is the work.
Run: python bench/carry_bench.py [--envelope2x] [--cycles 4] [--churn 0.01]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from envelope_cluster import ENVELOPE, ENVELOPE_2X, generate_envelope

from operators.scheduler.decide import cycle as cycle_module
from operators.scheduler.decide.config import SchedulerConfig
from operators.scheduler.decide.cycle import run_carried_cycle
from operators.scheduler.decide.simulation import with_implicit_podgroups
from operators.scheduler.decide.snapshot import Snapshot, snapshot_from_objects


def churned(snapshot: Snapshot, share: float, rng: random.Random) -> Snapshot:
    """`share` of the pods, and the PodGroups they belong to, replaced by equal but new record objects."""
    picked = set(rng.sample(range(len(snapshot.pods)), max(1, int(len(snapshot.pods) * share))))
    groups = {(snapshot.pods[i].namespace, snapshot.pods[i].pod_group) for i in picked}
    return replace(snapshot, pods=tuple(replace(p) if i in picked else p for i, p in enumerate(snapshot.pods)),
                   podgroups=tuple(replace(g) if (g.namespace, g.name) in groups else g for g in snapshot.podgroups))


def phases(d: Any, cpu_s: float) -> dict[str, float]:
    return {"open": d.timings["open-session"], "close": d.timings["close-session"], "cycle": cpu_s * 1000}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--envelope2x", action="store_true", help="10,000 nodes / 150,000 pods (else the envelope)")
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--churn", type=float, default=0.01)
    args = parser.parse_args(argv)
    profile = ENVELOPE_2X if args.envelope2x else ENVELOPE
    snapshot = snapshot_from_objects(with_implicit_podgroups(generate_envelope(profile)))
    gc.collect()
    cycle_module.time = SimpleNamespace(perf_counter=time.process_time)  # type: ignore[attr-defined]
    config, rng = SchedulerConfig(), random.Random(5)
    c0 = time.process_time()
    _, carry = run_carried_cycle(snapshot, config, 1.7e9, None)
    print(f"{profile.name}: {len(snapshot.nodes)} nodes, {len(snapshot.pods)} pods; cold cycle "
          f"{time.process_time() - c0:.2f} s CPU; load1 {os.getloadavg()[0]:.1f}", flush=True)
    print(f"{'cycle':>5} {'reused':>7} {'open carry/fresh':>17} {'close carry/fresh':>18} {'cycle carry/fresh':>18} "
          f"{'load1':>5}")
    for n in range(1, args.cycles + 1):
        snapshot = churned(snapshot, args.churn, rng)
        row = {}
        for mode in ("carry", "fresh") if n % 2 else ("fresh", "carry"):
            c0 = time.process_time()
            d, after = run_carried_cycle(snapshot, config, 1.7e9, carry if mode == "carry" else None)
            row[mode] = (phases(d, time.process_time() - c0), json.dumps(d.to_dict()), after)
        assert row["carry"][1] == row["fresh"][1], "the carried cycle decided differently"
        carry = row["carry"][2]
        c, f = row["carry"][0], row["fresh"][0]
        print(f"{n:>5} {carry.reused:>7} " + " ".join(f"{c[k]:>8.0f}/{f[k]:<8.0f}" for k in ("open", "close", "cycle"))
              + f" {os.getloadavg()[0]:>5.1f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
