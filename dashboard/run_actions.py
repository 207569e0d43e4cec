"""Run detail's actions on one run: its alert badge and rules, resume, clone into the Launch
form, and its notes and tags (all through the API; pure parts in dashboard/run_extras.py)."""

from __future__ import annotations

import streamlit as st

from dashboard import forms, run_extras, ui
from dashboard.client import ApiError


def alerts_of(run: dict) -> dict:
    try:
        return ui.client().run_alerts(run["id"])
    except ApiError:
        return {"rules": [], "events": [], "webhook": False, "stop_reason": None}


def badge(run: dict, alerts: dict) -> None:
    html = run_extras.alert_badge(alerts)
    if html:
        st.html(html)
    if alerts.get("stop_reason"):
        st.warning(f"**Stopped early** by {ui.md(alerts['stop_reason'])}", icon=":material/notifications_active:")


def buttons(run: dict) -> None:
    c1, c2, _ = st.columns([2, 2, 5])
    if run_extras.can_resume(run) and ui.may_change(run):  # the API's rule: admins any run, members their own
        if c1.button("Resume run", icon=":material/replay:", key="detail_resume",
                     help="Queue it again: the worker resumes it from its last checkpoint (from the start without one)."):
            try:
                ui.client().resume_run(run["id"])
            except ApiError as e:
                ui.show_error(e, "resume the run")
            else:
                ui.clear_caches()
                st.rerun()
    if not ui.may_submit():  # a viewer's token may not launch a clone either
        return
    with c2:
        st.page_link(ui.PAGES["launch"], label="Clone into Launch", query_params={"clone": str(run["id"])},
                     icon=":material/content_copy:")


def alerts_panel(alerts: dict) -> None:
    if not alerts.get("rules"):
        return
    with st.expander(f"Alerts ({len(alerts['events'])} of {len(alerts['rules'])} rules fired)",
                     icon=":material/notifications:", expanded=bool(alerts["events"])):
        st.caption("Webhook: " + ("on (the operator's allowed hosts only)" if alerts["webhook"] else "off (recorded here only)"))
        st.dataframe(run_extras.rule_rows(alerts), hide_index=True)


def notes_and_tags(run: dict) -> None:
    if not ui.may_change(run):
        if run.get("notes"):
            st.caption("Notes: " + ui.md(run["notes"]))
        return
    with st.expander("Notes and tags", icon=":material/edit_note:"):
        with st.form("detail_notes"):
            notes = st.text_area("Notes", value=run.get("notes") or "", max_chars=10_000, key="detail_notes_text")
            tags = st.text_input("Tags", value=", ".join(run.get("tags") or []), help="Comma-separated.",
                                 key="detail_tags_text")
            if st.form_submit_button("Save", icon=":material/save:"):
                try:
                    ui.client().update_run(run["id"], notes=notes, tags=forms.parse_list(tags))
                except ApiError as e:
                    ui.show_error(e, "save the notes and tags")
                else:
                    ui.clear_caches()
                    st.toast("Saved.")
                    st.rerun()


def show(run: dict) -> None:
    """Everything above, under the run's header."""
    alerts = alerts_of(run)
    badge(run, alerts)
    buttons(run)
    alerts_panel(alerts)
    notes_and_tags(run)
