"""`aero compare` formatting (the API call itself is exercised end to end in test_platform_cli).
The number formats are common/fmt.py's (tests/common/test_fmt.py), with the seeds they stand on."""

from rich.console import Console

from cli.compare_cmds import bench_table, cost_table, reach_table, runs_text, sig_table


def test_cost_table_reads_like_the_dashboard_with_seeds():
    stat = lambda m, lo=None, hi=None, n=3: {"mean": m, "lo": lo, "hi": hi, "n": n}  # noqa: E731
    group = {"run_ids": [1, 2, 3], "seeds": [0, 1, 2]}
    cmp = {"alpha": 0.05, "baseline": "b", "groups": [
        {"key": "b", "label": "grpo", **group, "mean": {"time/step_s": stat(2.0, 1.9, 2.1), "flops/total": stat(4e9, 3.9e9, 4.1e9)}},
        {"key": "a", "label": "aero", **group,
         "mean": {"time/step_s": stat(1.04, 0.98, 1.10), "zero_acc/after_rescue": stat(0.18, 0.16, 0.2)},
         "ratios": {"mean": {"time/step_s": {"mean": 0.52, "lo": 0.48, "hi": 0.56, "n": 3}}}}]}
    t = cost_table(cmp)
    assert [c.header for c in t.columns] == ["group", "runs", "s / step", "FLOPs / step", "trained rollouts / step",
                                             "zero-acc after rescue", "wasted FLOPs"]
    grpo, aero, ratio = (list(row) for row in zip(*(c._cells for c in t.columns)))
    assert grpo[2:] == ["2 ± 0.1 s (n=3)", "4 ± 0.1 GFLOP (n=3)", "–", "–", "–"]
    assert aero[2:] == ["1.04 ± 0.06 s (n=3)", "–", "–", "18.0% ± 2.0% (n=3)", "–"]
    assert ratio == ["  ratio", "", "0.52× [0.48, 0.56] (3 pairs)", "–", "–", "–", "–"]


def test_sig_table_prints_the_paired_tests():
    cmp = {"groups": [{"key": "a", "label": "aero"}], "significance": {"overall": [
        {"group": "a", "metric": "avg_at_k", "k": 8, "diff": 0.02, "ci": [0.004, 0.036], "p_value": 0.0004, "problems": 8,
         "seeds": [2, 3]}]}}
    row = [c._cells[0] for c in sig_table(cmp).columns]
    assert row == ["overall", "aero", "avg_at_k@8", "+0.0200", "[+0.0040, +0.0360]", "p<0.001", "8", "2/3"]


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


def test_reach_table_prints_compute_ratios_and_not_reached():
    t = reach_table(REACH_CMP)
    assert "Compute to reach GRPO's accuracy" in t.title
    assert [c.header for c in t.columns] == ["group", "50% of GRPO's gain\n(Avg@8 ≥ 0.400)", "100% of GRPO's gain\n(Avg@8 ≥ 0.500)"]
    half, full = t.columns[1]._cells, t.columns[2]._cells
    assert half[0] == "60 ± 10 GFLOP\n6 s"  # the baseline: no ratio to itself
    # the dashboard's cell (common.fmt.reach_cell), with the seed pairs behind each ratio
    assert half[1] == "20 GFLOP\n2 s\n0.33× [0.30, 0.37] FLOPs (2 pairs)\n0.35× time (2 pairs)"
    assert full[1].endswith("\nnot reached (1/2 seeds)")
    assert half[2] == full[2] == "not reached (2/2 seeds)"
    console = Console(width=200, record=True)
    console.print(t)
    assert "not reached (2/2 seeds)" in console.export_text()


def test_reach_table_says_why_without_targets():
    cmp = {**REACH_CMP, "reach": {"reason": "no step-0 evaluation of the base", "targets": [], "groups": []}}
    assert reach_table(cmp) == "Compute to reach GRPO's accuracy: no targets (no step-0 evaluation of the base)."
