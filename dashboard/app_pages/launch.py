"""Launch: a form for one run or a sweep (methods x seeds). Defaults, help texts and tiers come
from the API's schema (the paper's defaults): the basic fields first, every expert one behind the
*Expert settings* expander; the API's validation errors appear under the field they name."""

import dataclasses
from typing import Any

import streamlit as st

import common.dotted as dotted
from dashboard import expert_fields, forms, launch_extras, ui
from dashboard.client import ApiError

ERRORS = "launch_errors"  # session key: {dotted field: message} from the last rejected submit
RESULT = "launch_result"  # session key: (kind, body) of the last accepted submit

st.title("Launch")
st.caption("Every hyperparameter starts at the paper's default (AERO, arXiv 2602.14338, Table 9); hover the (?) icons for "
           "what it means. The *tiny* presets train a ~1M-parameter model on synthetic arithmetic (tiny) or on Countdown "
           "(tiny-countdown) in seconds per step; an installed real model (smollm2-135m, `aero models install smollm2-135m`) "
           "trains on either in tens of seconds per step.")


def field_error(path: str) -> None:
    msg = st.session_state.get(ERRORS, {}).get(path)
    if msg:
        st.error(ui.md(msg), icon=":material/error:")


def widget(spec: forms.FieldSpec) -> Any:
    """One input for a schema field, pre-filled with its default."""
    key, help_ = f"f_{spec.path}", spec.help or None
    if spec.type == "boolean":
        value = st.checkbox(spec.label, value=bool(spec.default), help=help_, key=key)
    elif spec.type == "choice":
        opts = list(spec.choices)
        value = st.selectbox(spec.label, opts, index=opts.index(spec.default) if spec.default in opts else 0, help=help_, key=key)
    elif spec.type == "optional_integer":  # empty = null (auto); 0 is a value of its own
        value = st.text_input(spec.label, value="" if spec.default is None else str(spec.default), placeholder="auto",
                              help=help_, key=key)
    elif spec.type == "integer":
        value = int(st.number_input(spec.label, value=int(spec.default or 0), step=1, help=help_, key=key))
    elif spec.type == "number":
        d = float(spec.default or 0.0)
        value = float(st.number_input(spec.label, value=d, step=(abs(d) / 10 if d else 0.01), format="%g", help=help_, key=key))
    else:
        value = st.text_input(spec.label, value="" if spec.default is None else str(spec.default), help=help_, key=key) or None
    field_error(spec.path)
    return value


def fields_grid(specs: list[forms.FieldSpec], preset_values: dict[str, Any], clone: dict | None) -> dict[str, Any]:
    """The inputs of ``specs`` three to a row, each pre-filled with the chosen preset's value, or
    the cloned run's, or the schema's default: {dotted path: request value}."""
    out: dict[str, Any] = {}
    cols = st.columns(3)
    for i, spec in enumerate(specs):
        with cols[i % 3]:
            if spec.path in preset_values:
                spec = dataclasses.replace(spec, default=preset_values[spec.path])
            out[spec.path] = forms.from_widget(spec, widget(launch_extras.with_default(spec, clone)))
    return out


SWEEP_METHODS = ("grpo", "aero-s1", "aero-s1s2", "aero")  # a sweep's preselected methods (those the menu offers)


def choose_methods(menu: forms.MethodMenu, default: str | None) -> list[str]:
    mode = st.segmented_control("What to launch", ["One run", "Sweep"], default="One run", key="launch_mode")
    choices = list(menu.names)
    if mode == "Sweep":
        st.caption("A sweep submits one run per method x seed. GRPO, AERO S1, AERO S1+S2 and AERO together give the "
                   "*measured* savings waterfall on the Compare page.")
        return st.multiselect("Methods", choices, default=[m for m in SWEEP_METHODS if m in choices],
                              format_func=menu.text, key="launch_methods")
    return [st.selectbox("Method", choices, index=choices.index(default) if default in choices else 0,
                         format_func=menu.text, key="launch_method")]


LOCAL_MODEL = "Local model + dataset"


def model_choices(doc: dict) -> list[str]:
    """The presets (the schema's enum: the shipped ones, each training its own task, and the installed
    real models), then a local model."""
    spec = forms.field_spec(doc, "preset", "preset")
    return [*(spec.choices if spec else ("tiny",)), LOCAL_MODEL]


def forget_preset_fields(doc: dict, choices: list[str]) -> None:
    """Another model was chosen: the fields any preset pre-fills start again from the new one's
    values (a widget keeps what its key holds, whatever its default says)."""
    for choice in choices:
        for path in forms.preset_defaults(doc, choice):
            st.session_state.pop(f"f_{path}", None)


def model_fields(choice: str, doc: dict) -> dict[str, Any]:
    if choice != LOCAL_MODEL:
        tasks = forms.preset_tasks(doc, choice)
        if len(tasks) < 2:  # a shipped preset: the API picks the task it was trained on
            return {"preset": choice, "model_path": None}
        task = st.selectbox("task", tasks, key="f_preset_task", help=f"The generated tasks {choice} serves.")
        return {"preset": choice, "model_path": None, "task": task}
    specs = [forms.field_spec(doc, p, lab) for p, lab in (("model_path", "model path"), ("task", "task"),
                                                            ("train_data", "dataset (parquet / JSONL)"))]
    c1, c2, c3 = st.columns(3)
    out: dict[str, Any] = {"preset": None}
    for col, spec in zip((c1, c2, c3), specs):
        with col:
            out[spec.path] = widget(spec)
    return out


def model_tasks(doc: dict, choice: str) -> list[str]:
    """The tasks the chosen model may train: any for a local model, an installed one's listed
    tasks (a shipped preset's own task is the API's to pick)."""
    if choice == LOCAL_MODEL:
        spec = forms.field_spec(doc, "task", "task")
        return list(spec.choices) if spec else []
    return forms.preset_tasks(doc, choice)


def submit(methods: list[str], config: dict, seeds_text: str, name: str, tags_text: str, priority: int = 0,
           overrides: list[dict] | None = None) -> None:
    errors: dict[str, str] = {}
    try:
        seeds = forms.parse_list(seeds_text, int)
    except ValueError:
        errors["seeds"] = "seeds must be whole numbers separated by commas, e.g. 0, 1, 2"
        seeds = []
    if not methods:
        errors["methods"] = "choose at least one method"
    if errors:
        st.session_state[ERRORS] = errors
        return
    kind, body = forms.submission(methods, seeds, config, name=name, tags=forms.parse_list(tags_text),
                                  overrides=overrides or ())
    if priority:  # the run's (every run's of a sweep), not its config's; 0 is the API's default
        body["priority"] = priority
    try:
        created = ui.client().create_run(body) if kind == "run" else ui.client().create_sweep(body)
    except ApiError as e:
        st.session_state[ERRORS] = launch_extras.sweep_errors(e.field_errors) or {"": e.message}  # shown under the fields
        return
    st.session_state[ERRORS] = {}
    st.session_state[RESULT] = (kind, created)
    ui.clear_caches()


def show_result() -> None:
    kind, created = st.session_state.get(RESULT, (None, None))
    if kind == "run":
        st.success(f"Run #{created['id']} ({ui.md(created['name'])}) is queued.", icon=":material/check_circle:")
        ui.run_link(created["id"], f"Watch run #{created['id']} live")
    elif kind == "sweep":
        ids = ",".join(str(r["id"]) for r in created["runs"])
        st.success(f"Sweep #{created['id']} ({ui.md(created['name'])}) queued {len(created['runs'])} runs: {ids}.",
                   icon=":material/check_circle:")
        st.page_link(ui.PAGES["compare"], label=f"Compare the runs of sweep #{created['id']}",
                     query_params={"sweep": str(created["id"])}, icon=":material/compare_arrows:")


@ui.guarded
def main() -> None:
    doc = ui.openapi(ui.api_url())
    if not ui.api_token():
        st.warning("No API token is set, so the API will refuse to launch. Paste one under *Settings* in the sidebar "
                   "(`aero up` passes its admin token to the dashboard automatically).", icon=":material/key:")
    menu = ui.method_menu()  # the methods on offer, from the API's specs, for this page run
    method_field = forms.field_spec(doc, "method", "method")
    clone = launch_extras.cloned_run()  # ?clone=ID: the form starts at that run's values
    methods = choose_methods(menu, clone["method"] if clone else method_field.default if method_field else None)
    field_error("methods")
    choices = model_choices(doc)
    cloned = (LOCAL_MODEL if clone["config"].get("model_path") else clone["config"].get("preset")) if clone else None
    model = st.radio("Model", choices, horizontal=True, index=choices.index(cloned) if cloned in choices else 0,
                     format_func=lambda c: c if c == LOCAL_MODEL else f"Preset {c}", key="launch_model",
                     on_change=forget_preset_fields, args=(doc, choices))
    preset_values = {} if clone else forms.preset_defaults(doc, model)  # a real model's measured lengths, batch, lr
    with st.form("launch_form"):
        config: dict[str, Any] = model_fields(model, doc)
        sections = forms.form_specs(doc, menu, methods)
        basic, expert = forms.tiered(sections)
        config.update(fields_grid(basic, preset_values, clone))
        staleness_text, errors, raw = "", st.session_state.get(ERRORS, {}), {}
        # every other expert field of the schema, generic inputs sent only when changed (dashboard/expert_fields.py)
        shown = {s.path for specs in sections.values() for s in specs} | set(forms.OWN_INPUTS)
        generic = expert_fields.groups(doc, menu, methods, shown, model_tasks(doc, model))
        start = expert_fields.initial_values(generic, preset_values, clone["config"] if clone else None)
        opened = launch_extras.expert_open(clone, errors, expert, lambda path: expert_fields.claims(generic, path))
        with st.expander(forms.EXPERT_SECTION, expanded=opened):
            for section, specs in expert.items():
                st.markdown(f"**{ui.md(section)}**")
                config.update(fields_grid(specs, preset_values, clone))
                if section == forms.OFFPOLICY_SECTION:
                    staleness_text = launch_extras.staleness_sweep_input()
                    field_error(launch_extras.STALENESS_SWEEP_ERROR)
                raw.update(expert_fields.inputs(generic.get(section), start, errors))
            for title, group in generic.items():
                if title not in expert:
                    raw.update(expert_fields.inputs(group, start, errors, heading=True))
            extras = launch_extras.inputs(clone)
            field_error("alerts.rules")
        who = ui.me()
        c1, c2, c3, c4 = st.columns([3, 3, 3, 2])
        seeds_text = c1.text_input("Seeds", value="0", help="Comma-separated; several seeds make a sweep.", key="f_seeds")
        with c1:
            field_error("seeds")
        name = c2.text_input("Name (optional)", key="f_name", help="Default: <method>-seed<seed>.")
        tags_text = c3.text_input("Tags", key="f_tags", help="Comma-separated labels to filter runs by.",
                                  value=", ".join(clone["tags"]) if clone else "")
        cap = f" (yours: {who['max_priority']})" if who and "max_priority" in who else ""
        priority = int(c4.number_input(
            "Priority", min_value=0, max_value=10, step=1, value=int(clone.get("priority") or 0) if clone else 0,
            key="f_priority", help="0-10: the workers start a queue's higher-priority runs first, before the fair share. "
            f"The operator caps it per role{cap}."))
        with c4:
            field_error("priority")
        general = st.session_state.get(ERRORS, {})
        known = {s.path for specs in sections.values() for s in specs} | {"seeds", "methods", "model_path", "task",
                                                                          "train_data", "alerts.rules", "priority",
                                                                          launch_extras.STALENESS_SWEEP_ERROR}
        for path, msg in general.items():
            if path not in known and not expert_fields.claims(generic, path):
                st.error(ui.md(f"{path}: {msg}" if path else msg), icon=":material/error:")
        read_only = who is not None and not who.get("may_submit")  # a viewer token: no Launch (no token: the API says why)
        if read_only:
            st.caption(ui.access_note())
        submitted = st.form_submit_button("Launch", type="primary", icon=":material/rocket_launch:", disabled=read_only)
    if submitted:
        chosen, bad = expert_fields.changed(generic, raw, start)
        config.update(chosen)
        try:
            config.update(launch_extras.config_of(*extras))
        except ValueError as e:
            bad["alerts.rules"] = str(e)
        if bad:
            st.session_state[ERRORS] = bad
        else:
            try:
                config, overrides = forms.swept(config, forms.STALENESS_SWEEP, forms.parse_list(staleness_text, int))
            except ValueError:
                st.session_state[ERRORS] = {launch_extras.STALENESS_SWEEP_ERROR: "the staleness values to sweep must "
                                            "be whole numbers separated by commas, e.g. 0, 1, 2"}
            else:
                submit(methods, dotted.nest({**launch_extras.base_config(clone, menu, methods), **config}), seeds_text,
                       name, tags_text, priority, overrides)
        st.rerun()
    show_result()


main()
