"""`make test`'s timing pass collects only the files that say ``mark.timing`` (Makefile): a timing
test anywhere else would run in neither pass, so collection refuses it (tests/conftest.py)."""

from pathlib import Path
from types import SimpleNamespace

from tests.conftest import timing_tests_outside_marked_files


def item(path: Path, timing: bool):
    return SimpleNamespace(path=path, nodeid=f"{path.name}::t",
                           get_closest_marker=lambda name: object() if timing and name == "timing" else None)


def test_a_timing_test_in_a_file_without_the_marker_text_is_reported(tmp_path):
    marked, unmarked = tmp_path / "test_a.py", tmp_path / "test_b.py"
    marked.write_text("pytestmark = pytest.mark.timing\n")
    unmarked.write_text("mark = getattr(pytest.mark, 'tim' + 'ing')\n")
    items = [item(marked, True), item(unmarked, True), item(unmarked, False)]
    assert timing_tests_outside_marked_files(items) == ["test_b.py::t"]
