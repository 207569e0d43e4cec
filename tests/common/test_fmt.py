"""common/fmt.py: the one text of each statistic, shared by the dashboard's tables, `aero compare`
and the bench's Markdown tables (hand-written expectations, including missing values)."""

import math
import subprocess
import sys

import pytest

from common.fmt import (MISSING, NOT_APPLICABLE, acc_text, half_ci, interval_text, metric_stat_text, not_reached_text, number,
                        p_text, pct, per_seed_text, ratio_text, reach_cell, si, si_exponent, si_stat_text, stat_text)

NAN = float("nan")


def stat(mean, lo=None, hi=None, n=3):
    return {"mean": mean, "lo": lo, "hi": hi, "n": n, "values": []}


def test_missing_and_not_applicable_are_two_dashes():
    assert (MISSING, NOT_APPLICABLE) == ("\u2013", "\u2014")


@pytest.mark.parametrize("value,text", [(0.48, "0.480"), (0.0004, "0.000"), (-0.02, "-0.020"), (1.0, "1.000"),
                                        (None, "–"), (NAN, "–")])
def test_acc_text(value, text):
    assert acc_text(value) == text


def test_number_scales_and_keeps_the_spec():
    assert number(2.5e9, ".2f", scale=1e9) == "2.50" and number(0.123, ".1%") == "12.3%" and number(None) == "–"
    assert number(NAN, ".0f") == "–" and number(-3.0, "+.1f") == "-3.0" and number(math.inf, ".1f") == "inf"


@pytest.mark.parametrize("fraction,text", [(0.3, "30.0%"), (12 / 40, "30.0%"), (26 / 30, "86.7%"), (1.0, "100.0%"),
                                           (0.0625, "6.2%"), (-0.05, "-5.0%"), (None, "–"), (NAN, "–")])
def test_one_percentage_format(fraction, text):
    assert pct(fraction) == text


@pytest.mark.parametrize("value,unit,text", [(1.23e12, "FLOP", "1.23 TFLOP"), (0.5, "s", "0.5 s"), (0, "s", "0 s"),
                                             (61_440_000_000, "FLOP", "61.4 GFLOP"), (None, "s", "–"), (NAN, "s", "–"),
                                             (1500, "", "1.5 k"), (-2.5e6, "FLOP", "-2.5 MFLOP"), (3e21, "FLOP", "3e+03 EFLOP"),
                                             (math.inf, "s", "inf s")])
def test_si(value, unit, text):
    assert si(value, unit) == text


def test_si_exponent():
    assert [si_exponent(v) for v in (0, 0.5, 999, 1000, -1e9, 1e30, NAN, math.inf)] == [0, 0, 0, 3, 9, 18, 0, 0]


def test_stat_text():
    assert stat_text(stat(0.48, 0.468, 0.492)) == "0.480 ± 0.012"
    assert stat_text(stat(0.48, n=1)) == "0.480"  # one seed: no interval, the mean alone
    assert stat_text(stat(None)) == "–" and stat_text(None) == "–" and stat_text({}) == "–" and stat_text(stat(NAN)) == "–"
    assert stat_text(stat(0.48, 0.46, None)) == "0.480" and stat_text(stat(0.48, NAN, 0.5)) == "0.480"  # half an interval: none
    assert stat_text(stat(-0.02, -0.03, -0.01)) == "-0.020 ± 0.010"
    assert stat_text(stat(0.02, 0.01, 0.03), sign=True) == "+0.020 ± 0.010" and stat_text(stat(-0.02), sign=True) == "-0.020"
    assert stat_text(stat(2.5e9, 2e9, 3e9), ".2f", scale=1e9) == "2.50 ± 0.50"
    assert stat_text(stat(0.18, 0.16, 0.2), pct) == "18.0% ± 2.0%" and stat_text(stat(0.18), pct, sign=True) == "+18.0%"
    assert stat_text(stat(0.48, 0.46, 0.5), with_n=True) == "0.480 ± 0.020 (n=3)"
    assert stat_text(stat(2.0, n=1), ".3g", with_n=True) == "2 (n=1)" and stat_text(None, with_n=True) == "–"


def test_si_stat_text_writes_the_half_in_the_means_prefix():
    assert si_stat_text(stat(2.4449e9, 2.13e9, 2.75e9), "FLOP") == "2.44 ± 0.31 GFLOP"
    assert si_stat_text(stat(1500.0, 1400.0, 1600.0)) == "1.5 ± 0.1 k" and si_stat_text(stat(0.5), "s") == "0.5 s"
    assert si_stat_text(stat(6e10, 5e10, 7e10), "FLOP", with_n=True) == "60 ± 10 GFLOP (n=3)"
    assert si_stat_text(stat(None), "s") == "–" and si_stat_text(stat(NAN), "s") == "–" and si_stat_text(None) == "–"
    assert si_stat_text(stat(-2e6, -3e6, -1e6), "FLOP") == "-2 ± 1 MFLOP"


def test_half_ci_and_interval_text():
    assert half_ci(stat(0.5, 0.4, 0.6)) == pytest.approx(0.1) and half_ci(stat(0.5)) is None and half_ci(None) is None
    assert interval_text([0.4, 0.6]) == "[0.400, 0.600]" and interval_text((0.004, 0.036), "+.4f") == "[+0.0040, +0.0360]"
    assert interval_text(None) == "" and interval_text([0.4, None]) == "" and interval_text([NAN, 0.6]) == "" and interval_text([]) == ""


def test_ratio_text():
    assert ratio_text(stat(0.52, 0.48, 0.56)) == "0.52× [0.48, 0.56]"
    assert ratio_text(stat(0.524, n=1)) == "0.52×" and ratio_text(stat(None)) == "–" and ratio_text(None) == "–"
    assert ratio_text(stat(0.52, 0.48, 0.56), with_n=True) == "0.52× [0.48, 0.56] (3 pairs)"
    assert ratio_text(stat(0.5, n=1), with_n=True) == "0.50× (1 pair)"
    assert ratio_text(0.5234) == "0.52×" and ratio_text(0.5234, 3) == "0.523×" and ratio_text(NAN) == "–"  # a plain number
    assert ratio_text(-1.5) == "-1.50×" and ratio_text(stat(0.5, 0.4, None)) == "0.50×"


@pytest.mark.parametrize("p,text", [(0.0123, "p=0.012"), (0.0004, "p<0.001"), (1e-300, "p<0.001"), (0.0, "p<0.001"),
                                    (0.001, "p=0.001"), (1.0, "p=1.000"), (None, "p=–"), (NAN, "p=–")])
def test_p_text(p, text):
    assert p_text(p) == text


def test_metric_stat_text_uses_each_metrics_unit():
    assert metric_stat_text("time/step_s", stat(2.0, 1.9, 2.1)) == "2 ± 0.1 s"
    assert metric_stat_text("flops/total", stat(4e9, 3.9e9, 4.1e9)) == "4 ± 0.1 GFLOP"
    assert metric_stat_text("rollout/trained", stat(256.0, 256.0, 256.0)) == "256 ± 0"
    assert metric_stat_text("zero_acc/after_rescue", stat(0.3, 0.28, 0.32)) == "30.0% ± 2.0%"
    assert metric_stat_text("waste/flops_frac", stat(0.25), with_n=True) == "25.0% (n=3)"
    assert metric_stat_text("train/entropy", stat(1.2345)) == "1.23" and metric_stat_text("time/step_s", None) == "–"


def target(reached, of, flops=None, seconds=None, rollouts=None, ratio=None):
    return {"reached": reached, "of": of, "flops": flops, "seconds": seconds, "rollouts": rollouts, "ratio": ratio or {}}


def test_reach_cell():
    t = target(1, 2, stat(2e10, n=1), stat(2.0, n=1), ratio={"flops": stat(1 / 3, n=1), "seconds": stat(0.35, n=1)})
    assert reach_cell(t, False) == "20 GFLOP<br>2 s<br>0.33× FLOPs<br>0.35× time<br>not reached (1/2 seeds)"
    assert reach_cell(t, True) == "20 GFLOP<br>2 s<br>not reached (1/2 seeds)"  # the baseline: no ratio to itself
    assert reach_cell(t, False, with_n=True, sep="\n").split("\n")[2:4] == ["0.33× FLOPs (1 pair)", "0.35× time (1 pair)"]
    full = target(3, 3, stat(2e9, 1.8e9, 2.2e9), stat(10.0, 9.0, 11.0), stat(2100.0, 1890.0, 2310.0),
                  {"rollouts": stat(0.5, 0.4, 0.6), "seconds": stat(None, n=0)})
    assert reach_cell(full, False).split("<br>") == ["2 ± 0.2 GFLOP", "10 ± 1 s", "2.1 ± 0.21 k rollouts", "0.50× [0.40, 0.60] rollouts"]
    assert reach_cell(target(0, 2), False) == "not reached (2/2 seeds)"
    assert reach_cell(target(0, 1), False, seeds=False) == "not reached" and not_reached_text(1, 1) == "not reached (1/1 seed)"
    assert reach_cell(target(1, 1, stat(5.0, n=1), stat(NAN, n=1), stat(NAN)), False) == "5 FLOP<br>–"  # NaN: missing


def test_per_seed_text():
    assert per_seed_text([(0, "2 GFLOP"), (1, None)]) == "s0 2 GFLOP; s1 not reached"
    assert per_seed_text([(0, "0"), (1, None)], "<br>") == "s0 0<br>s1 not reached" and per_seed_text([]) == ""


def test_loads_without_third_party_modules():
    code = ("import sys; before = set(sys.modules); import common.fmt; "
            "import json; print(json.dumps(sorted(m.split('.')[0] for m in set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = set(__import__("json").loads(out.stdout))
    assert loaded <= {"common", *sys.stdlib_module_names}, loaded - {"common", *sys.stdlib_module_names}
    assert not loaded & {"plotly", "streamlit", "torch", "numpy", "pydantic", "pandas"}
