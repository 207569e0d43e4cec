"""Labels a user gives (run and sweep names, tags) are printed by the CLI, logged and shown in
the dashboard: refuse the characters that can rewrite a terminal or a line of text when printed
raw. Stdlib only (imported by trainer.spec.config, which the backend imports)."""

from __future__ import annotations

# C0 controls (tab and newline included: a label is one line), DEL, C1 controls (U+0080-U+009F;
# U+009B is a one-byte CSI on some terminals) and the bidi embeddings, overrides and isolates
# (U+202A-U+202E, U+2066-U+2069: "Trojan Source" reordering of what is displayed).
FORBIDDEN = frozenset([*range(0x00, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def first_forbidden(text: str) -> str | None:
    """The first forbidden character of ``text``, or None."""
    return next((ch for ch in text if ord(ch) in FORBIDDEN), None)


def no_control_chars(text: str) -> str:
    """Pydantic AfterValidator: ``text`` unchanged, or a ValueError naming the character (pydantic
    adds the field's location, so a 422 says e.g. ``config.name``)."""
    ch = first_forbidden(text)
    if ch is not None:
        raise ValueError(f"control or bidirectional-override characters are not allowed (found U+{ord(ch):04X})")
    return text
