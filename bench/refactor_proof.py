"""Proof that a refactor of the scheduler changes no decision: `kai simulate` output, byte for byte.

Generates the scheduler benchmark's synthetic clusters (`scheduler_bench.generate`), runs `kai simulate`
(`operators.scheduler.shell.simulate`) for every action alone and for all actions together (and, on the smallest size,
all actions over two cycles), once with the scheduler code of git revision `--baseline` (extracted to a temporary
directory) and once with the working tree, and compares the JSON outputs byte for byte. Up to `--mixed-max`
nodes the same cluster is also run with work for every action (`mixed`: preemptors, stale gangs, min-runtime), and
so is its topology variant (`topo`: racks and zones, half the pending gangs constrained to one) and the envelope's
mix at that size (`envel`, `envelope_cluster`: topology-bound gangs whose shape already failed unconstrained).
Prints one row per run (size, actions, bytes, sha256 before/after, identical) and exits 1 on any difference.

Then, up to `--mixed-max` nodes, `--churn-cycles` live cycles with churn between them (`churn_proof`): the mixed
cluster is listed into the scheduler's own informers, and each cycle's decisions on the incremental snapshot
(`SchedulerLoop.snapshot`), run with the previous cycle's carry as the loop runs it, are compared byte for byte with
those of a fresh cycle (no carry) on a full rebuild (every object the API server holds parsed afresh, the
outstanding assumptions overlaid); `--stale-carry` breaks the carry's input check to show the proof fails then.
After each such cycle a quiet one (`<n>q`: nothing delivered, a later `now`) runs on the same snapshot, carried, against
a fresh cycle on the full rebuild: there allocate replays its failed attempts made before the first commit,
and reclaim, preempt and consolidation replay a run that committed nothing (`replayed`: attempts/actions,
`session/repeats.py`); `--wrong-replay` makes them replay whatever the snapshot, to show the proof fails then.
Each carried cycle's session open starts from the previous session's objects (`session/persist.py`);
`--stale-open` forgets which jobs the operations touched (a committed bind's job is not rebuilt), likewise.
Between cycles the cycle's binds and evictions are assumed as the writer assumes them and delivered by watch events one
cycle later, its annotations land, and `shell_bench.Churn` creates, binds and deletes pods and, in one of two runs
per size (`churn` nodes), adds and removes a node (every carried cycle then opens in full; in the other, `pods`, they
open from the previous session's objects, told by the informers what left: column `opened`).
Run: python bench/refactor_proof.py --baseline main [--sizes 500,1000,5000] [--churn-cycles 6] [--churn-only]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ACTIONS = ("allocate", "consolidation", "reclaim", "preempt", "stalegangeviction")
HERE = Path(__file__).resolve().parent


def mixed(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The benchmark cluster with work for every action: every fourth job is `inference` (it preempts `train`
    jobs of its queue), every fifth running gang lost a pod long ago (stale: stalegangeviction evicts it), and
    every third job has a last-start time, so min-runtime protects it from preempt and reclaim."""
    out = [dict(o) for o in objects]
    groups = [o for o in out if o["kind"] == "PodGroup"]
    pods_of: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in out:
        if o["kind"] == "Pod":
            meta = o["metadata"]
            pods_of.setdefault((meta["namespace"], meta["annotations"]["pod-group-name"]), []).append(o)
    dropped: set[int] = set()
    gangs = 0
    for i, pg in enumerate(groups):
        meta = dict(pg["metadata"])
        spec = dict(pg["spec"])
        annotations = dict(meta.get("annotations") or {})
        members = pods_of.get((meta["namespace"], meta["name"]), [])
        if i % 4 == 0:
            spec["priorityClassName"] = "inference"
        if i % 3 == 0:
            annotations["kai.scheduler/last-start-timestamp"] = "2024-12-31T23:00:00Z"
        if spec["minMember"] > 1 and members and members[0]["status"]["phase"] == "Running":
            gangs += 1
            if gangs % 5 == 0:
                dropped.add(id(members[-1]))
                annotations["kai.scheduler/stale-podgroup-timestamp"] = "2024-12-31T00:00:00Z"
        meta["annotations"] = annotations
        pg["metadata"], pg["spec"] = meta, spec
    return [o for o in out if id(o) not in dropped]


def _runs() -> list[tuple[str, list[str]]]:
    """(label, extra simulate arguments) of every comparison on one input."""
    out = [(action, ["--actions", action]) for action in ACTIONS]
    out.append(("all", []))
    out.append(("all --cycles 2", ["--cycles", "2"]))
    return out


_DRIVER = """
import json, sys
try:  # the layout since the decide/shell split, else the flat one of older revisions
    from operators.scheduler.shell import simulate
    from operators.scheduler.decide.config import config_from_args
except ImportError:
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


def churn_proof(size: int, cycles: int, stale_carry: bool = False, wrong_replay: bool = False,
                stale_open: bool = False, nodes: bool = True
                ) -> list[tuple[str, int, int, int, str, str, bytes, bytes]]:
    """(cycle, watch events, snapshot pods, explanations reused, "attempts/actions" replayed, how the session opened,
    incremental decisions, full-rebuild decisions) of each live cycle, and of the quiet cycle after it. `nodes`: the
    churn adds and removes a node every cycle (every carried cycle then opens in full), else it changes only pods
    and PodGroups (the carried cycles open from the previous session's objects, told what left by the informers).
    The incremental side runs with the previous cycle's carry (`run_carried_cycle`), the full rebuild as a fresh
    cycle (`run_cycle`, no carry): both the snapshot and the carry are proven here.
    `stale_carry`: reuse carried explanations whatever their inputs (to show that the proof can fail); `wrong_replay`:
    replay allocate's carried attempts whatever the snapshot (likewise); `stale_open`: the next session's open keeps
    the jobs the operations touched as they left them (likewise)."""
    import asyncio
    from dataclasses import replace

    from scheduler_bench import generate
    from shell_bench import Churn, Cluster, list_pages

    from operators.core.cache import object_key
    from operators.scheduler.decide.config import SchedulerConfig
    from operators.scheduler.decide.cycle import run_carried_cycle, run_cycle
    from operators.scheduler.decide.session import carry as carry_module
    from operators.scheduler.decide.session import repeats as repeats_module
    from operators.scheduler.decide.simulation import with_implicit_podgroups
    from operators.scheduler.decide.snapshot import build_snapshot, podgroup_record
    from operators.scheduler.shell.loop import SchedulerLoop

    config = SchedulerConfig()
    asyncio.set_event_loop(asyncio.new_event_loop())
    loop = SchedulerLoop(object(), config)
    informers = {"Node": loop.nodes, "Pod": loop.pods, "PodGroup": loop.podgroups, "Queue": loop.queues,
                 "PriorityClass": loop.priority_classes, "BindRequest": loop.bindrequests}
    cluster = Cluster([o for o in with_implicit_podgroups(mixed(generate(size))) if o["kind"] in informers])
    for kind, objects in cluster.objects.items():
        fresh: dict[str, Any] = {}
        for page in list_pages(list(objects.values())):
            informers[kind].take_page(page, fresh)
        informers[kind].replace_all(fresh)
    deleting: set[str] = set()  # evictions assumed, their pods not yet deleted

    def full() -> Any:
        parse = {**{k: i.parse for k, i in informers.items()}, "PodGroup": podgroup_record}
        records = {k: [parse[k](o) for o in cluster.of(k).values()] for k in informers}
        pods = [replace(r, deleting=True) if r is not None and f"{r.namespace}/{r.name}" in deleting else r
                for r in records["Pod"]]
        return build_snapshot(nodes=records["Node"], pods=[p for p in pods if p is not None],
                              podgroups=records["PodGroup"], queues=records["Queue"],
                              bindrequests=records["BindRequest"], priority_classes=records["PriorityClass"])

    delivered = [0]  # watch events applied since the last cycle

    def deliver(writes: list[tuple[str, dict[str, Any]]]) -> None:
        for kind, obj in writes:
            if kind != "ADDED" and object_key(obj) not in cluster.of(obj["kind"]):
                continue  # deleted meanwhile (churn): the API server has nothing to modify or delete
            delivered[0] += 1
            informers[obj["kind"]].apply_event(json.loads(json.dumps(cluster.event(kind, obj))))
            if kind == "DELETED":
                deleting.discard(object_key(obj))

    if stale_carry:
        def stale(self: Any, key: Any, podgroup: Any, *args: Any) -> Any:
            old = self._old_explanations.get(key)
            if old is not None:
                return old[1], old[0]
            return None, (podgroup, (), (), None, False)
        carry_module.Carrying.explanation = stale  # this process only: the proof's own demonstration
    if stale_open:
        from operators.scheduler.decide.session import persist as persist_module
        hand_over = persist_module.Persisting.hand_over

        def forgetful(self: Any) -> None:
            hand_over(self)
            if self.carrying.opened is not None:
                self.carrying.opened.touched_jobs = set()
        persist_module.Persisting.hand_over = forgetful  # type: ignore[method-assign]  # this process only
    if wrong_replay:
        def blind(self: Any, session: Any, job: Any) -> bool:
            # Replays a job's carried failure whatever the snapshot and the order of attempts.
            prev = self.previous
            entry = dict(prev.attempts).get(job.key) if prev is not None else None
            if entry is None or job.key in session.outcomes:
                return False
            self._apply(session, job, entry)
            self.attempts.append((job.key, entry))
            self.replayed += 1
            return True

        def keep(self: Any, session: Any, jobs: Any) -> bool:
            self.snapshot, self.clean = session.snapshot, True
            return False
        repeats_module.Repeating.replay = blind  # type: ignore[method-assign]  # this process only, likewise
        repeats_module.Repeating.begin = keep  # type: ignore[method-assign]
        repeats_module.Repeating.committed = lambda self: None  # type: ignore[method-assign]
        repeats_module.Repeating.same_snapshot = lambda self, session: True  # type: ignore[method-assign]
    carry = None
    churn, out = Churn(seed=size, nodes=nodes), []
    later: list[tuple[str, dict[str, Any]]] = []
    n = max(len(cluster.of("Pod")) // 100, 3)
    for cycle in range(1, cycles + 1):
        snapshot, rebuilt = loop.snapshot(), full()
        now = 1.7e9 + 10 * cycle
        carried, carry = run_carried_cycle(snapshot, config, now, carry)
        inc = json.dumps(carried.to_dict(), indent=1).encode()
        decisions = run_cycle(rebuilt, config, now)
        out.append((str(cycle), delivered[0], len(snapshot.pods), carry.reused,
                    f"{carry.replayed}/{carry.replayed_actions}", _opened(carry), inc,
                    json.dumps(decisions.to_dict(), indent=1).encode()))
        delivered[0] = 0
        # The quiet cycle: nothing changed but the time.
        quiet, carry = run_carried_cycle(loop.snapshot(), config, now + 5, carry)
        out.append((f"{cycle}q", 0, len(snapshot.pods), carry.reused, f"{carry.replayed}/{carry.replayed_actions}",
                    _opened(carry),
                    json.dumps(quiet.to_dict(), indent=1).encode(),
                    json.dumps(run_cycle(rebuilt, config, now + 5).to_dict(), indent=1).encode()))
        # What the cycle wrote lands one cycle later; until then it is assumed, as by the writer.
        writes: list[tuple[str, dict[str, Any]]] = []
        pods = cluster.of("Pod")
        for b in decisions.binds:
            key = f"{b.namespace}/{b.pod}"
            if key in pods and loop._assume(b):
                body = loop._request_body(b, loop.pods.store[key].uid)
                cluster.of("BindRequest")[key] = body
                bound = {**pods[key], "spec": {**pods[key]["spec"], "nodeName": b.node},
                         "status": {"phase": "Running"}}
                writes.append(("MODIFIED", bound))
                writes.append(("DELETED", body))  # the binder's cleanup once the pod is bound
        for e in decisions.evictions:
            key = f"{e.namespace}/{e.pod}"
            current = loop.pods.store.get(key)
            if key in pods and current is not None and not current.deleting:
                loop.assumed_pods.assume(key, replace(current, deleting=True))
                deleting.add(key)
                writes.append(("DELETED", pods[key]))
        for a in decisions.annotations:  # patches land at once
            pg = cluster.of("PodGroup").get(f"{a.namespace}/{a.pod_group}")
            if pg is not None:
                notes = {k: v for k, v in {**(pg["metadata"].get("annotations") or {}), a.key: a.value}.items()
                         if v is not None}
                deliver([("MODIFIED", {**pg, "metadata": {**pg["metadata"], "annotations": notes}})])
        deliver(churn.writes(cluster, n))
        deliver(later)  # the previous cycle's binds and evictions land
        later = writes
    return out


def _opened(carry: Any) -> str:
    """How the cycle's session opened: `full`, or `J/N` jobs and nodes rebuilt from the previous session's objects
    (`+diff`: the snapshot did not say every record that left, and the open diffed it in full)."""
    opened = carry.opened
    if opened is None or opened.rebuilt_jobs < 0:
        return "full"
    return f"{opened.rebuilt_jobs}/{opened.rebuilt_nodes}" + ("+diff" if opened.diffed else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--baseline", default="main", help="git revision whose decisions are the reference")
    parser.add_argument("--sizes", default="500,1000,5000", help="node counts of the generated clusters")
    parser.add_argument("--mixed-max", type=int, default=1000,
                        help="largest size also run with the mixed input (priorities, stale gangs, min-runtime)")
    parser.add_argument("--churn-cycles", type=int, default=6,
                        help="live cycles with churn, incremental snapshot and carry against a full rebuild, fresh "
                             "(0: none)")
    parser.add_argument("--churn-only", action="store_true", help="only the churn proof (no --baseline runs)")
    parser.add_argument("--stale-carry", action="store_true",
                        help="reuse carried explanations whatever their inputs: the churn proof must then differ")
    parser.add_argument("--wrong-replay", action="store_true",
                        help="replay allocate's attempts whatever the snapshot: the churn proof must then differ")
    parser.add_argument("--stale-open", action="store_true",
                        help="session open keeps the jobs the operations touched unrebuilt: the churn proof must then "
                             "differ")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    sys.path.insert(0, str(HERE))
    from envelope_cluster import Profile, generate_envelope
    from scheduler_bench import generate

    from operators.scheduler.decide.simulation import with_implicit_podgroups

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
        # (size, input name): the generated cluster, and the same with work for every action on the smaller sizes.
        inputs: dict[tuple[int, str], Path] = {}
        for size in sorted(set(sizes)):
            objects = generate(size)
            variants: list[tuple[str, Sequence[Mapping[str, Any]]]] = [("bench", objects)]
            if size <= args.mixed_max:
                variants.append(("mixed", mixed(objects)))
            if size <= args.mixed_max:  # racks and zones, half the pending gangs bound to one (the domain attempts)
                variants.append(("topo", mixed(generate(size, topology=True))))
                # The envelope's mix at this size (15 pods and 3 workloads per node): topology-bound gangs whose
                # shape already failed unconstrained, fractions, elastic jobs, a 1,000-pod gang.
                variants.append(("envel", with_implicit_podgroups(
                    generate_envelope(Profile(f"proof{size}", size, size * 15, size * 3)))))
            for name, objs in variants:
                path = tmp / f"cluster-{size}-{name}.json"
                path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
                inputs[(size, name)] = path
        print(f"{'size':>6} {'input':<6} {'actions':<20} {'bytes':>10} {'sha256 ' + args.baseline:<18} "
              f"{'sha256 worktree':<18} identical")
        for (size, name), path in inputs.items():
            if args.churn_only:
                break
            runs = [r for r in _runs() if name != "bench" or size == min(sizes) or r[0] != "all --cycles 2"]
            before = _simulate(base, path, [e for _, e in runs], tmp / f"before-{size}-{name}")
            after = _simulate(root, path, [e for _, e in runs], tmp / f"after-{size}-{name}")
            for (label, _), b, a in zip(runs, before, after, strict=True):
                same = b == a
                different += not same
                print(f"{size:>6} {name:<6} {label:<20} {len(a):>10} {hashlib.sha256(b).hexdigest()[:16]:<18} "
                      f"{hashlib.sha256(a).hexdigest()[:16]:<18} {'yes' if same else 'NO'}", flush=True)
    if args.churn_cycles:
        print(f"{'size':>6} {'churn':<5} {'cycle':>5} {'events':>6} {'pods':>7} {'reused':>6} {'replayed':>8} "
              f"{'opened':<12} {'bytes':>10} {'sha256 incremental':<18} {'sha256 full':<18} identical")
    for size in [s for s in sorted(set(sizes)) if s <= args.mixed_max and args.churn_cycles]:
        for mode in ("nodes", "pods"):  # with a node added and removed every cycle, and without (carried opens)
            for cycle, events, pods, reused, replayed, opened, inc, rebuilt in churn_proof(
                    size, args.churn_cycles, args.stale_carry, args.wrong_replay, args.stale_open, mode == "nodes"):
                same = inc == rebuilt
                different += not same
                print(f"{size:>6} {mode:<5} {cycle:>5} {events:>6} {pods:>7} {reused:>6} {replayed:>8} {opened:<12} "
                      f"{len(inc):>10} {hashlib.sha256(inc).hexdigest()[:16]:<18} "
                      f"{hashlib.sha256(rebuilt).hexdigest()[:16]:<18} {'yes' if same else 'NO'}", flush=True)
    print("identical" if not different else f"{different} run(s) differ")
    return 1 if different else 0


if __name__ == "__main__":
    raise SystemExit(main())
