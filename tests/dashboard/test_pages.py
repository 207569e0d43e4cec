"""Every page under Streamlit's AppTest against a LIVE API (uvicorn over a temp SQLite store,
see conftest.py). The dashboard reaches the API over HTTP only."""

from __future__ import annotations

import base64
import json


import httpx
import pytest
from streamlit.testing.v1 import AppTest

from tests.dashboard.apptest import open_page

from dashboard.tables import p_text


PAGES = ["overview", "launch", "runs", "run_detail", "compare", "sweeps"]


def walk(node):
    """Every node of the element tree in display order."""
    yield node
    children = getattr(node, "children", None) or {}
    for key in sorted(children):
        yield from walk(children[key])


def figures(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def fig_title(fig: dict) -> str:
    return (fig["layout"].get("title") or {}).get("text", "")


def plain_title(fig: dict) -> str:
    """The title without its grey note (what a curve measures, the band level)."""
    return fig_title(fig).split(" <span")[0]


def fig_titled(at: AppTest, start: str) -> dict:
    """The first figure whose title starts with ``start``."""
    return next(f for f in figures(at) if fig_title(f).startswith(start))


def tables_of(at: AppTest) -> list[dict]:
    """The Plotly tables, as {header: [...], cells: [[column]...]} without bold tags."""
    out = []
    for f in figures(at):
        tr = f["data"][0] if f["data"] else {}
        if tr.get("type") == "table":
            strip = lambda v: v.replace("<b>", "").replace("</b>", "")  # noqa: E731
            out.append({"header": [strip(h) for h in tr["header"]["values"]],
                        "cells": [[strip(c) for c in col] for col in tr["cells"]["values"]]})
    return out


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


def no_errors(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, texts(at.error)


# ---------------------------------------------------------------- overview


def test_overview_counts_runs_and_links_latest(seeded, use_api):
    use_api(seeded)
    at = open_page("overview")
    no_errors(at)
    counts = {m.label: m.value for m in at.metric}
    assert counts == {"Running": "1", "Queued": "1", "Succeeded": "5", "Failed": "1", "Cancelled": "0"}
    assert [s.value for s in at.subheader] == ["Latest runs", "Where to go"]


def test_overview_shows_running_runs_before_newer_queued_ones(fresh_api, use_api, helpers):
    use_api(fresh_api)
    running = helpers.add_run(fresh_api.db_url, "aero", steps=10, done=4, status="running", name="training-now")
    queued = [helpers.add_run(fresh_api.db_url, "grpo", steps=10, done=0, status="queued") for _ in range(5)]  # a sweep's queue
    at = open_page("overview")
    no_errors(at)
    links = [n.proto.label for n in walk(at.main) if n.type == "page_link" and n.proto.query_string.startswith("run=")]
    assert links[0] == f"#{running} training-now" and len(links) == 5
    assert [f"#{i} " in label for i, label in zip(queued[::-1], links[1:])] == [True] * 4  # then the newest
    bars = [h.proto.body for h in at.get("html") if "height:8px" in h.proto.body]  # ui.progress_bar, not a method chip
    assert "width:40.0%;background:#E45756" in bars[0] and "running · 4/10 · 40.0%" in bars[0]  # AERO's colour
    assert "background:#4C78A8" in bars[1] and "queued · 0/10 · 0.0%" in bars[1]


def test_overview_empty_explains_first_steps(empty_api, use_api):
    use_api(empty_api)
    at = open_page("overview")
    no_errors(at)
    assert "No runs yet" in texts(at.info)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_explains_api_down(page, use_api, helpers):
    use_api(f"http://127.0.0.1:{helpers.free_port()}")  # nothing listens there
    at = open_page(page, {"run": "1"} if page == "run_detail" else None)
    assert "The API is not reachable" in texts(at.error)
    assert "aero up" in texts(at.error)


# ---------------------------------------------------------------- launch


def test_launch_prefills_paper_defaults_with_help(seeded, use_api):
    use_api(seeded)
    at = open_page("launch")
    no_errors(at)
    want = {"aero.n_explore": 8, "aero.n_max": 32, "aero.delta_n": 2, "aero.k_max": 10, "aero.tau": 0.5, "aero.S": 0,
            "aero.k": 1.0, "aero.alpha0": 1.0, "aero.beta0": 1.0, "n_total": 16, "clip_eps": 0.2}
    for path, value in want.items():
        w = at.number_input(key=f"f_{path}")
        assert w.value == value, path
        assert w.help, f"{path} has no help text"
    assert "paper: 8" in at.number_input(key="f_aero.n_explore").help
    assert not [n for n in at.number_input if n.key and n.key.startswith("f_dapo.")]  # AERO chosen: no DAPO fields


BASIC_KEYS = ("launch_method", "launch_model", "f_seeds", "f_steps", "f_batch_prompts", "f_n_total", "f_optim.lr",
              "f_aero.n_explore", "f_aero.n_max", "f_max_new_tokens", "f_eval_every", "f_device", "f_engine")
EXPERT_KEYS = ("f_aero.tau", "f_clip_eps", "f_temperature", "f_offpolicy.max_staleness", "f_resources.nodes",
               "f_alerts_rules", "f_trackers")


def test_launch_shows_basic_fields_first_and_every_expert_one_in_one_expander(fresh_api, use_api):
    """The schema's basic fields (trainer/spec/config_types.py) are outside any expander; the expert
    ones the form shows are in Expert settings, closed until the API names a field inside it."""
    use_api(fresh_api)
    at = open_page("launch")
    [expert] = [e for e in at.expander if e.label == "Expert settings"]
    assert not expert.proto.expanded and [e.label for e in at.expander if e.label != "Settings"] == ["Expert settings"]
    inside = {getattr(n, "key", None) for n in walk(expert)}
    everywhere = {getattr(n, "key", None) for n in walk(at.main)}
    assert set(BASIC_KEYS) <= everywhere - inside and set(EXPERT_KEYS) <= inside
    at.number_input(key="f_aero.tau").set_value(0.0)  # refused by the API (tau > 0), naming aero.tau
    submit(at)
    assert fresh_api.enqueued == [] and next(e for e in at.expander if e.label == "Expert settings").proto.expanded


def test_launch_shows_dapo_fields_for_dapo(seeded, use_api):
    use_api(seeded)
    at = open_page("launch")
    at.selectbox(key="launch_method").set_value("dapo").run()
    assert at.number_input(key="f_dapo.eps_high").value == 0.28
    assert at.number_input(key="f_dapo.max_gen_rounds").value == 1
    assert not [n for n in at.number_input if n.key and n.key.startswith("f_aero.")]


def submit(at: AppTest) -> AppTest:
    at.button[0].click().run()  # the form's only button: Launch
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_launch_submits_a_run_to_the_api(fresh_api, use_api):
    use_api(fresh_api)
    at = open_page("launch")
    at.number_input(key="f_steps").set_value(3)
    at.number_input(key="f_batch_prompts").set_value(4)
    at.number_input(key="f_aero.k_max").set_value(4)
    at.text_input(key="f_tags").set_value("smoke, ui")
    submit(at)
    no_errors(at)
    assert "is queued" in texts(at.success)
    [(run_id, queue)] = fresh_api.enqueued
    run = httpx.get(f"{fresh_api.url}/api/runs/{run_id}").json()
    assert (run["method"], run["config"]["steps"], run["config"]["batch_prompts"], run["config"]["aero"]["k_max"]) == ("aero", 3, 4, 4)
    assert run["config"]["aero"]["n_explore"] == 8 and run["tags"] == ["smoke", "ui"]


def test_launch_sends_the_runs_priority(fresh_api, use_api):
    use_api(fresh_api)  # an admin token: priority up to 10 (AERO_PRIORITY_MAX_ADMIN)
    at = open_page("launch")
    assert "yours: 10" in at.number_input(key="f_priority").help
    at.number_input(key="f_priority").set_value(7)
    submit(at)
    no_errors(at)
    [(run_id, _)] = fresh_api.enqueued
    assert httpx.get(f"{fresh_api.url}/api/runs/{run_id}").json()["priority"] == 7


@pytest.mark.parametrize("typed,stored", [("", 0), ("0", 0), ("1", 1)])
def test_launch_can_ask_for_zero_gpus_or_leave_the_count_to_the_platform(fresh_api, use_api, typed, stored):
    # empty = auto: the API resolves it once at submit (an embedded CPU run holds 0); 0 is a value of its own
    use_api(fresh_api)
    at = open_page("launch")
    at.selectbox(key="f_device").set_value("cpu" if typed != "1" else "cuda")
    at.text_input(key="f_resources.gpus_per_node").set_value(typed)
    submit(at)
    no_errors(at)
    [(run_id, _)] = fresh_api.enqueued
    run = httpx.get(f"{fresh_api.url}/api/runs/{run_id}").json()
    assert (run["config"]["resources"]["gpus_per_node"], run["gpus"]) == (stored, stored)


def test_launch_shows_api_validation_error_under_its_field(fresh_api, use_api):
    use_api(fresh_api)
    at = open_page("launch")
    at.number_input(key="f_aero.n_explore").set_value(20)  # > n_total (16): a cross-field rule of the API
    submit(at)
    nodes = list(walk(at.main))
    i = next(i for i, n in enumerate(nodes) if getattr(n, "key", None) == "f_aero.n_explore")
    after = [n for n in nodes[i + 1:] if n.type in ("exception", "error") or getattr(n, "key", None)][0]
    assert after.type == "error" and "must be <= n_total (16)" in after.value
    assert len(at.error) == 1 and fresh_api.enqueued == []


def test_launch_offers_every_shipped_preset_and_trains_its_task(fresh_api, use_api):
    use_api(fresh_api)
    at = open_page("launch")
    assert at.radio(key="launch_model").options == ["Preset tiny", "Preset tiny-countdown", "Preset smollm2-135m",
                                                    "Local model + dataset"]
    at.radio(key="launch_model").set_value("tiny-countdown").run()
    submit(at)
    no_errors(at)
    [(run_id, _)] = fresh_api.enqueued
    config = httpx.get(f"{fresh_api.url}/api/runs/{run_id}").json()["config"]
    assert (config["preset"], config["task"]) == ("tiny-countdown", "countdown")


def test_launch_prefills_a_real_models_defaults_and_offers_its_tasks(smollm2, fresh_api, use_api):
    use_api(fresh_api)
    at = open_page("launch")
    assert at.number_input(key="f_batch_prompts").value == 64  # the schema's default, for the tiny preset
    at.radio(key="launch_model").set_value("smollm2-135m").run()
    assert at.number_input(key="f_batch_prompts").value == 8 and at.number_input(key="f_n_total").value == 8
    assert at.selectbox(key="f_preset_task").options == ["arithmetic", "countdown"]
    at.selectbox(key="f_preset_task").set_value("countdown")  # inside the form: sent with Launch
    submit(at)
    no_errors(at)
    [(run_id, _)] = fresh_api.enqueued
    config = httpx.get(f"{fresh_api.url}/api/runs/{run_id}").json()["config"]
    assert (config["preset"], config["task"], config["batch_prompts"], config["max_new_tokens"]) == \
        ("smollm2-135m", "countdown", 8, 16)
    at.radio(key="launch_model").set_value("tiny").run()  # back to a shipped preset: the schema's defaults again
    assert at.number_input(key="f_batch_prompts").value == 64


def test_launch_local_model_needs_a_path(fresh_api, use_api):
    use_api(fresh_api)
    at = open_page("launch")
    at.radio(key="launch_model").set_value("Local model + dataset").run()
    assert at.selectbox(key="f_task").value == "arithmetic" and at.text_input(key="f_model_path").value == ""
    submit(at)
    nodes = list(walk(at.main))
    i = next(i for i, n in enumerate(nodes) if getattr(n, "key", None) == "f_model_path")
    assert nodes[i + 1].type == "error" and "exactly one of preset or model_path" in nodes[i + 1].value
    assert fresh_api.enqueued == []


def test_launch_sweep_makes_the_ablation_ladder(fresh_api, use_api):
    use_api(fresh_api)
    at = open_page("launch")
    at.get("button_group")[0].set_value("Sweep").run()
    assert at.multiselect(key="launch_methods").value == ["grpo", "aero-s1", "aero-s1s2", "aero"]
    at.text_input(key="f_seeds").set_value("0, 1")
    submit(at)
    no_errors(at)
    assert "queued 8 runs" in texts(at.success)
    assert len(fresh_api.enqueued) == 8


def test_launch_without_token_warns_and_explains_401(fresh_api, use_api):
    use_api(fresh_api, token="")
    at = open_page("launch")
    assert "No API token" in texts(at.warning)
    submit(at)
    assert "refused the token" in texts(at.error)


def test_launch_rejects_bad_seeds_next_to_field(fresh_api, use_api):
    use_api(fresh_api)
    at = open_page("launch")
    at.text_input(key="f_seeds").set_value("0, one")
    submit(at)
    assert "seeds must be whole numbers" in texts(at.error) and fresh_api.enqueued == []


# ---------------------------------------------------------------- runs


def runs_frame(at: AppTest):
    return at.dataframe[0].value


def test_runs_table_shows_status_progress_and_latest_metrics(seeded, use_api):
    use_api(seeded)
    at = open_page("runs")
    no_errors(at)
    df = runs_frame(at).set_index("id")
    assert len(df) == 8
    live = df.loc[seeded.ids["running"]]
    assert (live["status"], live["step"]) == ("running", "12/40")
    assert live["reward"] == pytest.approx(0.3 + 0.3 * 12 / 40 + 0.02)  # conftest.fake_metrics at step 12
    assert live["zero-acc ratio"] == pytest.approx(100 * (0.35 - 0.1 * 12 / 40 - 0.12))  # in percent, shown "%.1f%%"
    assert "CUDA out of memory" in df.loc[seeded.ids["failed"], "message"]
    assert "refreshes every 3 s" in texts(at.caption)


def svg_of(data_url: str) -> str:
    head, _, body = data_url.partition(",")
    assert head == "data:image/svg+xml;base64", head
    return base64.b64decode(body).decode()


def test_runs_progress_bars_take_the_method_colour_and_one_percent_format(seeded, use_api):
    use_api(seeded)
    at = open_page("runs")
    df = runs_frame(at).set_index("id")
    # every bar used to be Streamlit's theme red (a ProgressColumn has one colour per column)
    colours = {"grpo": "#4C78A8", "aero-s1": "#72B7B2", "aero-s1s2": "#B279A2", "aero": "#E45756", "dapo": "#F58518",
               "running": "#E45756", "failed": "#4C78A8"}
    for key, colour in colours.items():
        assert f"fill='{colour}'" in svg_of(df.loc[seeded.ids[key], "progress"]), key
    # one percentage format: 12/40 and 3/30 both with one decimal (was 30% next to 10% next to 86.67%)
    assert ">30.0%</text>" in svg_of(df.loc[seeded.ids["running"], "progress"])
    assert ">10.0%</text>" in svg_of(df.loc[seeded.ids["failed"], "progress"])
    assert ">100.0%</text>" in svg_of(df.loc[seeded.ids["grpo"], "progress"])
    config = json.loads(at.dataframe[0].proto.columns)
    assert config["zero-acc ratio"]["type_config"]["format"] == "%.1f%%" and config["progress"]["type_config"]["type"] == "image"


def test_runs_step_time_is_the_mean_over_steps(fresh_api, use_api, helpers):
    from backend.db.metrics import upsert_step_metrics
    from backend.db.session import session_scope

    use_api(fresh_api)
    rid = helpers.add_run(fresh_api.db_url, "grpo", steps=10, done=3, status="running")
    with session_scope(fresh_api.db_url) as s:  # steps of 1, 2 and 6 s: the last says 6, the mean 3
        upsert_step_metrics(s, rid, {t: {**helpers.fake_metrics("grpo", t, 10), "time/step_s": v} for t, v in ((1, 1.0), (2, 2.0), (3, 6.0))})
    at = open_page("runs")
    row = runs_frame(at).set_index("id").loc[rid]
    assert row["mean step time (s)"] == pytest.approx(3.0)
    assert "averaged over the run's steps" in json.loads(at.dataframe[0].proto.columns)["mean step time (s)"]["help"]
    at = open_page("run_detail", {"run": str(rid)})
    metric = next(m for m in at.metric if m.label == "Mean step time")
    assert metric.value == "3.00 s" and "Last step: 6.00 s" in metric.help


def test_runs_sweep_filter_names_its_sweeps(seeded, use_api):
    use_api(seeded)
    at = open_page("runs")
    box = at.selectbox(key="runs_sweep")
    assert box.value is None and box.options == ["all sweeps", f"sweep #{seeded.ids['sweep']} · ladder"]  # not a bare 0
    box.set_value(seeded.ids["sweep"]).run()
    assert sorted(runs_frame(at)["id"]) == sorted(seeded.ids[m] for m in ("grpo", "aero-s1", "aero-s1s2", "aero"))


def test_runs_filters(seeded, use_api):
    use_api(seeded)
    at = open_page("runs")
    at.multiselect(key="runs_status").set_value(["failed"]).run()
    assert list(runs_frame(at)["id"]) == [seeded.ids["failed"]]
    at.multiselect(key="runs_status").set_value([]).run()
    at.text_input(key="runs_tag").set_value("ladder").run()
    assert sorted(runs_frame(at)["id"]) == sorted(seeded.ids[m] for m in ("grpo", "aero-s1", "aero-s1s2", "aero"))
    at.text_input(key="runs_tag").set_value("no-such-tag").run()
    assert "No runs match" in texts(at.info)


def test_runs_table_shows_a_run_waiting_for_its_gpus_as_waiting(fresh_api, use_api, helpers):
    """A running run that waits for its GPUs reads 'waiting · <how long>' with what it waits for,
    on the Runs table, in the run pickers and on the Overview; the Status filter's 'waiting' lists
    only such runs."""
    from datetime import timedelta

    from sqlalchemy import update

    from backend.db.models import Run, utcnow
    from backend.db.runs import record_placement

    use_api(fresh_api)
    live = helpers.add_run(fresh_api.db_url, "grpo", steps=10, done=2, status="running")
    waits = helpers.add_run(fresh_api.db_url, "aero", steps=10, done=0, status="running", name="waits")
    text = "2 GPU(s): 0 of the Ray cluster's 4 free"
    with helpers.session_scope(fresh_api.db_url) as s:
        assert record_placement(s, waits, "test@host", waiting_for=text)
        s.execute(update(Run).where(Run.id == waits).values(waiting_since=utcnow() - timedelta(minutes=12, seconds=3)))
    at = open_page("runs")
    no_errors(at)
    df = runs_frame(at).set_index("id")
    assert df.loc[waits, "status"].startswith("waiting · 12m 0") and df.loc[waits, "waits for"] == text
    assert (df.loc[live, "status"], df.loc[live, "waits for"]) == ("running", "")
    assert "waiting for its GPUs" in json.loads(at.dataframe[0].proto.columns)["status"]["help"]
    assert f"#{waits} waits (AERO, waiting)" in at.multiselect(key="runs_chosen").options
    at.multiselect(key="runs_status").set_value(["waiting"]).run()
    assert list(runs_frame(at)["id"]) == [waits]
    at.multiselect(key="runs_status").set_value(["running"]).run()
    assert sorted(runs_frame(at)["id"]) == sorted([live, waits])  # running lists the waiting run too
    at = open_page("overview")
    no_errors(at)
    assert "waiting · 12m 0" in " ".join(h.proto.body for h in at.get("html"))
    at = open_page("run_detail", {"run": str(waits)})
    no_errors(at)
    assert "**Waiting for its GPUs** (for 12m 0" in texts(at.info) and text in texts(at.info)


def test_runs_cancel_and_delete(fresh_api, use_api, helpers):
    use_api(fresh_api)
    add_run = helpers.add_run
    queued = add_run(fresh_api.db_url, "grpo", steps=10, done=0, status="queued")
    done = add_run(fresh_api.db_url, "aero", steps=10, done=10, status="succeeded")
    at = open_page("runs")
    at.multiselect(key="runs_chosen").set_value([queued]).run()
    at.button(key="runs_cancel").click().run()
    no_errors(at)
    assert httpx.get(f"{fresh_api.url}/api/runs/{queued}").json()["status"] == "cancelled"
    at.multiselect(key="runs_chosen").set_value([done]).run()
    assert at.button(key="runs_delete").disabled  # needs the confirmation first
    at.checkbox(key="runs_confirm_delete").check().run()
    at.button(key="runs_delete").click().run()
    no_errors(at)
    assert httpx.get(f"{fresh_api.url}/api/runs/{done}").status_code == 404
    assert done not in list(runs_frame(at)["id"])


def test_runs_empty(empty_api, use_api):
    use_api(empty_api)
    at = open_page("runs")
    assert "No runs yet" in texts(at.info)


# ---------------------------------------------------------------- run detail


def test_run_detail_live_run_draws_every_chart(seeded, use_api):
    use_api(seeded)
    at = open_page("run_detail", {"run": str(seeded.ids["running"])})
    no_errors(at)
    assert {m.label: m.value for m in at.metric}["Step"] == "12 / 40"
    assert "Live: refreshing every 2 s" in texts(at.caption)
    titles = [plain_title(f) for f in figures(at)]  # no evaluation yet: no held-out chart
    assert titles == ["Training reward (not held-out accuracy)", "Zero-accuracy ratio", "Prompt strata after exploration",
                      "Rollouts per step", "Time per step", "FLOPs per step", "Optimisation health"]
    reward = figures(at)[0]["data"]
    assert reward[0]["x"] == list(range(1, 13)) and reward[0]["line"]["color"] == "#E45756"  # AERO's colour
    # the chart says what the reward measures: AERO's generated rollouts include rescue rounds
    assert "rescue rounds" in fig_title(figures(at)[0]) and "incl. rescue rounds (reward/mean)" in reward[0]["name"]
    assert "curated (reward/trained_mean)" in reward[1]["name"]
    assert "No evaluation yet" in texts(at.caption)


def test_run_detail_rollouts_axis_and_kl_off(seeded, use_api):
    use_api(seeded)
    at = open_page("run_detail", {"run": str(seeded.ids["grpo"])})
    no_errors(at)
    # GRPO generates and trains a flat 256 (conftest): the axis starts at 0 with whole ticks, not 255-257 ticked 256.5
    rollouts = fig_titled(at, "Rollouts per step")["layout"]["yaxis"]
    assert rollouts["range"] == pytest.approx([0, 281.6]) and rollouts["tickformat"] == ",d"
    at = open_page("run_detail", {"run": str(seeded.ids["running"])})  # AERO: 280 generated, 70 trained
    rollouts = fig_titled(at, "Rollouts per step")["layout"]["yaxis"]
    assert rollouts["rangemode"] == "tozero" and rollouts["tickformat"] == ",d"
    # the seeded runs have kl_coef 0 (the default): no KL panel, and the title says why
    health = fig_titled(at, "Optimisation health")
    assert [a["text"] for a in health["layout"]["annotations"]] == ["grad norm", "entropy (nats/token)"]
    assert "KL off (kl_coef = 0)" in fig_title(health) and len(health["data"]) == 2


def test_run_detail_shows_new_steps_on_the_next_refresh(fresh_api, use_api, helpers):
    from backend.db.metrics import upsert_step_metrics
    from backend.db.runs import record_progress
    from backend.db.session import session_scope

    use_api(fresh_api)
    rid = helpers.add_run(fresh_api.db_url, "grpo", steps=10, done=2, status="running")
    at = open_page("run_detail", {"run": str(rid)})
    assert {m.label: m.value for m in at.metric}["Step"] == "2 / 10"
    with session_scope(fresh_api.db_url) as s:
        upsert_step_metrics(s, rid, {3: helpers.fake_metrics("grpo", 3, 10)})
        record_progress(s, rid, 3, 10)
    at.run()
    assert {m.label: m.value for m in at.metric}["Step"] == "3 / 10"
    assert fig_titled(at, "Training reward")["data"][0]["x"] == [1, 2, 3]


def test_run_detail_failed_run_shows_error_text(seeded, use_api):
    use_api(seeded)
    at = open_page("run_detail", {"run": str(seeded.ids["failed"])})
    assert "This run failed" in texts(at.error)
    assert "RuntimeError: CUDA out of memory (test)" in texts(at.code)


def test_run_detail_queued_and_evals(seeded, use_api):
    use_api(seeded)
    at = open_page("run_detail", {"run": str(seeded.ids["queued"])})
    no_errors(at)
    assert "Queued: waiting for a free worker" in texts(at.info) and "No training step" in texts(at.info)
    at = open_page("run_detail", {"run": str(seeded.ids["aero"])})
    df = at.dataframe[0].value
    assert list(df["benchmark"]) == ["L1", "L2", "overall"] and list(df["step"]) == [30, 30, 30]
    assert df.set_index("benchmark").loc["overall", "Avg@k CI"] == "[0.490, 0.570]"
    first = figures(at)[0]  # held-out accuracy first, the training reward after it
    assert plain_title(first) == "Held-out Avg@8 over training" and [t["name"] for t in first["data"]] == ["Avg@8", "Pass@8"]
    assert first["data"][0]["x"] == [15, 30] and plain_title(figures(at)[1]) == "Training reward (not held-out accuracy)"


def test_run_detail_unknown_run(seeded, use_api):
    use_api(seeded)
    at = open_page("run_detail", {"run": "99999"})
    assert "Not found" in texts(at.warning)


# ---------------------------------------------------------------- compare


def test_compare_sweep_measured_waterfall_fig9_and_table(seeded, use_api):
    use_api(seeded)
    at = open_page("compare", {"sweep": str(seeded.ids["sweep"])})
    no_errors(at)
    figs = figures(at)
    titles = [plain_title(f) for f in figs]
    # the headline first; these runs have no step-0 evaluation, so the reach table says why it is missing
    assert titles[:2] == ["Held-out Avg@8 vs training FLOPs", "Held-out Avg@8 vs training time"]
    assert "no step-0 evaluation of the base" in texts(at.info)
    assert titles[2] == "held-out Avg@k (overall) at each evaluation" and len(figs[2]["data"]) == 4  # the default curve
    colors = {tr["name"].split(" ", 1)[1].rsplit(" ", 1)[0]: tr["line"]["color"] for tr in figs[2]["data"]}
    assert colors == {"GRPO": "#4C78A8", "AERO S1 only": "#72B7B2", "AERO S1+S2": "#B279A2", "AERO": "#E45756"}
    assert figs[2]["data"][0]["x"] == [15, 30]  # evaluation steps
    figs = figs[3:]
    titles = titles[3:]
    time_wf, flops_wf = figs[0], figs[1]
    assert "measured from ablation runs, sweep #1" in fig_title(time_wf)
    # time/train_s per step = trained rollouts x 3 ms: GRPO 256, S1 180, S1+S2 120, AERO 70
    assert time_wf["data"][0]["y"] == pytest.approx([0.768, 0.228, 0.18, 0.15, 0.21])
    assert time_wf["data"][0]["x"] == ["GRPO", "S1 early rescue", "S2 Bayesian", "S3 rejection", "AERO"]
    assert flops_wf["data"][0]["y"] == pytest.approx([256 * 40 * 6e6, 76 * 40 * 6e6, 60 * 40 * 6e6, 50 * 40 * 6e6, 70 * 40 * 6e6])
    assert titles[2].startswith("Zero-accuracy ratio")
    table = figs[3]["data"][0]
    header = table["header"]["values"]
    assert header[:3] == ["<b>run</b>", "<b>time / step</b>", "<b>FLOPs / step</b>"] and "<b>Avg@8 total</b>" in header
    total = table["cells"]["values"][header.index("<b>Avg@8 total</b>")]
    assert total[3].startswith("<b>0.530 (1.10×)") and not total[0].startswith("<b>")  # AERO best, in bold
    pass_header = figs[4]["data"][0]["header"]["values"]
    assert pass_header == ["<b>run</b>", "<b>Pass@8 L1</b>", "<b>Pass@8 L2</b>", "<b>Pass@8 total</b>"]
    assert at.get("download_button")[0].label == "Download table (CSV)"


def test_compare_runs_uses_counterfactual_waterfall(seeded, use_api):
    use_api(seeded)
    at = open_page("compare", {"runs": f"{seeded.ids['dapo']},{seeded.ids['running']}"})
    no_errors(at)
    wf = fig_titled(at, "Time per step: GRPO → AERO")
    assert f"counterfactual accounting, run #{seeded.ids['running']}" in fig_title(wf)
    # baseline = what AERO trained (70 x 3 ms) + logged savings (76 + 60 + 50) x 3 ms
    assert wf["data"][0]["y"] == pytest.approx([0.768, 0.228, 0.18, 0.15, 0.21])
    assert "Counterfactual accounting" in texts(at.caption)


def test_compare_counterfactual_grpo_bar_says_it_is_not_the_measured_one(seeded, use_api):
    use_api(seeded)
    at = open_page("compare", {"runs": f"{seeded.ids['failed']},{seeded.ids['running']}"})  # a GRPO run and a live AERO run
    no_errors(at)
    wf = fig_titled(at, "Time per step: GRPO → AERO")
    assert "counterfactual accounting" in fig_title(wf)
    bar = wf["data"][0]
    assert bar["text"][0] == "0.768 s<br>counterfactual"
    assert "plus the savings" in bar["hovertext"][0] and "not the GRPO run's measured step time" in bar["hovertext"][0]
    # and the compared GRPO run's measured training seconds per step, beside the bars (256 rollouts x 3 ms)
    line = next(sh for sh in wf["layout"]["shapes"] if sh["line"].get("dash") == "dash")
    assert line["y0"] == pytest.approx(0.768)
    assert wf["layout"]["annotations"][0]["text"] == f"GRPO run #{seeded.ids['failed']}, measured: 0.768 s"
    assert "not the GRPO run's measured step time" in texts(at.caption) and "whole step" in texts(at.caption)


def test_compare_keeps_coinciding_curves_of_two_methods_apart(seeded, use_api):
    use_api(seeded)
    ids = [seeded.ids["grpo"], seeded.ids["dapo"]]  # same seed; their zero-accuracy curves coincide (conftest)
    at = open_page("compare", {"runs": ",".join(map(str, ids))})
    no_errors(at)
    at.selectbox(key="cmp_metric").set_value("zero_acc/after_rescue").run()
    charts_ = [fig_titled(at, "Held-out Avg@8 vs training FLOPs"), fig_titled(at, "Held-out Avg@8 vs training time"),
               fig_titled(at, "zero_acc/after_rescue per step"), fig_titled(at, "Zero-accuracy ratio (lines")]
    for fig in charts_:  # every multi-run chart: GRPO solid, DAPO dashed over it
        lines = [t for t in fig["data"] if t.get("showlegend") is not False]
        assert [t["line"].get("dash", "solid") for t in lines] == ["solid", "dash"], fig_title(fig)


def test_compare_bolds_ties_in_every_column(seeded, use_api):
    use_api(seeded)
    ids = [seeded.ids["grpo"], seeded.ids["aero-s1"]]  # the same evaluations (conftest), different costs
    at = open_page("compare", {"runs": ",".join(map(str, ids))})
    bench = next(f["data"][0] for f in figures(at) if "<b>Avg@8 total</b>" in f["data"][0].get("header", {}).get("values", []))
    header = [h.replace("<b>", "").replace("</b>", "") for h in bench["header"]["values"]]
    bold = {h: [c.startswith("<b>") for c in col] for h, col in zip(header, bench["cells"]["values"])}
    assert bold["time / step"] == [False, True] and bold["FLOPs / step"] == [False, True]  # AERO S1 costs less
    assert bold["Avg@8 L1"] == bold["Avg@8 L2"] == bold["Avg@8 total"] == [True, True]  # a tie: both best, every column


def test_compare_without_aero_explains_missing_waterfall(seeded, use_api):
    use_api(seeded)
    at = open_page("compare", {"runs": str(seeded.ids["dapo"])})
    no_errors(at)
    assert "No waterfall yet" in texts(at.info)


def test_compare_cumulative_flops_axis(seeded, use_api):
    use_api(seeded)
    at = open_page("compare", {"sweep": str(seeded.ids["sweep"])})
    at.get("button_group")[1].set_value("flops").run()  # [0] = sweep/runs, [1] = x axis
    per_step = 256 * 10 * 20 * 2e6 * 0 + (16 * 16) * 20 * 2e6 + 256 * 40 * 6e6  # flops/total of GRPO in conftest
    heldout = fig_titled(at, "held-out Avg@k")  # at the evaluations (steps 15, 30), on the exact cumulative FLOPs
    assert heldout["data"][0]["x"] == pytest.approx([15 * per_step, 30 * per_step])
    at.selectbox(key="cmp_metric").set_value("reward/mean").run()
    fig = fig_titled(at, "reward/mean per step")
    assert "not held-out accuracy" in fig_title(fig)  # says what the reward measures
    assert fig["data"][0]["x"][:3] == pytest.approx([per_step, 2 * per_step, 3 * per_step])
    assert fig["layout"]["xaxis"]["title"]["text"] == "cumulative FLOPs"


def test_compare_empty(empty_api, use_api):
    use_api(empty_api)
    at = open_page("compare")
    assert "No runs yet" in texts(at.info)


# ---------------------------------------------------------------- sweeps


def test_sweeps_progress_and_compare_link(seeded, use_api):
    use_api(seeded)
    at = open_page("sweeps")
    no_errors(at)
    assert "Sweep #1 · ladder" in texts(at.markdown)
    [bar] = at.get("progress")
    assert bar.proto.value == 100 and "4 succeeded" in bar.proto.text
    links = [n for n in walk(at.main) if n.type == "page_link"]
    assert any("compare" in n.proto.page and "sweep=1" in n.proto.query_string for n in links)


def test_sweeps_empty(empty_api, use_api):
    use_api(empty_api)
    at = open_page("sweeps")
    assert "No sweeps yet" in texts(at.info)


# ---------------------------------------------------------------- compare: seed groups ("Aggregate seeds")


def test_compare_sweep_aggregates_seed_groups(seed_groups, use_api):
    use_api(seed_groups)
    at = open_page("compare", {"sweep": str(seed_groups.ids["sweep"])})
    no_errors(at)
    assert at.toggle(key="cmp_agg").value is True  # a group has 2+ seeds: aggregated by default
    api = httpx.get(f"{seed_groups.url}/api/compare/groups",
                    params={"run_ids": ",".join(str(seed_groups.ids[k]) for k in ("grpo0", "grpo1", "grpo2", "aero0", "aero1"))}).json()
    grpo, aero = api["groups"]
    assert at.selectbox(key="cmp_baseline_group").value == grpo["key"] == api["baseline"]
    assert [plain_title(f) for f in figures(at)[:2]] == ["Held-out Avg@8 vs training FLOPs", "Held-out Avg@8 vs training time"]
    at.selectbox(key="cmp_metric").set_value("reward/mean").run()
    figs = figures(at)
    curves = fig_titled(at, "reward/mean per step")
    assert "95% CI across seeds" in fig_title(curves)
    lines = [t for t in curves["data"] if t.get("fill") != "toself"]
    bands = [t for t in curves["data"] if t.get("fill") == "toself"]
    assert [t["name"] for t in lines] == ["grpo", "aero"]  # legend by group label
    assert [t["line"]["color"] for t in lines] == ["#4C78A8", "#E45756"]
    assert bands[0]["fillcolor"] == "rgba(76,120,168,0.18)" and bands[1]["fillcolor"] == "rgba(228,87,86,0.18)"
    # GRPO's mean at step 10 averages its seeds: reward 0.3 + 0.3 * 10/20 + 0.01 * seed
    i = lines[0]["x"].index(10)
    assert lines[0]["y"][i] == pytest.approx(0.45 + 0.01)
    assert lines[0]["customdata"][i][1] == 3 and lines[1]["customdata"][i][1] == 2  # n seeds in the hover
    assert "Student-t confidence interval across seeds" in texts(at.caption)
    titles = [fig_title(f) for f in figs]
    assert any("measured" in t or "counterfactual" in t for t in titles)  # the waterfall stays
    fig9 = next(f for f in figs if fig_title(f).startswith("Zero-accuracy ratio (line + band"))
    assert sum(t.get("fill") == "toself" for t in fig9["data"]) == 2
    # the grouped summary: seeds, mean ± half-CI and the per-seed-pair ratio under it
    summary = next(f for f in figs if f["data"][0].get("type") == "table" and "<b>seed pairs</b>" in f["data"][0]["header"]["values"])
    cols = summary["data"][0]["cells"]["values"]
    header = summary["data"][0]["header"]["values"]
    assert cols[0] == ["grpo (baseline)", "aero"] and cols[1] == ["3 (0, 1, 2)", "2 (0, 1)"]
    time_cell = cols[header.index("<b>time / step</b>")][1]
    r = aero["ratios"]["mean"]["time/step_s"]
    assert f"{r['mean']:.2f}× [{r['lo']:.2f}, {r['hi']:.2f}]" in time_cell and " ± " in time_cell
    assert cols[-1] == ["—", "2"]
    # the grouped Table 1: Total (P-value) from significance["overall"]
    bench = next(f for f in figs if "<b>Avg@8 Total (P-value)</b>" in f["data"][0].get("header", {}).get("values", []))
    total = bench["data"][0]["cells"]["values"][-1]
    test = next(t for t in api["significance"]["overall"] if t["group"] == aero["key"] and t["metric"] == "avg_at_k")
    mean = aero["evals"]["overall"]["avg_at_k"]["mean"]
    assert total[0].endswith("(—)") and total[1] == f"<b>{mean:.3f} ({p_text(test['p_value'])})</b>"  # AERO best: bold
    assert test["p_value"] < 0.05  # AERO solves 2 more per problem on every seed
    # the arena's leaderboard: AERO first (best final), its paired difference and p-value against GRPO
    board = next(t for t in tables_of(at) if "diff vs baseline (p)" in t["header"])
    assert board["cells"][0] == ["aero", "grpo (baseline)"]
    diff = board["cells"][board["header"].index("diff vs baseline (p)")]
    assert diff[0].startswith(f"{test['diff']:+.3f} [") and diff[0].endswith(p_text(test["p_value"])) and diff[1] == "—"
    labels = [b.label for b in at.get("download_button")]
    assert labels == ["Download leaderboard (CSV)", "Download summary (CSV)", "Download benchmarks (CSV)"]
    assert "paired sign-flip permutation over problems" in texts(at.caption) and "per seed pair" in texts(at.caption)
    assert any("How to read a comparison" in e.label for e in at.expander)


def test_compare_seed_groups_toggle_off_and_baseline_choice(seed_groups, use_api):
    use_api(seed_groups)
    ids = [seed_groups.ids[k] for k in ("grpo0", "grpo1", "aero0", "aero1", "dapo")]
    at = open_page("compare", {"runs": ",".join(map(str, ids))})
    no_errors(at)
    keys = at.selectbox(key="cmp_baseline_group").options
    assert len(keys) == 3  # grpo, aero, dapo (a group of one)
    at.selectbox(key="cmp_baseline_group").select_index(1).run()  # AERO's group as the baseline
    no_errors(at)
    summary = next(f for f in figures(at) if "<b>seed pairs</b>" in f["data"][0].get("header", {}).get("values", []))
    rows = summary["data"][0]["cells"]["values"][0]
    assert rows == ["grpo", "aero (baseline)", "dapo"]
    bench = next(f for f in figures(at) if "<b>Avg@8 Total (P-value)</b>" in f["data"][0].get("header", {}).get("values", []))
    total = [c.replace("<b>", "").replace("</b>", "") for c in bench["data"][0]["cells"]["values"][-1]]
    assert total[1].endswith("(—)") and "(p" in total[0] and "(p" in total[2]
    at.toggle(key="cmp_agg").set_value(False).run()  # per-run view, as before
    no_errors(at)
    curves = fig_titled(at, "held-out Avg@k")
    assert len(curves["data"]) == 5 and not any(t.get("fill") for t in curves["data"])
    assert at.selectbox(key="cmp_baseline").value == ids[0]


def test_compare_without_seed_groups_has_no_toggle(seeded, use_api):
    use_api(seeded)
    at = open_page("compare", {"sweep": str(seeded.ids["sweep"])})  # one run per method
    no_errors(at)
    assert not [t for t in at.toggle if t.key == "cmp_agg"]


# ---------------------------------------------------------------- compare: the headline (accuracy vs compute, compute to reach)

GRPO_FLOPS = 256 * 20 * 2e6 + 256 * 40 * 6e6  # flops/total per step of GRPO in conftest.fake_metrics (seed 0)
AERO_FLOPS = 280 * 20 * 2e6 + 70 * 40 * 6e6


def test_compare_headline_and_reach_table_come_first(reach_groups, use_api):
    use_api(reach_groups)
    at = open_page("compare", {"sweep": str(reach_groups.ids["sweep"])})
    no_errors(at)
    figs = figures(at)
    assert [plain_title(f) for f in figs[:2]] == ["Held-out Avg@8 vs training FLOPs", "Held-out Avg@8 vs training time"]
    flops = figs[0]
    lines = [t for t in flops["data"] if t.get("fill") != "toself"]
    assert [t["name"] for t in lines] == ["grpo", "aero", "dapo"]
    assert sum(t.get("fill") == "toself" for t in flops["data"]) == 3  # a seed band per method
    # GRPO's smoothed Avg@8 (.3 .325 .35 .4 .45, + .01 x seed) at its eval points' FLOPs: both seeds at 0 FLOPs; seed 1
    # costs 5% more per step, so its last evaluation lies beyond seed 0's and stands alone there
    assert lines[0]["y"][0] == pytest.approx(0.305) and lines[0]["customdata"][0][1] == 2
    assert lines[0]["y"][-1] == pytest.approx(0.46) and lines[0]["customdata"][-1][1] == 1
    assert flops["layout"]["xaxis"]["title"]["text"].startswith("cumulative training FLOPs")
    assert "evaluation excluded" in figs[1]["layout"]["xaxis"]["title"]["text"]
    assert any("100% of GRPO's gain" in a["text"] for a in flops["layout"]["annotations"])  # the target lines
    headings = [h.value for h in at.subheader]
    assert headings[:2] == ["Held-out Avg@8 against training compute", "Compute to reach GRPO's accuracy"]
    # the reach table is the third figure, before the training curves
    reach = tables_of(at)[0]
    assert figs[2]["data"][0]["type"] == "table"
    assert reach["header"][0] == "method" and reach["header"][1].startswith("50% of GRPO's gain")
    assert "(Avg@8 ≥ 0.380)" in reach["header"][1]  # seeds' targets .375 and .385
    method, half = reach["cells"][0], reach["cells"][1]
    assert method == ["grpo (baseline)", "aero", "dapo"]
    assert [c[-1] for c in reach["cells"][1:]] == ["not reached (2/2 seeds)"] * 4  # DAPO never learns
    ratio = 5 * AERO_FLOPS / (15 * GRPO_FLOPS)  # AERO reaches 50% at step 5, GRPO at step 15, the same in both seeds
    aero = half[1].split("<br>")
    assert aero[0].endswith(" GFLOP") and aero[1].endswith(" s") and aero[2].endswith(" k rollouts")  # rollouts to reach
    assert aero[3] == f"{ratio:.2f}× [{ratio:.2f}, {ratio:.2f}] FLOPs"
    assert "×" not in half[0]  # the baseline has no ratio to itself
    captions = texts(at.caption)
    for words in ("held-out **Avg@8**", "fixed problems", "eval_temperature", "paired draws", "trailing mean over 3 evaluations",
                  "evaluation time is not on the x axis", "not reached (k/n seeds)"):
        assert words in captions, words
    assert "Download compute to reach (CSV)" in [b.label for b in at.get("download_button")]


def test_compare_headline_per_run_without_seeds(reach_groups, use_api):
    use_api(reach_groups)
    ids = [reach_groups.ids[k] for k in ("grpo0", "aero0", "dapo0")]
    at = open_page("compare", {"runs": ",".join(map(str, ids))})  # one seed per method: the per-run view
    no_errors(at)
    assert not [t for t in at.toggle if t.key == "cmp_agg"]
    figs = figures(at)
    assert [plain_title(f) for f in figs[:2]] == ["Held-out Avg@8 vs training FLOPs", "Held-out Avg@8 vs training time"]
    grpo = figs[0]["data"][0]
    assert not any(t.get("fill") for t in figs[0]["data"])  # one run per line: no bands
    assert grpo["x"] == pytest.approx([0, 5 * GRPO_FLOPS, 10 * GRPO_FLOPS, 15 * GRPO_FLOPS, 20 * GRPO_FLOPS])
    assert grpo["y"] == pytest.approx([0.3, 0.325, 0.35, 0.4, 0.45])  # smoothed over 3 evaluations
    reach = tables_of(at)[0]
    assert reach["cells"][0] == [f"#{ids[0]} GRPO s0 (baseline)", f"#{ids[1]} AERO s0", f"#{ids[2]} DAPO s0"]
    assert [c[2] for c in reach["cells"][1:]] == ["not reached"] * 4
    assert f"<br>{5 * AERO_FLOPS / (15 * GRPO_FLOPS):.2f}× FLOPs<br>" in reach["cells"][1][1]


def test_run_detail_defaults_to_held_out_accuracy(reach_groups, use_api):
    use_api(reach_groups)
    at = open_page("run_detail", {"run": str(reach_groups.ids["aero0"])})
    no_errors(at)
    first = figures(at)[0]
    assert plain_title(first) == "Held-out Avg@8 over training" and first["data"][0]["x"] == [0, 5, 10, 15, 20]


# ---------------------------------------------------------------- compare: the rollout-allocation arena's leaderboard


def test_compare_arena_leaderboard_ranks_groups_against_the_baseline(reach_groups, use_api):
    from common.fmt import si

    use_api(reach_groups)
    at = open_page("compare", {"sweep": str(reach_groups.ids["sweep"])})
    no_errors(at)
    assert "Leaderboard (rollout-allocation arena)" in [h.value for h in at.subheader]
    board = next(t for t in tables_of(at) if "diff vs baseline (p)" in t["header"])
    ids = ",".join(str(reach_groups.ids[f"{m}{s}"]) for m in ("grpo", "aero", "dapo") for s in (0, 1))
    api = httpx.get(f"{reach_groups.url}/api/compare/groups", params={"run_ids": ids}).json()
    finals = {g["label"]: g["evals"]["overall"]["avg_at_k"]["mean"] for g in api["groups"]}
    names = [n.replace(" (baseline)", "") for n in board["cells"][0]]
    assert names == sorted(finals, key=lambda n: -finals[n])  # best final Avg@8 first
    col = {h: board["header"].index(h) for h in board["header"]}
    row = {n: i for i, n in enumerate(names)}
    grpo, aero, dapo = row["grpo"], row["aero"], row["dapo"]
    assert board["cells"][col["diff vs baseline (p)"]][grpo] == "—"
    assert not api["significance"] and board["cells"][col["diff vs baseline (p)"]][aero] == "–"  # no per-problem evals here
    half = col["to 50% of the baseline's gain (per seed)"]
    assert board["cells"][half][dapo] == "s0 not reached<br>s1 not reached"  # 'not reached' kept per seed
    reach = next(g for g in api["reach"]["groups"] if g["label"] == "aero")["targets"][0]["seeds"]
    assert board["cells"][half][aero] == "<br>".join(
        f"s{s['seed']} {si(s['flops'], 'FLOP')} · {si(s['seconds'], 's')} · {si(s['rollouts'], '')} rollouts" for s in reach)
    assert board["cells"][col["rollouts gen / step"]][grpo] != "–"
    assert "Download leaderboard (CSV)" in [b.label for b in at.get("download_button")]
    assert "not reached* stays in the table" in texts(at.caption)
    trade = fig_titled(at, "Final Avg@8 vs FLOPs per step")  # the trade-off chart under the table
    assert [t["name"] for t in trade["data"]] == ["grpo", "aero", "dapo"]
    assert trade["data"][1]["marker"]["color"] == "#E45756" and trade["data"][1]["error_y"]["visible"] is True
    assert trade["data"][0]["y"] == [pytest.approx(finals["grpo"])]
