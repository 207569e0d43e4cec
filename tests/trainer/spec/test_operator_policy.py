"""trainer/spec/operator_policy.py: the operator's policy applied to run configs, and the sandbox taking its
isolation mode, interpreter and uid from the policy only."""

from __future__ import annotations

import os

import pytest

from trainer.spec.config import ConfigError, parse_run_config
from trainer.spec.operator_policy import OUTSIDE_ROOTS, RunPolicy, platform_denied, policy_issues

CODE = {"task": "code", "preset": None}


def fields(data, policy) -> dict[str, str]:
    with pytest.raises(ConfigError) as e:
        parse_run_config(data, policy)
    return dict(e.value.issues)


def test_defaults_accept_the_default_config_and_refuse_the_reported_attacks():
    pol = RunPolicy()
    assert parse_run_config({}, pol).steps == 60
    got = fields({**CODE, "model_path": "/m", "train_data": "/d.jsonl", "steps": 1_000_000, "batch_prompts": 65_536,
                  "n_total": 4096, "max_new_tokens": 2**62, "eval_problems": 2**62, "aero": {"n_max": 2**62, "k_max": 2**62},
                  "code": {"memory_mb": 1 << 20, "max_processes": 100_000}}, pol)
    assert set(got) == {"steps", "batch_prompts", "n_total", "max_new_tokens", "eval_problems", "aero.n_max",
                        "aero.k_max", "code.memory_mb", "code.max_processes"}
    assert got["code.memory_mb"] == "at most 4096 (operator cap AERO_SANDBOX_MAX_MEMORY_MB)"


def test_work_multipliers_are_capped():
    """The two fields a hostile-input suite found uncapped (4611686018427387904 was accepted)."""
    got = fields({"aero": {"delta_n": 4611686018427387904}}, RunPolicy())
    got.update(fields({"method": "dapo", "dapo": {"max_gen_rounds": 4611686018427387904}}, RunPolicy()))
    assert got == {"aero.delta_n": "at most 1024 (operator cap AERO_MAX_AERO_DELTA_N)",
                   "dapo.max_gen_rounds": "at most 64 (operator cap AERO_MAX_DAPO_GEN_ROUNDS)"}
    tight = RunPolicy(max_aero_delta_n=4, max_dapo_gen_rounds=2)
    assert parse_run_config({"aero": {"delta_n": 4}}, tight).aero.delta_n == 4
    assert parse_run_config({"method": "dapo", "dapo": {"max_gen_rounds": 2}}, tight).dapo.max_gen_rounds == 2


def _int_fields(model, prefix=""):
    import types
    import typing

    for name, f in model.model_fields.items():
        ann = f.annotation
        nested = [a for a in (typing.get_args(ann) or (ann,)) if hasattr(a, "model_fields")]  # a method section is Model | None
        if nested:
            yield from _int_fields(nested[0], f"{prefix}{name}.")
            continue
        args = [a for a in typing.get_args(ann) if a is not type(None)] \
            if typing.get_origin(ann) in (typing.Union, types.UnionType) else [ann]
        if args and all(a is int for a in args):
            yield f"{prefix}{name}", f


def test_every_integer_field_is_bounded_by_the_schema_or_an_operator_cap():
    """Walks the run-config schema: an integer field with neither an upper bound of its own nor
    an operator cap (trainer.spec.operator_policy.CAPS) lets a token holder ask for unbounded work."""
    from trainer.spec.config import RunConfig
    from trainer.spec.operator_policy import CAPS

    capped = {field for field, _ in CAPS}
    unbounded = [path for path, f in _int_fields(RunConfig)
                 if path not in capped and not any(getattr(m, "le", None) is not None or getattr(m, "lt", None)
                                                   is not None for m in f.metadata)]
    assert unbounded == [], f"integer fields with no upper bound and no operator cap: {unbounded}"
    assert len(list(_int_fields(RunConfig))) > 25  # the walk reached the nested sections


def test_aero_k_must_be_finite_and_sane_even_without_a_policy():
    for k in (1e308, float("inf"), float("nan")):
        with pytest.raises(ConfigError) as e:
            parse_run_config({"aero": {"k": k}})
        assert [f for f, _ in e.value.issues] == ["aero.k"]
    assert "aero.k" in fields({"aero": {"k": 1001.0}}, RunPolicy())
    assert parse_run_config({"aero": {"k": 2.5}}, RunPolicy()).aero.k == 2.5


@pytest.mark.parametrize("code", [{"network": "audit"}, {"python": "/usr/bin/env"}, {"run_as_uid": 0}])
def test_sandbox_operator_settings_are_not_run_config_fields(code):
    with pytest.raises(ConfigError) as e:
        parse_run_config({"code": code})
    (field, msg), = e.value.issues
    assert field == f"code.{next(iter(code))}" and "operator setting" in msg


def test_data_roots_follow_symlinks_and_deny_platform_files(tmp_path):
    root = tmp_path / "data"
    (root / "ok").mkdir(parents=True)
    (root / "out").symlink_to("/etc")
    pol = RunPolicy(data_roots=(root,), denied=platform_denied(root))
    assert policy_issues(parse_run_config({**CODE, "model_path": str(root / "ok"), "train_data": str(root / "t.jsonl")}), pol) == []
    for bad in (root / "out" / "shadow", root / ".." / "x", root / "admin.token", root / "broker.sqlite-wal",
                root / "logs" / "worker.log", "/etc/shadow", "rel"):
        got = fields({**CODE, "model_path": str(bad), "train_data": str(root / "t.jsonl")}, pol)
        assert got == {"model_path": OUTSIDE_ROOTS}, bad
    got = fields({**CODE, "model_path": str(root / "ok"), "train_data": "/etc/passwd", "benchmarks": {"B": "/proc/self/environ"}}, pol)
    assert got == {"train_data": OUTSIDE_ROOTS, "benchmarks.B": OUTSIDE_ROOTS}


def test_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("AERO_SANDBOX_ISOLATION", "namespace")
    monkeypatch.setenv("AERO_SANDBOX_UID", "1234")
    monkeypatch.setenv("AERO_SANDBOX_UID_COUNT", "8")
    monkeypatch.setenv("AERO_MAX_AERO_K", "8")
    monkeypatch.setenv("AERO_DATA_ROOTS", os.pathsep.join(["/a", "/b"]))
    pol = RunPolicy.from_env()
    assert (pol.sandbox_isolation, pol.sandbox_uid, pol.sandbox_uid_count, pol.max_aero_k) == ("namespace", 1234, 8, 8.0)
    assert [str(r) for r in pol.data_roots] == ["/a", "/b"]
    assert RunPolicy.from_env({}).data_roots is None  # the CLI without AERO_DATA_ROOTS: the operator's own paths
    monkeypatch.setenv("AERO_MAX_AERO_K", "inf")
    with pytest.raises(ValueError):
        RunPolicy.from_env()


def test_the_sandbox_takes_isolation_interpreter_and_uid_from_the_policy(monkeypatch, tmp_path):
    import trainer.tasks.code as code
    import trainer.tasks.sandbox as sandbox

    monkeypatch.setattr(sandbox, "isolation", lambda limits: (None, True))
    monkeypatch.setattr(sandbox, "sandbox_python", lambda python, prefix, drop: python)
    monkeypatch.setattr(code, "CodeTask", lambda train_path, limits, **kw: limits)  # make_task loads it by name
    cfg = parse_run_config({**CODE, "model_path": "/m", "train_data": str(tmp_path / "t.jsonl"),
                            "code": {"memory_mb": 512, "audit_hook": "fallback"}})
    pol = RunPolicy(sandbox_isolation="namespace", sandbox_python="/opt/py/bin/python3", sandbox_uid=4242,
                    sandbox_uid_count=3)
    limits = code.build_code_task(cfg, {}, pol)
    assert (limits.network, limits.python, limits.run_as_uid, limits.memory_mb) == ("namespace", "/opt/py/bin/python3", 4242, 512)
    assert limits.uid_count == 3  # the uid range: AERO_SANDBOX_UID .. + AERO_SANDBOX_UID_COUNT - 1
    assert limits.audit_hook == "always"  # the operator's 'always' wins over the config's 'fallback'
    assert code.build_code_task(cfg, {}, pol.model_copy(update={"sandbox_audit_hook": "fallback"})).audit_hook == "fallback"


def test_aero_train_checks_the_policy_before_any_compute(tmp_path, monkeypatch):
    """The CLI is a boundary: it parses the config once, against the operator's policy, before
    run_training (which takes the parsed RunConfig) computes or writes anything."""
    from typer.testing import CliRunner

    from cli.main import app

    monkeypatch.setenv("AERO_MAX_STEPS", "4")
    res = CliRunner().invoke(app, ["train", "--steps", "5", "--out", str(tmp_path / "run")])
    assert res.exit_code != 0 and "at most 4 (operator cap AERO_MAX_STEPS)" in res.output
    assert not (tmp_path / "run" / "config.json").exists()
