"""User text (run and sweep names, error texts) reaches the page escaped: as text in st.html,
never as markup, and without links or directives in Markdown."""

from __future__ import annotations



from tests.dashboard.apptest import open_page

from dashboard import ui
from dashboard.method_style import NO_METHODS, MethodStyle

EVIL = "<img src=x onerror=alert(1)>[click](http://evil.example) :red[x] $x$"


def test_helpers():
    assert ui.esc("<b a='1'>&") == "&lt;b a=&#x27;1&#x27;&gt;&amp;"
    assert ui.md("[a](http://x) `c` $y$ \\ z\nw") == "\\[a\\](http://x) \\`c\\` \\$y\\$ \\\\ z w"
    assert "<script>" not in ui.progress_bar(0.5, "aero", NO_METHODS, "<script>alert(1)</script>")
    assert "<i>" not in ui.method_chip("<i>evil</i>", NO_METHODS)
    style = MethodStyle.from_specs([{"name": "x", "label": "<i>evil</i>", "colour": "#000000'><b>", "family": "x"}])
    chip = ui.method_chip("x", style)
    assert "<i>" not in chip and "<b>" not in chip and "background:#7F7F7F" in chip  # a non-hex colour is never drawn


def test_run_name_is_text_in_html_and_markdown(fresh_api, use_api, helpers):
    use_api(fresh_api)
    rid = helpers.add_run(fresh_api.db_url, "aero", steps=10, done=4, status="running", name=EVIL)
    at = open_page("run_detail", {"run": str(rid)})
    bodies = [h.proto.body for h in at.get("html")]
    header = next(b for b in bodies if "<h3" in b)
    assert "<img" not in header and "&lt;img src=x onerror=alert(1)&gt;" in header
    at = open_page("overview")
    links = [n.proto.label for n in _walk(at.main)  # page_link labels are Markdown
             if n.type == "page_link" and n.proto.query_string == f"run={rid}"]
    assert links and "\\[click\\](http://evil.example)" in links[0] and ":red\\[x\\]" in links[0]


def _walk(node):
    yield node
    for key in sorted(getattr(node, "children", None) or {}):
        yield from _walk(node.children[key])
