"""The docs a newcomer reads first stay true to the code: README.md and docs/*.md name only
paths that exist, every `aero` command line in their code blocks parses against the real Typer
app (parsed only: no command runs), the layouts list every method module, and the text speaks
of the code, not of how it was written. BENCHMARKS.md: its history sections are dated, newest
first, and the commands of "Today's figures" name paths that exist."""

from __future__ import annotations

import re
import shlex
from datetime import date
from pathlib import Path

import pytest
from typer.main import get_command

from cli.main import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BENCHMARKS = ROOT / "BENCHMARKS.md"

# A path the docs name starts at one of the repository's top-level folders. Prose also names
# other projects' files (verl's `verl/trainer/...`, the authors' `recipe/...`), so a path must
# not continue a longer one.
TOP = ("backend", "benchmarks", "cli", "common", "dashboard", "docker", "docs", "examples", "scripts", "tests",
       "trainer", "worker", r"\.ci")
PATH = re.compile(r"(?<![\w./-])(?:%s)/[\w./<>*-]*" % "|".join(TOP))
# Placeholders stand for any name: `<resource>`, `*`, an all-capitals word (`trainer/assets/PRESET`).
PLACEHOLDER = re.compile(r"<[^>/]*>|\b[A-Z][A-Z0-9_]+\b")
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
# How a doc drifts into a work journal: words that only meant something to whoever wrote them, and
# the team's own notes outside the repository (spelt in pieces so this file does not cite them either)
TEAM_NOTES = "|".join(re.escape(p) for p in (".." + "/shared", "DESIGN" + ".md"))
JOURNAL = re.compile(r"\b(?:the|this) issue\b|\bissue (?:target|\d+)|\bthis session\b|\bsecond session\b|\bthis stop\b"
                     r"|\bthis change\b|" + TEAM_NOTES, re.IGNORECASE)
DATED = re.compile(r"^## .*\((\d{4}-\d\d-\d\d)[,)]")


def code_blocks(text: str) -> list[str]:
    """The contents of the fenced blocks of a markdown text."""
    return re.findall(r"^ *```[^\n]*\n(.*?)^ *```", text, flags=re.MULTILINE | re.DOTALL)


def tree_paths(block: str) -> list[str]:
    """The paths a layout block names: `trainer/` at column 0, its entries two spaces in
    (deeper-indented lines continue a description)."""
    lines = block.splitlines()
    if not lines or not re.match(r"[\w.-]+/ ", lines[0]):
        return []
    out, parent = [], ""
    for line in lines:
        indent = len(line) - len(line.lstrip())
        name = line.split()[0] if line.strip() else ""
        if indent == 0:
            parent = name if name.endswith("/") else ""
            out.append(name)
        elif indent == 2 and parent:
            out.append(parent + name)
    return out


def named_paths(text: str) -> list[str]:
    paths = PATH.findall(text) + [p for block in code_blocks(text) for p in tree_paths(block)]
    return [p.rstrip(".") for p in paths]


def exists(path: str) -> bool:
    pattern = PLACEHOLDER.sub("*", path).rstrip("/")
    return any(ROOT.glob(pattern)) if "*" in pattern else (ROOT / pattern).exists()


def missing_paths(doc: Path, text: str) -> list[str]:
    bad = [p for p in named_paths(text) if not exists(p)]
    links = [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]  # relative links only
    return bad + [t for t in links if not (doc.parent / t).exists()]


def test_the_path_scan_finds_what_it_looks_for():
    text = ("`trainer/no_such.py`, trainer/spec/config.py, verl/trainer/ppo/x.py (verl's), [a](nope.md),\n"
            "backend/api/routes/<resource>.py, trainer/assets/PRESET\n"
            "```\ntrainer/  the engine\n  gone.py  a module\n    its description goes on\n```\n")
    assert missing_paths(ROOT / "docs" / "x.md", text) == ["trainer/no_such.py", "trainer/gone.py", "nope.md"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_path_a_doc_names_exists(doc):
    assert missing_paths(doc, doc.read_text()) == []


def shell_tokens(block: str) -> list[str]:
    """Shell words and operators, line by line ("\\n" ends each), `# comments` dropped. A line
    that does not lex (prose, JSON inside a quoted curl body) gives nothing: it holds no command."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        try:
            out += [*lexer, "\n"]
        except ValueError:  # no closing quotation
            out.append("\n")
    return out


def aero_commands(block: str) -> list[list[str]]:
    """The `aero` invocations of a shell block, as argument lists after `aero`. Lines continued
    with a backslash are joined; commands are split at newlines, pipes, `&&`, `;`, `$(...)` and
    at ` / ` (`aero token list / aero token revoke NAME` gives two); `VAR=value` prefixes and
    `docker compose exec SERVICE` are dropped; `<placeholder>` arguments become 1 (an id, a name)."""
    commands, words = [], []
    for token in shell_tokens(block):
        if re.fullmatch(r"[;&|()\n]+|/", token):  # an operator run (`&&`, `)|`) is one token
            commands.append(words[4:] if words[:3] == ["docker", "compose", "exec"] else words)
            words = []
        elif words or not re.match(r"[A-Za-z_]\w*=", token):
            words.append(re.sub(r"^<[^>]+>$", "1", token))
    return [w[1:] for w in commands if w and (w[0] == "aero" or w[0].endswith("/bin/aero"))]


def resolve(args: list[str]) -> tuple[object, list[str], list[str]]:
    """Walk the subcommand words down from the root group: (command, its name words, the rest).
    Groups are told by their `commands` (Typer now vendors its own click, so no isinstance)."""
    command, path = get_command(app), ["aero"]
    while getattr(command, "commands", None) and args and not args[0].startswith("-"):
        command = command.commands.get(args[0])
        assert command is not None, f"no command `{' '.join(path)} {args[0]}`"
        path, args = [*path, args[0]], args[1:]
    return command, path, args


def parse_error(args: list[str]) -> str | None:
    """None if `aero ARGS` parses: the subcommand exists, every flag is one of its own, values
    convert and required arguments are there. Parsing calls no command callback."""
    try:
        command, path, rest = resolve(args)
        if not getattr(command, "commands", None):
            command.make_context(" ".join(path), rest)
    except Exception as e:  # noqa: BLE001 - a usage error of the click Typer vendors, or resolve's
        return f"{type(e).__name__}: {e}"
    return None


def test_the_command_parser_finds_what_it_looks_for():
    block = ("AERO_X=1 aero train --steps 3 \\\n  --method aero   # a comment's --bad flag\n"
             "aero token list / aero token revoke <name> && echo $(aero runs --status running)\n"
             "python -m x --aero 1 | grep aero\ndocker compose exec api aero audit\n")
    assert aero_commands(block) == [["train", "--steps", "3", "--method", "aero"], ["token", "list"],
                                    ["token", "revoke", "1"], ["runs", "--status", "running"], ["audit"]]
    assert parse_error(["train", "--steps", "3"]) is None
    assert "--no-such-flag" in parse_error(["train", "--no-such-flag"])
    assert "no-such-command" in parse_error(["no-such-command"])
    assert parse_error(["train", "--steps", "three"])  # a value that does not convert


def test_every_aero_command_in_a_docs_code_block_parses():
    commands = [(doc.name, args) for doc in DOCS for block in code_blocks(doc.read_text())
                for args in aero_commands(block)]
    assert len(commands) > 40  # the scan still sees the docs' commands
    assert [(name, args, err) for name, args in commands if (err := parse_error(args))] == []


def test_the_layouts_list_every_method_module():
    """README's and architecture.md's layout trees name each module that registers a method."""
    modules = sorted(p.stem for p in (ROOT / "trainer" / "methods").glob("*.py")
                     if "register(MethodSpec(" in p.read_text())
    for doc in ("README.md", "docs/architecture.md"):
        tree = next(b for b in code_blocks((ROOT / doc).read_text()) if b.startswith("trainer/"))
        entry = re.search(r"^  methods/.*?(?=^  \S)", tree, flags=re.MULTILINE | re.DOTALL)[0]
        assert [m for m in modules if not re.search(rf"\b{m}\b", entry)] == [], doc


@pytest.mark.parametrize("doc", [*DOCS, BENCHMARKS], ids=lambda p: p.name)
def test_the_docs_read_as_docs_not_as_a_journal(doc):
    assert JOURNAL.findall(doc.read_text()) == []


def benchmark_sections(text: str) -> list[str]:
    return re.findall(r"^## .*", text, flags=re.MULTILINE)


def test_benchmark_history_is_dated_newest_first():
    """Below "Today's figures" and "Regression checks", each section's heading carries the date it
    was measured, `## Title (YYYY-MM-DD)`, and no section is older than the one after it."""
    history = [h for h in benchmark_sections(BENCHMARKS.read_text())
               if h not in ("## Today's figures", "## Regression checks")]
    assert [h for h in history if not DATED.match(h)] == []
    dates = [date.fromisoformat(DATED.match(h)[1]) for h in history]
    assert dates == sorted(dates, reverse=True), history


def test_todays_benchmark_figures_are_dated_and_their_commands_name_paths_that_exist():
    """One row per subject, each with its date; a before/after pair of one change belongs to
    "Regression checks", not here."""
    text = BENCHMARKS.read_text()
    table = text.split("## Today's figures", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows
    assert [r for r in rows if not re.search(r"\d{4}-\d\d-\d\d", r) or "back to back" in r] == []
    assert [p for row in rows for p in named_paths(row.split(" | ")[-1]) if not exists(p)] == []
