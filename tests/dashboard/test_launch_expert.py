"""The Launch form's generic expert inputs (dashboard/expert_fields.py), under AppTest against a
LIVE API: every expert field of the schema is in the *Expert settings* expander exactly once (a
method's or a task's section only when it is read), a changed one is sent and only a changed one
(an untouched form sends the body it always sent), and a bad JSON is refused naming its field."""

from __future__ import annotations

import collections

import httpx
import pytest

from common.dotted import flatten
from dashboard import expert_fields, forms
from dashboard.client import AeroClient
from tests.dashboard.apptest import open_page
from trainer.spec.config import METHOD_SECTION_NAMES, TASK_SECTION_NAMES, RunConfig
from trainer.spec.config_types import leaf_tiers

# the keys of the expert fields whose inputs are not named f_<path>; the Name input is outside the expander
KEYS = {"alerts.rules": "f_alerts_rules", "alerts.webhook_url": "f_alerts_webhook", "trackers": "f_trackers"}
EXPERT = [path for path, tier in leaf_tiers(RunConfig).items() if tier == "expert" and path != "name"]


def walk(node):
    yield node
    for key in sorted(getattr(node, "children", None) or {}):
        yield from walk(node.children[key])


def expander(at):
    return next(e for e in at.expander if e.label == forms.EXPERT_SECTION)


def submit(at):
    at.button[0].click().run()  # the form's only button: Launch
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.fixture
def bodies(monkeypatch):
    """The bodies the dashboard POSTs to /api/runs and /api/sweeps, in order (then sent on)."""
    sent: list[dict] = []
    for name in ("create_run", "create_sweep"):
        real = getattr(AeroClient, name)

        def record(self, body, _real=real):
            sent.append(body)
            return _real(self, body)
        monkeypatch.setattr(AeroClient, name, record)
    return sent


@pytest.mark.parametrize("methods,model,read", [
    (["grpo"], "tiny", ()),
    (["dapo"], "tiny", ("dapo",)),
    ("all", "Local model + dataset", (*METHOD_SECTION_NAMES, *TASK_SECTION_NAMES)),  # a local model may train code
])
def test_every_expert_field_is_in_the_expander_exactly_once(fresh_api, use_api, methods, model, read):
    use_api(fresh_api)
    at = open_page("launch")
    if methods == "all":
        at.get("button_group")[0].set_value("Sweep").run()
        methods = [m["name"] for m in AeroClient(fresh_api.url).methods()]
        at.multiselect(key="launch_methods").set_value(methods).run()
    else:
        at.selectbox(key="launch_method").set_value(methods[0]).run()
    at.radio(key="launch_model").set_value(model).run()
    assert not at.exception, [e.value for e in at.exception]
    inside = collections.Counter(getattr(n, "key", None) for n in walk(expander(at)))
    everywhere = collections.Counter(getattr(n, "key", None) for n in walk(at.main))
    sections = (*METHOD_SECTION_NAMES, *TASK_SECTION_NAMES)
    want = [p for p in EXPERT if p.split(".")[0] not in sections or p.split(".")[0] in read]
    keys = {p: KEYS.get(p, f"f_{p}") for p in want}
    assert {p: inside[k] for p, k in keys.items() if inside[k] != 1 or everywhere[k] != 1} == {}
    unread = [p for p in EXPERT if p not in want]  # an unread section's fields are nowhere
    assert [p for p in unread if everywhere[f"f_{p}"]] == []
    assert everywhere["f_name"] == 1 and not inside["f_name"]  # the run's name: the input beside the seeds


def test_a_generic_field_is_sent_only_when_changed(fresh_api, use_api, bodies):
    use_api(fresh_api)
    submit(open_page("launch"))
    doc = httpx.get(f"{fresh_api.url}/openapi.json").json()
    menu = forms.MethodMenu.from_specs(AeroClient(fresh_api.url).methods())
    handwritten = {s.path for specs in forms.form_specs(doc, menu, ["aero"]).values() for s in specs}
    # untouched: the hand-written fields and the model, method, seed, alert rules and trackers, as before
    assert set(flatten(bodies[0]["config"])) == handwritten | {"preset", "model_path", "method", "seed", "alerts.rules",
                                                               "trackers"}
    at = open_page("launch")
    assert at.number_input(key="f_top_p").value == 1.0 and at.text_input(key="f_optim.warmup_steps").value == "10"
    assert "Field `top_p`, default `1.0`" in at.number_input(key="f_top_p").help  # the schema's description first
    at.number_input(key="f_top_p").set_value(0.9)
    at.text_input(key="f_optim.warmup_steps").set_value("")  # empty: null (the warmup_ratio then decides)
    at.selectbox(key="f_dtype").set_value("float32")
    submit(at)
    assert not at.error, [e.value for e in at.error]
    first, second = bodies[0]["config"], bodies[1]["config"]
    assert second == {**first, "top_p": 0.9, "dtype": "float32", "optim": {**first["optim"], "warmup_steps": None}}
    run_id = fresh_api.enqueued[-1][0]
    stored = httpx.get(f"{fresh_api.url}/api/runs/{run_id}").json()["config"]
    assert (stored["top_p"], stored["dtype"], stored["optim"]["warmup_steps"]) == (0.9, "float32", None)


def test_a_cloned_runs_generic_values_fill_the_form_and_are_kept(fresh_api, use_api, bodies):
    use_api(fresh_api)
    created = httpx.post(f"{fresh_api.url}/api/runs", headers={"Authorization": f"Bearer {fresh_api.token}"},
                         json={"config": {"steps": 2, "top_p": 0.5, "aero": {"zero_variance_keep": 2}}}).json()
    at = open_page("launch", {"clone": str(created["id"])})
    assert at.number_input(key="f_top_p").value == 0.5 and at.number_input(key="f_aero.zero_variance_keep").value == 2
    submit(at)
    assert (bodies[0]["config"]["top_p"], bodies[0]["config"]["aero"]["zero_variance_keep"]) == (0.5, 2)


def test_a_bad_json_is_refused_naming_its_field(fresh_api, use_api, bodies):
    use_api(fresh_api)
    at = open_page("launch")
    at.text_area(key="f_benchmarks").set_value('{"MATH-500": ')
    submit(at)
    assert bodies == [] and fresh_api.enqueued == [] and expander(at).proto.expanded
    nodes = list(walk(at.main))
    i = next(i for i, n in enumerate(nodes) if getattr(n, "key", None) == "f_benchmarks")
    after = next(n for n in nodes[i + 1:] if n.type == "error" or getattr(n, "key", None))
    assert after.type == "error" and after.value.startswith("benchmarks: not valid JSON")
    assert len(at.error) == 1


def test_the_apis_error_on_a_generic_field_opens_the_expander_under_it(fresh_api, use_api):
    use_api(fresh_api)
    at = open_page("launch")
    at.number_input(key="f_top_p").set_value(0.0)  # refused by the API (top_p > 0), naming top_p
    submit(at)
    assert fresh_api.enqueued == [] and expander(at).proto.expanded
    nodes = list(walk(at.main))
    i = next(i for i, n in enumerate(nodes) if getattr(n, "key", None) == "f_top_p")
    after = next(n for n in nodes[i + 1:] if n.type == "error" or getattr(n, "key", None))
    assert after.type == "error" and "greater than 0" in after.value and len(at.error) == 1


def test_generic_fields_follow_the_schema(fresh_api):
    doc = httpx.get(f"{fresh_api.url}/openapi.json").json()
    menu = forms.MethodMenu.from_specs(AeroClient(fresh_api.url).methods())
    found = expert_fields.groups(doc, menu, ["aero"], set(forms.OWN_INPUTS))
    by_path = {f.path: f for f in expert_fields.every_field(found)}
    assert "code.memory_mb" not in by_path and "dapo.eps_high" not in by_path  # the task and the method read neither
    assert [g.name for g in found.values()][:2] == ["", "optim"] and "More settings" in found
    top_p, warmup, loss, bench = (by_path[p] for p in ("top_p", "optim.warmup_steps", "loss_agg", "benchmarks"))
    assert (top_p.kind, top_p.default, top_p.maximum, "Range: > 0, <= 1." in top_p.help) == ("number", 1.0, 1.0, True)
    assert (warmup.kind, warmup.nullable, warmup.default) == ("integer", True, 10)
    assert (loss.kind, loss.nullable, expert_fields.options(loss)[0]) == ("choice", True, None)
    assert (bench.kind, bench.default) == ("json", {})
    start = {"top_p": 1.0, "optim.warmup_steps": 10, "loss_agg": None, "benchmarks": {}}
    raw = {"top_p": 1.0, "optim.warmup_steps": "10", "loss_agg": None, "benchmarks": ""}
    assert expert_fields.changed(found, raw, start) == ({}, {})  # untouched: nothing sent
    raw = {"top_p": 0.9, "optim.warmup_steps": "", "loss_agg": "token-mean", "benchmarks": '{"a": "/b.jsonl"}'}
    assert expert_fields.changed(found, raw, start) == (
        {"top_p": 0.9, "optim.warmup_steps": None, "loss_agg": "token-mean", "benchmarks": {"a": "/b.jsonl"}}, {})
    assert expert_fields.changed(found, {"optim.warmup_steps": "ten", "benchmarks": "[1,"}, start)[1] == {
        "optim.warmup_steps": "optim.warmup_steps: not a whole number",
        "benchmarks": "benchmarks: not valid JSON (Expecting value, line 1 column 4)"}
    code = expert_fields.groups(doc, menu, ["aero"], set(forms.OWN_INPUTS), tasks=["code"])
    assert "Code sandbox" in code and {f.path for f in code["Code sandbox"].fields} >= {"code.memory_mb", "code.workers"}
