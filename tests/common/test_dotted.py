"""common/dotted.py: the one conversion between dotted config paths and nested dicts, used by
the CLI (--set), the Launch form, sweep overrides and seed-group labels."""

import json
import subprocess
import sys

from common.dotted import flatten, merge, nest, set_path

NESTED = {"steps": 3, "aero": {"n_explore": 8, "k": 1.0}, "benchmarks": {}, "tags": ["a", "b"]}


def test_flatten_and_nest_are_inverse():
    flat = flatten(NESTED)
    assert flat == {"steps": 3, "aero.n_explore": 8, "aero.k": 1.0, "benchmarks": {}, "tags": ["a", "b"]}
    assert nest(flat) == NESTED


def test_set_path_creates_sections_and_replaces_a_scalar_in_the_way():
    d = {"aero": 5}
    set_path(d, "aero.k", 2)
    set_path(d, "optim.lr", 1e-4)
    assert d == {"aero": {"k": 2}, "optim": {"lr": 1e-4}}


def test_merge_lays_sections_over_a_copy():
    base = {"steps": 3, "aero": {"n_explore": 8, "k": 1.0}}
    out = merge(base, {"aero": {"k": 2.0}, "seed": 1, "optim": {"lr": 0.1}})
    assert out == {"steps": 3, "aero": {"n_explore": 8, "k": 2.0}, "seed": 1, "optim": {"lr": 0.1}}
    assert base == {"steps": 3, "aero": {"n_explore": 8, "k": 1.0}}  # untouched
    assert merge(base, {"aero": {}}) == base and merge(base, {"new": {"deeper": {}}}) == base  # no value: no change
    assert merge(base, {"aero": 7})["aero"] == 7
    assert merge(base, {"benchmarks": {"MATH.500": "/d"}})["benchmarks"] == {"MATH.500": "/d"}  # keys are literal


def test_loads_without_third_party_modules():
    code = ("import sys; before = set(sys.modules); import common.dotted, common.metric_keys; "
            "import json; print(json.dumps(sorted(m.split('.')[0] for m in set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout)) - {"common"}
    assert loaded <= set(sys.stdlib_module_names), loaded


def test_with_defaults_fills_only_what_is_left_out():
    from common.dotted import with_defaults

    data = {"steps": 3, "optim": {"warmup_steps": 0}, "aero": {}, "bad": [1]}
    out = with_defaults(data, {"steps": 9, "max_new_tokens": 24, "optim.lr": 1e-5, "aero.k": 2, "bad.x": 1})
    assert out == {"steps": 3, "max_new_tokens": 24, "optim": {"warmup_steps": 0, "lr": 1e-5}, "aero": {"k": 2},
                   "bad": [1]}
    assert data == {"steps": 3, "optim": {"warmup_steps": 0}, "aero": {}, "bad": [1]}  # unchanged
