from __future__ import annotations

import argparse

import pytest

from operators.core.booleans import add_bool_flag, flag_text, parse_bool


@pytest.mark.parametrize("text", ["1", "t", "T", "TRUE", "true", "True"])
def test_go_true_spellings(text: str) -> None:
    assert parse_bool(text) is True


@pytest.mark.parametrize("text", ["0", "f", "F", "FALSE", "false", "False"])
def test_go_false_spellings(text: str) -> None:
    assert parse_bool(text) is False


@pytest.mark.parametrize("text", ["yes", "no", "on", "off", "", "tRUE", " true", "2"])
def test_what_go_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a boolean"):
        parse_bool(text)


def test_bools_pass_through() -> None:
    assert parse_bool(True) is True and parse_bool(False) is False


def test_a_go_style_flag() -> None:
    p = argparse.ArgumentParser()
    add_bool_flag(p, "--fake", default=False)
    assert p.parse_args([]).fake is False
    assert p.parse_args(["--fake"]).fake is True
    assert p.parse_args(["--fake=false"]).fake is False
    assert p.parse_args(["--fake=T"]).fake is True
    with pytest.raises(SystemExit):
        p.parse_args(["--fake=yes"])


@pytest.mark.parametrize(("value", "text"), [(True, "true"), ("True", "true"), ("true", "true"), (False, "false"),
                                            ("false", "false"), (None, "false"), ("yes", "false"), (1, "false")])
def test_a_values_setting_as_flag_text(value: object, text: str) -> None:
    # helm prints a bool value as true/false: only a true bool or the word true (any case) is true.
    assert flag_text(value) == text
