"""Run detail's Rollouts view: one step's stored rollout sample (prompt, response, reward,
advantage, stratum, round, length, truncation), with a step slider and stratum, stage and
reward filters, paginated by the API (GET /api/runs/{id}/rollouts).

Model text is untrusted: it is shown only through widgets that render text, never markup
(the data grid, ``st.code``), so a response holding HTML, Markdown or a Streamlit directive is
displayed as the characters it is."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import ui

PAGE = 20
MAX_SLIDER_STEPS = 1000  # past this many sampled steps a number box replaces the slider (one option per step)
STAGES = ("explore", "rescue", "round", "curated out")
STRATA = ("rescue", "low", "high")
REWARD_RANGE = (-1.0, 1.0)


PROMPT_TAIL = 90  # characters of a prompt the table shows


def prompt_tail(text: str) -> str:
    """A prompt as the table shows it: its end. A chat template's prompt starts with the same
    system message every time and ends with the question, so the end is what tells rows apart;
    "Show one in full" has the whole text."""
    text = " ".join(text.split())
    return text if len(text) <= PROMPT_TAIL else "…" + text[-PROMPT_TAIL:]


COLUMNS = ["group", "stage", "stratum", "version", "reward", "advantage", "length", "truncated", "prompt", "response"]


def rollout_frame(rows: list[dict]) -> pd.DataFrame:
    """The table of one page: one row per rollout, text columns last. ``version`` is the policy
    (training steps done) that sampled the row: older than the step before on an asynchronous
    run; blank for rows stored before rows carried it."""
    return pd.DataFrame([{"group": r["group"], "stage": r["stage"], "stratum": r["stratum"], "version": r.get("version"),
                          "reward": r["reward"], "advantage": r["advantage"], "length": r["length"],
                          "truncated": r["truncated"], "prompt": prompt_tail(r["prompt"]), "response": r["response"]}
                         for r in rows], columns=COLUMNS)


def filters() -> tuple:
    """(stratum, stage, min_reward, max_reward) from the controls; None = no filter."""
    c1, c2, c3 = st.columns([1, 1, 2])
    stratum = c1.selectbox("Stratum", ("all", *STRATA), key="ro_stratum",
                           help="From the prompt's exploration: rescue (no correct answer, c <= S), low or high success.")
    stage = c2.selectbox("Stage", ("all", *STAGES), key="ro_stage",
                         help="explore = first generation; rescue = AERO's rescue rounds; round = DAPO's later batches; "
                              "curated out = generated but not trained.")
    lo, hi = c3.slider("Reward", *REWARD_RANGE, value=REWARD_RANGE, step=0.05, key="ro_reward")
    return (None if stratum == "all" else stratum, None if stage == "all" else stage,
            None if lo <= REWARD_RANGE[0] else lo, None if hi >= REWARD_RANGE[1] else hi)


def follow_latest(run_id: int, steps: list[int], key: str, typed: bool = False) -> None:
    """Set the step control's state before it is drawn: the newest step for a run just opened,
    for a control that showed the newest step when newer ones landed (a live run: the view
    follows training), or when the stored step is not one of this run's (a ``typed`` number box:
    outside its range); else what the user picked."""
    shown, (seen_run, seen_last) = st.session_state.get(key), st.session_state.get("ro_seen", (None, None))
    valid = shown is not None and steps[0] <= shown <= steps[-1] if typed else shown in steps
    if seen_run != run_id or shown == seen_last or not valid:
        st.session_state[key] = steps[-1]
    st.session_state["ro_seen"] = (run_id, steps[-1])


def pick_step(run_id: int, steps: list[int]) -> int:
    """The step to show: a slider over the sampled steps, or for a long run a number box (the
    nearest sampled step at or before the number typed). Both follow new steps while they show
    the newest (:func:`follow_latest`)."""
    if len(steps) == 1:
        return steps[0]
    if len(steps) <= MAX_SLIDER_STEPS:
        follow_latest(run_id, steps, "ro_step")
        return int(st.select_slider("Step", options=steps, key="ro_step"))
    follow_latest(run_id, steps, "ro_step_n", typed=True)
    typed = st.number_input("Step", min_value=steps[0], max_value=steps[-1], step=1, key="ro_step_n")
    return max(s for s in steps if s <= typed)


def section(run: dict) -> None:
    st.subheader("Rollouts")
    url, token, version = ui.api_url(), ui.api_token(), ui.version(run)
    latest = ui.rollouts(url, token, run["id"], None, (None, None, None, None), 0, 1, version)
    steps = latest["steps"]
    if not steps:
        st.caption("No rollouts stored yet: each step stores a sample of its rollouts (a few random prompts with all "
                   "their rollouts, plus every rescued group) as it is logged.")
        return
    step = pick_step(run["id"], steps)
    wanted = filters()
    page = st.number_input("Page", min_value=1, value=1, step=1, key="ro_page")
    body = ui.rollouts(url, token, run["id"], int(step), wanted, (int(page) - 1) * PAGE, PAGE, version)
    count, rows = body["count"], body["data"]
    first = body["offset"] + 1
    st.caption(f"Step {body['step']}: {count} stored rollouts match" +
               (f"; showing {first}-{body['offset'] + len(rows)}." if rows else "."))
    if not rows:
        return
    st.dataframe(rollout_frame(rows), hide_index=True, key="ro_table",
                 column_config={"reward": st.column_config.NumberColumn(format="%.3f"),
                                "advantage": st.column_config.NumberColumn(format="%.3f"),
                                "prompt": st.column_config.TextColumn(width="medium"),
                                "response": st.column_config.TextColumn(width="large")})
    pick = st.selectbox("Show one in full", range(len(rows)), key="ro_pick",
                        format_func=lambda i: f"#{first + i}: group {rows[i]['group']}, {rows[i]['stage']}, "
                                              f"reward {'-' if rows[i]['reward'] is None else format(rows[i]['reward'], '.3g')}")
    r = rows[pick]
    st.caption("Prompt" + (" (clipped to the operator's cap)" if r["clipped"] else ""))
    st.code(r["prompt"], language=None, wrap_lines=True)
    st.caption("Response" + (" (cut at max_new_tokens)" if r["truncated"] else ""))
    st.code(r["response"], language=None, wrap_lines=True)
