"""The event recorder's rate limits: what a stream of identical or varied events costs the API server."""

from __future__ import annotations

from operators.core.events import SPAM_BURST, SPAM_RATE, SWEEP_EVERY, EventRecorder, ObjectRef, TokenBucket, _Sent


def ref(name: str) -> ObjectRef:
    return ObjectRef("v1", "Pod", "ns", name, f"uid-{name}")


def key(name: str, message: str = "0/4 nodes are available") -> tuple[ObjectRef, str, str, str]:
    return (ref(name), "Warning", "Unschedulable", message)


def recorder(**kwargs: float) -> EventRecorder:
    return EventRecorder(None, "test", **kwargs)  # type: ignore[arg-type]  # plan() makes no request


def record_sent(rec: EventRecorder, k: tuple[ObjectRef, str, str, str], now: float) -> None:
    rec._seen[k] = _Sent("e", 1, now, rec.min_interval, now)


def test_token_bucket_allows_a_burst_then_the_rate() -> None:
    bucket = TokenBucket(rate=1.0, burst=3, now=0.0)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert not bucket.take(0.5)
    assert bucket.take(1.6)


def test_a_repeated_event_is_sent_at_doubling_intervals() -> None:
    rec = recorder(min_interval=30, repeat_rate=100)
    k = key("p")
    assert rec.plan(k, 0.0) == "create"
    record_sent(rec, k, 0.0)
    sends = [t for t in range(1, 400) if rec.plan(k, float(t)) not in (None, "create")]
    assert sends == [30, 90, 210]  # 30 s, then 60 s, then 120 s after the previous send
    seen = rec._seen[k]
    assert seen.count == 400  # every occurrence is counted; the patch carries the total


def test_repeats_of_a_large_backlog_share_one_budget() -> None:
    rec = recorder(min_interval=30, repeat_rate=0.2)
    keys = [key(f"p{i}") for i in range(1000)]
    for k in keys:
        record_sent(rec, k, 0.0)
    patches = 0
    for second in range(30, 90):  # one scheduling cycle a second re-explains every pending pod
        patches += sum(rec.plan(k, float(second)) is not None for k in keys)
    assert patches <= 2 + 0.2 * 60


def test_an_object_gets_a_burst_of_distinct_events_then_few() -> None:
    rec = recorder()
    created = sum(rec.plan(key("p", f"message {i}"), 0.0) == "create" for i in range(100))
    assert created == 25
    assert rec.plan(key("other"), 0.0) == "create"  # the limit is per object


def test_what_no_longer_emits_is_forgotten_and_what_still_repeats_is_kept() -> None:
    rec = recorder(min_interval=30, max_interval=3600, repeat_rate=100)
    for i in range(1000):  # a pod scheduled, its one event, never seen again (the soak's steady churn)
        k = key(f"done{i}", "Scheduled")
        assert rec.plan(k, float(i)) == "create"
        record_sent(rec, k, float(i))
    backlog = key("pending")  # re-explained every cycle for hours
    assert rec.plan(backlog, 0.0) == "create"
    record_sent(rec, backlog, 0.0)
    for second in range(1, 9000):  # past a bucket's refill (7,500 s) after the last of the others
        rec.plan(backlog, float(second))
    assert list(rec._seen) == [backlog], "only the event still repeating is remembered"
    assert list(rec._objects) == [backlog[0]]
    assert rec._seen[backlog].count == 9000, "its count was never reset"


def test_a_bucket_is_forgotten_only_once_it_is_full_again() -> None:
    rec = recorder()
    refill = SPAM_BURST / SPAM_RATE
    spent = [rec.plan(key("p", f"m{i}"), 0.0) for i in range(30)]  # the burst used up, then refused
    assert spent.count("create") == 25
    rec._seen.clear()  # the events themselves no longer matter here
    rec.plan(key("other"), refill - SWEEP_EVERY / 2)  # a sweep while p's bucket is still refilling
    assert ref("p") in rec._objects
    assert rec.plan(key("p", "late"), refill - SWEEP_EVERY / 2) == "create"  # one token back per 300 s
    assert rec.plan(key("p", "later"), refill - SWEEP_EVERY / 2) == "create"
    rec.plan(key("other"), 2 * refill)  # idle for a whole refill: full, the same as a new bucket
    assert ref("p") not in rec._objects
    assert sum(rec.plan(key("p", f"n{i}"), 2 * refill) == "create" for i in range(30)) == 25
