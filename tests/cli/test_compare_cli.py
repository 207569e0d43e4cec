"""`aero compare` formatting (the API call itself is exercised end to end in test_platform_cli)."""

from cli.compare_cmds import bench_table, p_text, ratio_text, stat_text


def test_stat_ratio_and_p_text():
    assert stat_text({"mean": 0.48, "lo": 0.46, "hi": 0.5, "n": 3}) == "0.480 ± 0.020 (n=3)"
    assert stat_text({"mean": 2.0, "lo": None, "hi": None, "n": 1}, "{:.3g}") == "2 (n=1)"
    assert stat_text(None) == "—" and stat_text({"mean": None, "n": 0}) == "—"
    assert ratio_text({"mean": 0.52, "lo": 0.48, "hi": 0.56, "n": 3}) == "0.52× [0.48, 0.56] (3 pairs)"
    assert ratio_text({"mean": 0.5, "lo": None, "hi": None, "n": 1}) == "0.50× (1 pair)"
    assert p_text(0.0004) == "p<0.001" and p_text(0.0123) == "p=0.012"


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
