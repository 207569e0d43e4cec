"""The Launch form for aero-mem (dashboard/forms.py): a method whose spec reads the
``aero_mem`` section shows AERO's fields and aero-mem's with train_size, whose 0 means null
(the infinite stream); a launched aero-mem run reaches the API with them."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from streamlit.testing.v1 import AppTest

from dashboard import forms
from dashboard.client import AeroClient
from trainer.methods.aero_mem import AERO_MEM_SECTION

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
MEM = "AERO-mem (prompt memory, beyond the paper)"


@pytest.fixture(scope="module")
def doc(seeded) -> dict:
    return httpx.get(f"{seeded.url}/openapi.json").json()


def test_aero_mem_section_follows_the_spec(doc, seeded):
    menu = forms.MethodMenu.from_specs(AeroClient(seeded.url).methods())
    assert list(forms.form_specs(doc, menu, ["aero-mem-d"])) == ["Training", "AERO sampling (paper defaults)", MEM,
                                                                   "Policy update", "Asynchronous training", "Resources", "Advanced"]
    assert MEM not in forms.form_specs(doc, menu, ["aero"])
    fields = {s.path: s for s in forms.form_specs(doc, menu, ["grpo", "aero-mem"])[MEM]}
    assert set(fields) == {p for p, _ in AERO_MEM_SECTION.form}  # every field is in the schema
    size = fields["train_size"]
    assert (size.type, size.default, size.nullable) == ("integer", None, True) and "epochs" in size.help
    assert (fields["aero_mem.give_up"].type, fields["aero_mem.give_up"].default) == ("boolean", False)
    assert "1 - hope_conf" in fields["aero_mem.hope_tau"].help
    assert forms.from_widget(size, 0) is None and forms.from_widget(size, 1024) == 1024
    steps = forms.field_spec(doc, "steps", "steps")
    assert not steps.nullable and forms.from_widget(steps, 0) == 0  # only nullable fields map 0 to null


def test_launch_sends_aero_mem_fields(fresh_api, use_api):
    use_api(fresh_api)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/launch.py")
    at.run()
    at.selectbox(key="launch_method").set_value("aero-mem").run()
    at.number_input(key="f_steps").set_value(3)
    at.number_input(key="f_batch_prompts").set_value(4)
    at.button[0].click().run()  # train_size left at 0 (null): the API's method rule refuses it
    assert fresh_api.enqueued == [] and any("train_size" in e.value for e in at.error), [e.value for e in at.error]
    at.number_input(key="f_train_size").set_value(256)
    at.checkbox(key="f_aero_mem.give_up").check()
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    [(run_id, _)] = fresh_api.enqueued
    cfg = httpx.get(f"{fresh_api.url}/api/runs/{run_id}").json()["config"]
    assert (cfg["method"], cfg["train_size"], cfg["aero_mem"]["give_up"], cfg["aero"]["n_explore"]) == ("aero-mem", 256, True, 8)
