"""explained.chosen: a pending workload's explanation is shown again at once for a new reason or wording, and for
a change of its numbers alone only once REFRESH seconds have passed since it was last shown."""

from __future__ import annotations

from operators.scheduler.shell.explained import REFRESH, chosen, wording

GPUS = "Resources were not found for pod ns/p-1 due to: {} node(s) didn't have enough resources: GPUs."
TAINT = GPUS + " \n{} node(s) had untolerated taint {{gpu: busy}}."


def test_numbers_alone_wait_for_the_refresh_reasons_do_not() -> None:
    first = chosen(None, GPUS.format(3), 100.0)
    assert first.text == GPUS.format(3) and first.at == 100.0
    # Counts moved: the text shown stays the first one until REFRESH has passed since it was shown.
    assert chosen(first, GPUS.format(4), 100.0 + REFRESH - 1) is first
    later = chosen(first, GPUS.format(5), 100.0 + REFRESH)
    assert later.text == GPUS.format(5) and later.at == 100.0 + REFRESH
    # A new reason in the histogram is shown at once.
    tainted = chosen(later, TAINT.format(5, 1), later.at + 1)
    assert tainted.text == TAINT.format(5, 1)
    # The same text is never news, however late.
    assert chosen(tainted, TAINT.format(5, 1), tainted.at + 10 * REFRESH) is tainted


def test_wording_blanks_integers_and_decimals_only() -> None:
    assert wording("Limit is 2.5 GPUs, currently 10 GPUs allocated") == "Limit is # GPUs, currently # GPUs allocated"
    assert wording(GPUS.format(3)) == wording(GPUS.format(12))
    assert wording(GPUS.format(3)) != wording(TAINT.format(3, 1))


def test_the_value_travels_with_the_text_shown() -> None:
    first = chosen(None, "a 1", 0.0, value=("a 1", (1,)))
    assert chosen(first, "a 2", 1.0, value=("a 2", (2,))).value == ("a 1", (1,))
    assert chosen(first, "b 2", 1.0, value=("b 2", (2,))).value == ("b 2", (2,))


def test_with_no_refresh_interval_every_new_text_is_shown() -> None:
    first = chosen(None, GPUS.format(3), 0.0, refresh=0)
    assert chosen(first, GPUS.format(4), 1.0, refresh=0).text == GPUS.format(4)
    assert chosen(first, GPUS.format(3), 1.0, refresh=0) is first


def test_the_scheduler_flag_sets_the_interval() -> None:
    from operators.scheduler.shell.main import parser

    assert parser().parse_args([]).explanation_refresh == REFRESH
    assert parser().parse_args(["--explanation-refresh", "0"]).explanation_refresh == 0
