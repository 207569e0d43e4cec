"""The Launch form's model against the API's real OpenAPI schema, and the HTTP client against
a live API: each failure kind becomes an ApiError with a readable message."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

import common.dotted as dotted
from dashboard import forms
from dashboard.client import AeroClient, ApiError, api_url_from_env, field_errors_of, token_from_env
from trainer.methods.spec import specs


TAIL = ["Asynchronous training", "Resources", "Advanced"]  # after every method's sections


@pytest.fixture(scope="module")
def doc(seeded) -> dict:
    return httpx.get(f"{seeded.url}/openapi.json").json()


# ---------------------------------------------------------------- forms


def test_field_specs_carry_paper_defaults_and_help(doc):
    spec = forms.field_spec(doc, "aero.tau", "tau")
    assert (spec.type, spec.default) == ("number", 0.5) and "paper: 0.5" in spec.help
    assert forms.field_spec(doc, "aero.k_max", "K_max").type == "integer"
    assert forms.field_spec(doc, "dapo.dynamic_sampling", "ds").type == "boolean"
    device = forms.field_spec(doc, "device", "device")
    assert device.type == "choice" and device.choices == ("auto", "cpu", "cuda") and device.default == "auto"
    assert forms.field_spec(doc, "steps", "steps").help  # fallback help where the schema has none
    assert forms.field_spec(doc, "aero.no_such_field", "x") is None


def test_every_form_field_exists_in_the_schema(doc):
    sections = tuple(sec.form for s in specs() for sec in s.sections)  # each method module's form inputs
    shared = (forms.COMMON_FIELDS, forms.CLIP_FIELDS, forms.OFFPOLICY_FIELDS, forms.RESOURCE_FIELDS, forms.ADVANCED_FIELDS)
    for fields in (*shared, *sections):
        for path, _ in fields:
            assert forms.field_schema(doc, path) is not None, path


def test_sections_follow_the_method(doc, seeded):
    menu = forms.MethodMenu.from_specs(AeroClient(seeded.url).methods())  # the specs over HTTP, as the app reads them
    assert list(menu.choices)[:5] == ["grpo", "dapo", "aero", "aero-s1", "aero-s1s2"]
    assert menu.names == tuple(menu.choices) and menu.text("aero") == menu.choices["aero"] and menu.text("x") == "x"
    assert list(forms.form_specs(doc, menu, ["grpo"])) == ["Training", "Policy update", *TAIL]
    assert list(forms.form_specs(doc, menu, ["dapo"])) == ["Training", "DAPO", *TAIL]
    assert list(forms.form_specs(doc, menu, ["aero-s1", "dapo"])) == ["Training", "AERO sampling (paper defaults)", "DAPO",
                                                                       "Policy update", *TAIL]


def test_offpolicy_fields_carry_the_schemas_defaults_bounds_and_anchors(doc):
    """The asynchronous-training inputs read trainer/spec/offpolicy.py's defaults (synchronous, tis,
    C = 2) and help texts, which name the other frameworks' settings."""
    specs_ = {s.path: s for s in forms.form_specs(doc, forms.NO_MENU, ["grpo"])[forms.OFFPOLICY_SECTION]}
    assert list(specs_) == [p for p, _ in forms.OFFPOLICY_FIELDS]
    k, corr, cap = specs_["offpolicy.max_staleness"], specs_["offpolicy.correction"], specs_["offpolicy.is_cap"]
    assert (k.type, k.default) == ("integer", 0) and "AReaL" in k.help and "max_head_offpolicyness" in k.help
    assert (corr.type, corr.default, corr.choices) == ("choice", "tis", ("none", "tis", "mis")) and "is_cap" in corr.help
    assert (cap.type, cap.default) == ("number", 2.0) and cap.help
    assert forms.field_schema(doc, "offpolicy.max_staleness")["maximum"] == 8
    assert {s.tier for s in specs_.values()} == {forms.EXPERT}  # synchronous by default: behind the Expert settings expander

def test_the_form_shows_every_basic_field_first_and_the_expert_ones_behind_one_expander(doc, seeded):
    """The schema names each field's tier (trainer/spec/config_types.py); the form asks for every basic
    field of an AERO run, with an input of its own (method, model, seeds) or in the grid above
    the Expert settings expander, and keeps every expert field it shows in that expander."""
    menu = forms.MethodMenu.from_specs(AeroClient(seeded.url).methods())
    basic = forms.basic_paths(doc)
    assert 12 <= len(basic) <= 20 and {"steps", "optim.lr", "aero.n_explore"} <= set(basic)
    for methods in (["aero"], ["grpo", "dapo"], ["aero-mem"]):
        sections = forms.form_specs(doc, menu, methods)
        shown, expert = forms.tiered(sections)
        assert {s.tier for s in shown} == {forms.BASIC} and {s.tier for v in expert.values() for s in v} == {forms.EXPERT}
        reads_aero = "AERO sampling (paper defaults)" in sections  # aero.* only for a method that reads them
        assert sorted(s.path for s in shown) == sorted(p for p in basic if p not in forms.OWN_INPUTS
                                                       and (reads_aero or not p.startswith("aero."))), methods
        assert "Training" not in expert and "Advanced" in expert  # the common knobs all basic; sampling, evals expert
    assert forms.field_spec(doc, "aero.tau", "tau").tier == forms.EXPERT
    assert forms.field_spec(doc, "engine", "engine").choices == ("embedded", "verl")


def _spec(name: str, description: str, sections: tuple[str, ...] = (), clip: str = "symmetric") -> dict:
    return {"name": name, "description": description, "clip": clip,
            "sections": [{"name": s, "title": s.upper(), "form": [[f"{s}.x", "x"]]} for s in sections]}


def test_menus_from_different_specs_do_not_affect_each_other():
    """Each session (and test) builds its own menu: building, or changing the specs of, one
    never reaches another, and a menu cannot be changed in place."""
    specs_a = [_spec("grpo", "GRPO"), _spec("dapo", "DAPO", ("dapo",), clip="clip-higher")]
    menu_a = forms.MethodMenu.from_specs(specs_a)
    menu_b = forms.MethodMenu.from_specs([_spec("aero", "AERO", ("aero",)), _spec("grpo", "GRPO (b)")])
    assert dict(menu_a.choices) == {"grpo": "GRPO", "dapo": "DAPO"} and menu_a.names == ("grpo", "dapo")
    assert dict(menu_b.choices) == {"aero": "AERO", "grpo": "GRPO (b)"} and menu_b.names == ("aero", "grpo")
    assert list(forms.sections_for(menu_a, ["dapo"])) == ["Training", "DAPO", *TAIL]
    assert list(forms.sections_for(menu_b, ["dapo"])) == ["Training", "Policy update", *TAIL]  # b has no dapo
    assert list(forms.sections_for(menu_b, ["aero"])) == ["Training", "AERO", "Policy update", *TAIL]
    assert list(forms.sections_for(menu_a, ["aero"])) == ["Training", "Policy update", *TAIL]
    specs_a[1]["sections"].clear()  # the caller's specs change later: the menu built from them does not
    specs_a.append(_spec("aero", "AERO"))
    assert menu_a.names == ("grpo", "dapo") and list(forms.sections_for(menu_a, ["dapo"])) == ["Training", "DAPO", *TAIL]
    with pytest.raises(dataclasses.FrozenInstanceError):
        menu_a.choices = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        menu_a.choices["x"] = "X"  # type: ignore[index]
    assert forms.NO_MENU.names == () and not forms.NO_MENU.specs  # untouched by every menu built above
    assert list(forms.sections_for(forms.NO_MENU, ["aero"])) == ["Training", "Policy update", *TAIL]


def test_nest_and_submission_bodies():
    cfg = dotted.nest({"steps": 3, "aero.k": 2.0, "aero.tau": 0.4, "optim.lr": 1e-4})
    assert cfg == {"steps": 3, "aero": {"k": 2.0, "tau": 0.4}, "optim": {"lr": 1e-4}}
    assert forms.submission(["aero"], [7], cfg, name=" x ", tags=["t"]) == (
        "run", {"config": {**cfg, "method": "aero", "seed": 7}, "tags": ["t"], "name": "x"})
    kind, body = forms.submission(["grpo", "aero"], [0, 1], cfg)
    assert kind == "sweep" and body == {"base": cfg, "methods": ["grpo", "aero"], "tags": [], "seeds": [0, 1]}
    assert forms.submission(["aero"], [0, 1], cfg)[0] == "sweep"
    assert forms.parse_list("0, 1;2,", int) == [0, 1, 2]
    # a staleness sweep: several values become one override each (then a sweep even for one run); one sets the field
    flat = {"steps": 3, "offpolicy.max_staleness": 0}
    config, overrides = forms.swept(flat, forms.STALENESS_SWEEP, [0, 1, 2])
    assert config == flat and overrides == [{"offpolicy.max_staleness": k} for k in (0, 1, 2)]
    assert forms.swept(flat, forms.STALENESS_SWEEP, [2]) == ({"steps": 3, "offpolicy.max_staleness": 2}, [])
    assert forms.swept(flat, forms.STALENESS_SWEEP, []) == (flat, [])
    kind, body = forms.submission(["aero"], [0], cfg, overrides=overrides)
    assert kind == "sweep" and body["overrides"] == overrides and body["methods"] == ["aero"] and body["seeds"] == [0]
    assert "overrides" not in forms.submission(["grpo", "aero"], [0], cfg)[1]
    with pytest.raises(ValueError):
        forms.parse_list("1, x", int)


# ---------------------------------------------------------------- client


def test_settings_from_env(tmp_path):
    assert api_url_from_env({"AERO_API_URL": "http://h:1/"}) == "http://h:1"
    assert api_url_from_env({}) == "http://127.0.0.1:8000"
    (tmp_path / "admin.token").write_text("tok-file\n")
    assert token_from_env({"AERO_API_TOKEN": "tok-env", "AERO_DATA_DIR": str(tmp_path)}) == "tok-env"
    assert token_from_env({"AERO_DATA_DIR": str(tmp_path)}) == "tok-file"
    assert token_from_env({"AERO_DATA_DIR": str(tmp_path / "none")}) is None


def test_field_errors_strip_body_prefixes():
    detail = [{"loc": ["body", "config", "aero", "n_explore"], "msg": "a"}, {"loc": ["body", "base", "steps"], "msg": "b"},
              {"loc": ["body", "config", "aero", "n_explore"], "msg": "c"}, "junk"]
    assert field_errors_of(detail) == {"aero.n_explore": "a; c", "steps": "b"}


def test_client_reads(seeded):
    c = AeroClient(seeded.url, seeded.token)
    assert c.health()["status"] == "ok"
    page = c.list_runs(status=["succeeded"], method=["aero"])
    assert [r["id"] for r in page["data"]] == [seeded.ids["aero"]]
    m = c.metrics(seeded.ids["aero"], ["reward/mean"], max_points=4)
    assert m["steps"] == [1, 11, 21, 30] and m["stored_steps"] == 30  # decimated by the API, last step kept
    assert {e["benchmark"] for e in c.evals(seeded.ids["aero"])} == {"L1", "L2", "overall"}
    assert c.compare([seeded.ids["grpo"], seeded.ids["aero"]])["baseline"] == seeded.ids["grpo"]
    assert c.export_csv(seeded.ids["aero"]).startswith(b"step,")
    methods = {m["name"]: m for m in c.methods()}
    assert [sec["name"] for sec in methods["aero"]["sections"]] == ["aero"] and methods["dapo"]["clip"] == "clip-higher"


def test_client_error_kinds(seeded, fresh_api, helpers):
    with pytest.raises(ApiError) as e:
        AeroClient(f"http://127.0.0.1:{helpers.free_port()}").health()
    assert e.value.kind == "down" and "aero up" in e.value.message
    with pytest.raises(ApiError) as e:
        AeroClient(seeded.url, "wrong").create_run({})
    assert (e.value.kind, e.value.status) == ("auth", 401)
    with pytest.raises(ApiError) as e:
        AeroClient(seeded.url).get_run(424242)
    assert e.value.kind == "not_found"
    c = AeroClient(fresh_api.url, fresh_api.token)
    with pytest.raises(ApiError) as e:
        c.create_run({"config": {"aero": {"n_explore": 40}}})
    assert e.value.kind == "invalid" and "n_explore" in e.value.field_errors["aero.n_explore"]
    rid = helpers.add_run(fresh_api.db_url, "grpo", steps=5, done=1, status="running")
    with pytest.raises(ApiError) as e:
        c.delete_run(rid)
    assert e.value.kind == "conflict"
