"""Run detail's step-detail sections and Compare's key list under AppTest against a live API:
the Rollouts view (step slider, stratum / stage / reward filters, model text shown as text),
the key picker over every logged key, the system panels and the histogram heatmaps."""

from __future__ import annotations

import json

import pytest

from tests.dashboard.apptest import open_page
from tests.dashboard.step_details import HOSTILE, add_details


def figures(at) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def titled(at, start: str) -> list[dict]:
    return [f for f in figures(at) if ((f["layout"].get("title") or {}).get("text") or "").startswith(start)]


def ro_table(at):
    """The Rollouts view's table (the data frame with a response column)."""
    return next(d.value for d in at.dataframe if "response" in d.value.columns)


def no_errors(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def seeded_run(api, helpers) -> int:
    rid = helpers.add_run(api.db_url, "aero", steps=6, done=6, status="succeeded")
    add_details(api.db_url, rid, range(1, 7))
    return rid


def test_rollouts_view_slider_filters_and_hostile_text(fresh_api, use_api, helpers):
    use_api(fresh_api)
    rid = seeded_run(fresh_api, helpers)
    at = open_page("run_detail", {"run": str(rid)})
    no_errors(at)
    slider = at.select_slider(key="ro_step")
    assert list(slider.options) == [str(s) for s in range(1, 7)] and slider.value == 6
    table = ro_table(at)
    assert len(table) == 9 and set(table["stage"]) == {"explore", "curated out", "rescue 1"}
    assert HOSTILE in list(table["response"])  # the grid shows text, not markup
    slider.set_value(2).run()
    assert "rescued 2" in list(ro_table(at)["response"])
    at.selectbox(key="ro_stratum").set_value("rescue").run()
    assert set(ro_table(at)["stratum"]) == {"rescue"} and len(ro_table(at)) == 5
    at.selectbox(key="ro_stage").set_value("rescue").run()
    assert list(ro_table(at)["response"]) == ["rescued 2"]
    at.selectbox(key="ro_stage").set_value("all").run()
    at.selectbox(key="ro_stratum").set_value("all").run()
    at.slider(key="ro_reward").set_value((0.5, 1.0)).run()
    assert set(ro_table(at)["reward"]) == {1.0} and len(ro_table(at)) == 3
    # one rollout in full: st.code shows the characters; no Markdown or HTML element carries them
    at.slider(key="ro_reward").set_value((-1.0, 1.0)).run()
    rows = ro_table(at)
    at.selectbox(key="ro_pick").set_value(list(rows["response"]).index(HOSTILE)).run()
    no_errors(at)
    assert HOSTILE in [c.value for c in at.code]
    assert not any("onerror" in str(m.value) for m in [*at.markdown, *at.caption])


def test_key_picker_offers_every_logged_key_and_draws_them(fresh_api, use_api, helpers):
    use_api(fresh_api)
    rid = seeded_run(fresh_api, helpers)
    at = open_page("run_detail", {"run": str(rid)})
    picker = at.multiselect(key="detail_keys")
    assert {"response/length_mean", "train/clip_frac", "optim/lr", "system/rss_mb"} - set(picker.options) == {"response/length_mean"}
    assert "train/approx_kl" not in picker.options and "train/clip_frac" in picker.options  # what the run logged, no more
    picker.set_value(["train/clip_frac", "optim/lr"]).run()
    no_errors(at)
    fig = titled(at, "Chosen metrics")[0]
    assert [t["name"] for t in fig["data"]] == ["train/clip_frac", "optim/lr"] and fig["data"][0]["x"] == list(range(1, 7))
    # system panels: the process's CPU and RSS (this machine has no GPU: no GPU panel)
    rss = titled(at, "Resident memory")[0]
    assert rss["data"][0]["y"] == [905.0 + 5 * i for i in range(6)] and not titled(at, "GPU")


def test_histogram_heatmaps_over_steps(fresh_api, use_api, helpers):
    use_api(fresh_api)
    rid = seeded_run(fresh_api, helpers)
    at = open_page("run_detail", {"run": str(rid)})
    pass_rate, length = titled(at, "Per-prompt pass rate")[0], titled(at, "Response length")[0]
    hm = pass_rate["data"][0]
    assert hm["type"] == "heatmap" and hm["x"] == list(range(1, 7)) and len(hm["y"]) == 10 and hm["y"][-1] == "[0.9, 1.0]"
    assert hm["z"][0][0] == 3 / 8 and hm["z"][3][0] == 5 / 8  # step 1: 3 prompts at 0, 5 in [0.3, 0.4)
    assert hm["text"][3][0] == "5"
    assert length["data"][0]["z"][4][0] == 1.0 and len(length["data"][0]["y"]) == 16


def test_run_without_details_shows_no_empty_sections(fresh_api, use_api, helpers):
    use_api(fresh_api)
    rid = helpers.add_run(fresh_api.db_url, "grpo", steps=4, done=4, status="succeeded")
    at = open_page("run_detail", {"run": str(rid)})
    no_errors(at)
    assert not titled(at, "Per-prompt pass rate") and not titled(at, "Resident memory")
    assert any("No rollouts stored yet" in c.value for c in at.caption)


def test_compare_offers_every_logged_key(fresh_api, use_api, helpers):
    use_api(fresh_api)
    a = seeded_run(fresh_api, helpers)
    b = helpers.add_run(fresh_api.db_url, "grpo", steps=6, done=6, status="succeeded")
    at = open_page("compare", {"runs": f"{a},{b}"})
    no_errors(at)
    metric = at.selectbox(key="cmp_metric")
    assert {"train/clip_frac", "optim/lr", "system/rss_mb", "savings/s1_tokens"} <= set(metric.options)
    metric.set_value("system/rss_mb").run()
    no_errors(at)
    fig = titled(at, "system/rss_mb per step")[0]
    assert len(fig["data"]) == 2 and fig["data"][0]["y"][:2] == [905.0, 910.0]


def test_live_run_system_panel_and_heatmap_follow_new_steps(fresh_api, use_api, helpers):
    from backend.db.runs import record_progress
    from backend.db.session import session_scope
    from tests.dashboard.step_details import add_details

    use_api(fresh_api)
    rid = helpers.add_run(fresh_api.db_url, "aero", steps=10, done=3, status="running")
    add_details(fresh_api.db_url, rid, range(1, 4))
    at = open_page("run_detail", {"run": str(rid)})
    assert titled(at, "Resident memory")[0]["data"][0]["x"] == [1, 2, 3]
    add_details(fresh_api.db_url, rid, range(4, 5))
    with session_scope(fresh_api.db_url) as s:
        record_progress(s, rid, 4, 10)
    at.run()
    no_errors(at)
    assert titled(at, "Resident memory")[0]["data"][0]["x"] == [1, 2, 3, 4]
    assert titled(at, "Per-prompt pass rate")[0]["data"][0]["x"] == [1, 2, 3, 4]


def test_rollouts_view_follows_a_live_run_unless_a_step_was_picked(fresh_api, use_api, helpers):
    from backend.db.runs import record_progress
    from backend.db.session import session_scope
    from tests.dashboard.step_details import add_details

    use_api(fresh_api)
    rid = helpers.add_run(fresh_api.db_url, "aero", steps=10, done=3, status="running")
    add_details(fresh_api.db_url, rid, range(1, 4))
    at = open_page("run_detail", {"run": str(rid)})
    no_errors(at)
    assert at.select_slider(key="ro_step").value == 3

    def land(step: int):
        add_details(fresh_api.db_url, rid, range(step, step + 1))
        with session_scope(fresh_api.db_url) as s:
            record_progress(s, rid, step, 10)
        at.run()
        no_errors(at)
        return at.select_slider(key="ro_step")

    slider = land(4)
    assert list(slider.options)[-1] == "4" and slider.value == 4  # on the newest step: it moves on
    slider.set_value(2).run()
    slider = land(5)
    assert list(slider.options)[-1] == "5" and slider.value == 2  # a step the user picked stays picked
    assert any(c.value.startswith("Step 2:") for c in at.caption)
    slider.set_value(5).run()
    assert land(6).value == 6  # back on the newest: following again


def test_seed_group_curves_offer_every_logged_key(seed_groups, use_api):
    use_api(seed_groups)
    at = open_page("compare", {"sweep": str(seed_groups.ids["sweep"])})
    metric = at.selectbox(key="cmp_metric")
    assert {"optim/lr", "train/clip_frac", "rescue/rounds"} <= set(metric.options)  # logged, not in the curated list
    metric.set_value("train/clip_frac").run()
    no_errors(at)
    fig = titled(at, "train/clip_frac per step")[0]
    lines = [t for t in fig["data"] if t.get("fill") != "toself"]
    assert [t["name"] for t in lines] == ["grpo", "aero"] and lines[0]["y"][0] == pytest.approx(0.05)  # the seeded value
