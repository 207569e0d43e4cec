"""`aero compare` formatting (the API call itself is exercised end to end in test_platform_cli)."""

from rich.console import Console

from cli.compare_cmds import bench_table, cost_table, p_text, ratio_text, reach_table, runs_text, si_text, stat_text


def test_stat_ratio_and_p_text():
    assert stat_text({"mean": 0.48, "lo": 0.46, "hi": 0.5, "n": 3}) == "0.480 ± 0.020 (n=3)"
    assert stat_text({"mean": 2.0, "lo": None, "hi": None, "n": 1}, "{:.3g}") == "2 (n=1)"
    assert stat_text(None) == "—" and stat_text({"mean": None, "n": 0}) == "—"
    assert ratio_text({"mean": 0.52, "lo": 0.48, "hi": 0.56, "n": 3}) == "0.52× [0.48, 0.56] (3 pairs)"
    assert ratio_text({"mean": 0.5, "lo": None, "hi": None, "n": 1}) == "0.50× (1 pair)"
    assert p_text(0.0004) == "p<0.001" and p_text(0.0123) == "p=0.012"


def test_runs_column_marks_ids_and_names_seeds():
    # "12,15 (0,1)" read like counts; ids get a '#' and the seeds say they are seeds.
    assert runs_text([12, 15], [0, 1]) == "#12, #15 (seeds 0, 1)"
    assert runs_text([7], [3]) == "#7 (seed 3)" and runs_text([7], [None]) == "#7 (seed ?)"
    stat = {"mean": 1.0, "lo": None, "hi": None, "n": 2}
    group = {"label": "grpo", "run_ids": [12, 15], "seeds": [0, 1], "mean": {"time/step_s": stat}}
    t = cost_table({"alpha": 0.05, "baseline": "b", "groups": [{"key": "b", **group}]})
    assert t.columns[1].header == "runs" and t.columns[1]._cells == ["#12, #15 (seeds 0, 1)"]


def test_bench_table_puts_the_p_value_on_overall():
    stat = {"mean": 0.5, "lo": 0.4, "hi": 0.6, "n": 2}
    cmp = {"k": 8, "baseline": "b", "alpha": 0.05,
           "groups": [{"key": "b", "label": "grpo", "evals": {"overall": {"avg_at_k": stat}, "L1": {"avg_at_k": stat}}},
                      {"key": "a", "label": "aero", "evals": {"overall": {"avg_at_k": stat}, "L1": {"avg_at_k": stat}}}],
           "significance": {"overall": [{"group": "a", "metric": "avg_at_k", "p_value": 0.03}]}}
    t = bench_table(cmp, "avg_at_k")
    assert [c.header for c in t.columns] == ["group", "L1", "overall (p)"]
    overall = t.columns[2]._cells
    assert overall == ["0.500 ± 0.100 (n=2)", "0.500 ± 0.100 (n=2) (p=0.030)"]


def _stat(mean, lo=None, hi=None, n=2):
    return {"mean": mean, "lo": lo, "hi": hi, "n": n, "values": []}


def _ratio(mean, lo=None, hi=None, n=2):
    return {"mean": mean, "lo": lo, "hi": hi, "n": n, "values": [], "scale": "log", "pairs": []}


def _target(fraction, reached, of, flops, seconds, rf, rs):
    return {"fraction": fraction, "reached": reached, "of": of, "step": _stat(None), "flops": flops, "seconds": seconds,
            "ratio": {"flops": rf, "seconds": rs}}


REACH_CMP = {
    "k": 8, "alpha": 0.05, "baseline": "b",
    "groups": [{"key": "b", "label": "grpo", "method": "grpo"}, {"key": "a", "label": "aero", "method": "aero"},
               {"key": "d", "label": "dapo", "method": "dapo"}],
    "reach": {"baseline": "b", "window": 3, "reason": None,
              "targets": [{"fraction": 0.5, "accuracy": _stat(0.4)}, {"fraction": 1.0, "accuracy": _stat(0.5)}],
              "groups": [
                  {"key": "b", "label": "grpo", "targets": [
                      _target(0.5, 2, 2, _stat(6e10, 5e10, 7e10), _stat(6.0), _ratio(1.0), _ratio(1.0)),
                      _target(1.0, 2, 2, _stat(1.2e11), _stat(12.0), _ratio(1.0), _ratio(1.0))]},
                  {"key": "a", "label": "aero", "targets": [
                      _target(0.5, 2, 2, _stat(2e10), _stat(2.0), _ratio(1 / 3, 0.3, 0.37), _ratio(0.35)),
                      _target(1.0, 1, 2, _stat(4e10, n=1), _stat(4.0, n=1), _ratio(1 / 3, n=1), _ratio(0.33, n=1))]},
                  {"key": "d", "label": "dapo", "reason": None, "targets": [
                      _target(0.5, 0, 2, _stat(None), _stat(None), _ratio(None, n=0), _ratio(None, n=0)),
                      _target(1.0, 0, 2, _stat(None), _stat(None), _ratio(None, n=0), _ratio(None, n=0))]}]},
}


def test_si_text():
    assert si_text(_stat(2.4449e9, 2.13e9, 2.75e9), "FLOP") == "2.44 ± 0.31 GFLOP"
    assert si_text(_stat(6.0), "s") == "6 s" and si_text(_stat(None), "s") == "—"


def test_reach_table_prints_compute_ratios_and_not_reached():
    t = reach_table(REACH_CMP)
    assert "Compute to reach GRPO's accuracy" in t.title
    assert [c.header for c in t.columns] == ["group", "50% of GRPO's gain\n(Avg@8 ≥ 0.400)", "100% of GRPO's gain\n(Avg@8 ≥ 0.500)"]
    half, full = t.columns[1]._cells, t.columns[2]._cells
    assert half[0] == "60 ± 10 GFLOP\n6 s"  # the baseline: no ratio to itself
    assert half[1] == "20 GFLOP  0.33× [0.30, 0.37] (2 pairs)\n2 s  0.35× (2 pairs)"
    assert full[1].endswith("\nnot reached (1/2 seeds)")
    assert half[2] == full[2] == "not reached (2/2 seeds)"
    console = Console(width=200, record=True)
    console.print(t)
    assert "not reached (2/2 seeds)" in console.export_text()


def test_reach_table_says_why_without_targets():
    cmp = {**REACH_CMP, "reach": {"reason": "no step-0 evaluation of the base", "targets": [], "groups": []}}
    assert reach_table(cmp) == "Compute to reach GRPO's accuracy: no targets (no step-0 evaluation of the base)."
