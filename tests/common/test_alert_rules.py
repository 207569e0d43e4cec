"""The text form of alert rules shared by the CLI and the Launch form (common/alert_rules.py)."""

import pytest

from common.alert_rules import format_rule, parse_rule, parse_rules


def test_parse_each_part():
    assert parse_rule("nan_loss:stop") == {"kind": "nan_loss", "action": "stop"}
    assert parse_rule(" grad_norm_above=50:notify_stop ") == {"kind": "grad_norm_above", "threshold": 50.0,
                                                              "action": "notify_stop"}
    assert parse_rule("eval_target=0.6@MATH-500") == {"kind": "eval_target", "threshold": 0.6, "benchmark": "MATH-500"}
    assert parse_rule("no_improvement=3:stop") == {"kind": "no_improvement", "patience": 3, "action": "stop"}
    assert parse_rules("failed; finished\n\nentropy_below=1e-2") == [
        {"kind": "failed"}, {"kind": "finished"}, {"kind": "entropy_below", "threshold": 0.01}]


@pytest.mark.parametrize("bad, words", [("Grad!", "KIND[=VALUE]"), ("grad_norm_above=abc", "not a number"),
                                        ("no_improvement=2.5", "whole number")])
def test_bad_text_says_how_to_write_it(bad, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_rule(bad)


def test_format_is_the_inverse_of_parse():
    for text in ("nan_loss:stop", "grad_norm_above=50:notify_stop", "eval_target=0.6@MATH-500:stop", "no_improvement=3",
                 "failed"):
        assert format_rule(parse_rule(text)) == text
