"""A generated task (arithmetic, countdown) spoken to a real chat model.

The tiny presets read ``37+85=`` in their own characters and answer the bare digits. A real
model reads a question in words through its chat template and answers in free text, so:

- the problem stays the same object (``Problem.prompt`` is the compact ``37+85=``, so streams,
  benchmarks, held-out sets and stable ids are those of the char presets), and only its
  encoding changes: the task's ``question(problem)`` in words, as the user's message of the
  model's chat template with the generation prompt, tokenized by the model's own tokenizer;
- the verifier reads the *final* answer out of free text (for arithmetic the number a marker
  such as ``=`` or ``answer is`` introduces, :func:`final_number`; for countdown the last
  expression; each task's ``score_text``), never evaluating text as code.

The chat template's own system prompt is kept (SmolLM2's names the model); the instruction that
asks for a bare answer is in the user's message, where the measured base accuracy was highest
(docs/tasks.md §5).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from trainer.tasks.math import HFTokenizer

_INT = r"(-?\d+(?:,\d{3})*)(?!,?\d|\.\d)"  # 1,234 is one integer; 1.5 is none
# A number right after "=", "is" or "answer(:)" (through spaces, `$` and `**`), or a lone number.
_MARKED = re.compile(r"(?:=|\bis\b|\banswer\b\s*:?)\s*[$*]*\s*" + _INT, re.IGNORECASE)
_LONE = re.compile(r"\s*[$*]*\s*" + _INT + r"\s*[$*.]*\s*")


class ChatFormat:
    """A Hugging Face tokenizer with a chat template (``hf``), as the generated tasks use it."""

    def __init__(self, hf: Any, shots: tuple[tuple[str, str], ...] = ()):
        if not getattr(hf, "chat_template", None):
            raise ValueError("a generated task needs a chat template to talk to a real model; this tokenizer has none")
        self.hf = hf
        self.tokenizer = HFTokenizer(hf)
        self.shots = shots  # (question, answer) turns shown before the question: the answer's form by example
        self.render = lru_cache(maxsize=65536)(self._render)

    def _render(self, question: str) -> str:
        turns = [m for q, a in self.shots for m in ({"role": "user", "content": q}, {"role": "assistant", "content": a})]
        return self.hf.apply_chat_template([*turns, {"role": "user", "content": question}], tokenize=False,
                                           add_generation_prompt=True)

    def encode(self, question: str) -> list[int]:
        # The template writes its own special tokens as text: none are added on top.
        return list(self.hf.encode(self.render(question), add_special_tokens=False))


def final_number(text: str) -> int | None:
    """The answer a free-text response gives, or None: the whole response when it is one integer
    (``1,234`` reads as 1234), else the integer after the last ``=``, ``is`` or ``answer:``.

    Not simply the last number written: a response that restates the question ("0 + 1 is
    zero") would score its own operands. Numbers that no marker introduces never count."""
    lone = _LONE.fullmatch(text)
    found = [lone.group(1)] if lone else _MARKED.findall(text)
    return int(found[-1].replace(",", "")) if found else None
