"""Instructions one scheduling cycle executes, a measure a loaded box does not disturb.

Builds the scheduler benchmark's cluster of N nodes (`scheduler_bench.generate`), parses it, then runs K cycles
(or, with `--open`, K session opens). Run it under callgrind with K = 0 and K = 1 (or 2) on the code to compare
(`PYTHONPATH` picks the checkout; `git archive REV operators | tar -x -C DIR` gives an older one); the difference
of the two totals is the instructions of the cycles:

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/cycle_instructions.py 500 1
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("nodes", type=int)
    parser.add_argument("count", type=int, help="cycles (or session opens) to run after the parse")
    parser.add_argument("--open", action="store_true", help="only open sessions")
    args = parser.parse_args(argv)
    from scheduler_bench import generate
    try:  # the decide/shell layout, else the flat one of older revisions
        from operators.scheduler.decide.config import SchedulerConfig
        from operators.scheduler.decide.cycle import run_cycle
        from operators.scheduler.decide.session import Session
        from operators.scheduler.decide.simulation import with_implicit_podgroups
        from operators.scheduler.decide.snapshot import snapshot_from_objects
    except ImportError:
        from operators.scheduler.config import SchedulerConfig  # type: ignore[no-redef]
        from operators.scheduler.cycle import run_cycle  # type: ignore[no-redef]
        from operators.scheduler.session import Session  # type: ignore[no-redef]
        from operators.scheduler.simulate import with_implicit_podgroups  # type: ignore[no-redef]
        from operators.scheduler.snapshot import snapshot_from_objects  # type: ignore[no-redef]
    snapshot = snapshot_from_objects(with_implicit_podgroups(generate(args.nodes)))
    config = SchedulerConfig()
    gc.disable()
    for _ in range(args.count):
        if args.open:
            Session(snapshot, config, 1.7e9)
        else:
            run_cycle(snapshot, config, 1.7e9)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
