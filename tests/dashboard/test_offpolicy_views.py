"""Asynchronous training in the dashboard (trainer/spec/offpolicy.py): the Launch form's staleness
inputs and staleness sweep, Run detail's chart of staleness, importance weights and idle time,
and the Compare page's runs and seed groups told apart by their staleness ("k=2"). The builders
are pure (hand-made series); the pages run under AppTest against a live API."""

from __future__ import annotations

import httpx
import pytest

import common.metric_keys as mk
from backend.db.metrics import upsert_step_metrics
from backend.db.models import Run
from dashboard import forms, run_charts, tables
from dashboard.method_style import MethodStyle
from tests.dashboard.apptest import open_page
from tests.dashboard.test_pages import fig_title, figures, no_errors, plain_title, submit, texts
from trainer.methods.spec import specs

STYLE = MethodStyle.from_specs([s.to_json() for s in specs()])


def async_metrics(step: int, k: int) -> dict[str, float]:
    """What an asynchronous step logs besides the synchronous keys: staleness min(k, step - 1);
    importance weights only on stale steps (tis, C = 2)."""
    stale = min(k, step - 1)
    m = {mk.STALENESS_MEAN: stale, mk.STALENESS_MAX: stale, mk.SAMPLER_IDLE_S: 0.1 * step, mk.TRAINER_IDLE_S: 0.5}
    if stale:
        m |= {mk.IS_WEIGHT_MEAN: 1.0 + 0.01 * step, mk.IS_CAPPED_FRAC: 0.02}
    return m


# ---------------------------------------------------------------- builders


def test_offpolicy_figure_draws_staleness_weights_and_idle_time():
    steps = [1, 2, 3, 4]
    s = {key: [async_metrics(t, 2).get(key) for t in steps] for key in run_charts.OFFPOLICY_KEYS}
    fig = run_charts.offpolicy_figure(steps, s, "aero", style=STYLE)
    assert [a.text for a in fig.layout.annotations] == ["staleness (versions)", "importance weights", "idle seconds per step"]
    assert [t.name for t in fig.data] == ["staleness mean", "staleness max", "weight mean (before cap)",
                                          "fraction past the cap", "sampler idle", "trainer idle"]
    assert list(fig.data[1].y) == [0, 1, 2, 2]  # min(k, step - 1): never above k
    assert list(fig.data[2].y) == [None, 1.02, 1.03, 1.04]  # no weights on the on-policy first step: a gap, not 1 or 0
    assert fig.data[0].line.color == STYLE.color("aero") and fig.data[1].line.dash == "dash"
    assert (fig.data[4].line.color, fig.data[5].line.color) == (run_charts.PHASE_COLORS["rollout"], run_charts.PHASE_COLORS["train"])
    assert fig.layout.yaxis.dtick == 1  # staleness counts versions: whole ticks
    assert fig.layout.yaxis3.rangemode == "tozero" and "Asynchronous training" in fig.layout.title.text


def test_offpolicy_figure_without_weights_keeps_empty_lines():
    """correction=none logs no weights: the panel stays, its lines empty (gaps), nothing invented."""
    steps = [1, 2]
    s = {mk.STALENESS_MEAN: [0, 1], mk.STALENESS_MAX: [0, 1], mk.SAMPLER_IDLE_S: [0.0, 0.0], mk.TRAINER_IDLE_S: [0.2, 0.3]}
    fig = run_charts.offpolicy_figure(steps, s, "grpo", style=STYLE)
    assert list(fig.data[2].y) == [None, None] and list(fig.data[3].y) == [None, None]


def test_run_labels_name_an_asynchronous_runs_staleness():
    assert tables.staleness_tag({"offpolicy": {"max_staleness": 2}}) == "k=2"
    assert tables.staleness_tag({"offpolicy": {"max_staleness": 0}}) == ""
    assert tables.staleness_tag({"steps": 3}) == tables.staleness_tag(None) == ""  # stored before the field: synchronous
    run = {"id": 4, "name": "w", "method": "aero", "status": "succeeded", "config": {"offpolicy": {"max_staleness": 1}}}
    assert tables.run_label(run, STYLE) == "#4 w (AERO, k=1, succeeded)"
    assert tables.run_label({**run, "config": {}}, STYLE) == "#4 w (AERO, succeeded)"


# ---------------------------------------------------------------- pages


def add_async_run(api, helpers, method: str, k: int, *, seed: int = 0, steps: int = 4, sweep_id: int | None = None) -> int:
    """A finished run of ``method`` with ``offpolicy.max_staleness = k`` and the metrics it logs."""
    rid = helpers.add_run(api.db_url, method, steps=steps, done=0, status="succeeded", seed=seed, sweep_id=sweep_id)
    with helpers.session_scope(api.db_url) as s:
        run = s.get(Run, rid)
        run.config = {**run.config, "offpolicy": {"max_staleness": k, "correction": "tis", "is_cap": 2.0}}
        run.current_step, run.progress = steps, 1.0
        upsert_step_metrics(s, rid, {t: {**helpers.fake_metrics(method, t, steps), **(async_metrics(t, k) if k else {})}
                                     for t in range(1, steps + 1)})
    return rid


def test_launch_sends_the_staleness_and_sweeps_it(fresh_api, use_api):
    use_api(fresh_api)
    at = open_page("launch")
    assert at.number_input(key="f_offpolicy.max_staleness").value == 0  # synchronous by default
    assert at.selectbox(key="f_offpolicy.correction").value == "tis" and at.number_input(key="f_offpolicy.is_cap").value == 2.0
    assert "AReaL" in at.number_input(key="f_offpolicy.max_staleness").help
    at.number_input(key="f_offpolicy.max_staleness").set_value(2)
    at.selectbox(key="f_offpolicy.correction").set_value("mis")
    submit(at)
    no_errors(at)
    [(run_id, _)] = fresh_api.enqueued
    assert httpx.get(f"{fresh_api.url}/api/runs/{run_id}").json()["config"]["offpolicy"] == \
        {"max_staleness": 2, "correction": "mis", "is_cap": 2.0}
    # k values to sweep: one run per value, even for one method and one seed
    at.text_input(key="f_offpolicy_sweep").set_value("0, 1, 2")
    submit(at)
    no_errors(at)
    assert "queued 3 runs" in texts(at.success)
    runs = [httpx.get(f"{fresh_api.url}/api/runs/{i}").json()["config"]["offpolicy"] for i, _ in fresh_api.enqueued[1:]]
    assert [(o["max_staleness"], o["correction"]) for o in runs] == [(0, "mis"), (1, "mis"), (2, "mis")]


def test_launch_shows_a_refused_staleness_under_its_input(fresh_api, use_api):
    use_api(fresh_api)
    at = open_page("launch")
    at.text_input(key="f_offpolicy_sweep").set_value("0, one")
    submit(at)
    assert "whole numbers separated by commas" in texts(at.error) and fresh_api.enqueued == []
    at.text_input(key="f_offpolicy_sweep").set_value("1, 9")  # the API's bound (at most 8), named by the field
    submit(at)
    assert "offpolicy.max_staleness: Input should be less than or equal to 8" in texts(at.error)
    assert "overrides" not in texts(at.error) and fresh_api.enqueued == []


def test_run_detail_draws_asynchronous_training_only_when_logged(fresh_api, use_api, helpers):
    use_api(fresh_api)
    rid = add_async_run(fresh_api, helpers, "aero", 2)
    at = open_page("run_detail", {"run": str(rid)})
    no_errors(at)
    fig = next(f for f in figures(at) if plain_title(f) == "Asynchronous training")
    assert [t["name"] for t in fig["data"]][:2] == ["staleness mean", "staleness max"] and fig["data"][1]["y"] == [0, 1, 2, 2]
    assert "k=2" in at.selectbox(key="detail_run").format_func(rid)  # the picker names its staleness
    sync = helpers.add_run(fresh_api.db_url, "aero", steps=4, done=4, status="succeeded")
    at = open_page("run_detail", {"run": str(sync)})
    assert not [f for f in figures(at) if plain_title(f) == "Asynchronous training"]


def test_compare_tells_runs_and_seed_groups_apart_by_staleness(fresh_api, use_api, helpers):
    use_api(fresh_api)
    with helpers.session_scope(fresh_api.db_url) as s:
        sweep = helpers.create_sweep(s, "async", {}).id
    ids = [add_async_run(fresh_api, helpers, "aero", k, seed=seed, sweep_id=sweep) for k in (0, 2) for seed in (0, 1)]
    at = open_page("compare", {"sweep": str(sweep)})
    no_errors(at)
    at.selectbox(key="cmp_metric").set_value(mk.REWARD_MEAN).run()
    lines = [t for t in next(f for f in figures(at) if fig_title(f).startswith("reward/mean per step"))["data"]
             if t.get("fill") != "toself"]
    assert [t["name"] for t in lines] == ["aero", "aero · k=2"]  # one seed group per staleness
    at.toggle(key="cmp_agg").set_value(False).run()
    no_errors(at)
    curves = next(f for f in figures(at) if fig_title(f).startswith("reward/mean per step"))
    assert [t["name"] for t in curves["data"]] == [f"#{ids[0]} AERO s0", f"#{ids[1]} AERO s1", f"#{ids[2]} AERO s0 k=2",
                                                   f"#{ids[3]} AERO s1 k=2"]


@pytest.mark.parametrize("k", [0, 3])
def test_a_cloned_runs_staleness_fills_the_form(fresh_api, use_api, helpers, k):
    use_api(fresh_api)
    rid = add_async_run(fresh_api, helpers, "grpo", k)
    at = open_page("launch", {"clone": str(rid)})
    no_errors(at)
    assert at.number_input(key="f_offpolicy.max_staleness").value == k
    expander = next(e for e in at.expander if e.label == forms.EXPERT_SECTION)
    assert expander.proto.expanded is (k > 0)  # an asynchronous clone opens the expander its staleness is in
