"""Character tokenizer for the embedded arithmetic task.

A fixed, tiny vocabulary (19 ids): the three specials, then one id per character::

    0 <pad>  1 <bos>  2 <eos>  3..12 '0'..'9'  13 '+'  14 '-'  15 '*'  16 '='  17 ' '  18 '?'

It is saved beside a checkpoint as ``char_tokenizer.json`` so a checkpoint directory
carries its own tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIALS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>")
DEFAULT_CHARS: str = "0123456789+-*= ?"
FILENAME = "char_tokenizer.json"
_FORMAT = "aero-lab/char-tokenizer/v1"


class CharTokenizer:
    """``encode`` maps characters to ids (no specials added); ``decode`` skips specials and
    stops at the first EOS, so a padded or over-long generation decodes to its answer."""

    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2

    def __init__(self, chars: str = DEFAULT_CHARS):
        if len(set(chars)) != len(chars):
            raise ValueError(f"CharTokenizer: duplicate characters in {chars!r}")
        self.chars = chars
        self._to_id = {c: i + len(SPECIALS) for i, c in enumerate(chars)}
        self.vocab_size = len(SPECIALS) + len(chars)

    def encode(self, text: str) -> list[int]:
        try:
            return [self._to_id[c] for c in text]
        except KeyError as e:
            raise ValueError(
                f"CharTokenizer cannot encode character {e.args[0]!r} in {text!r}; vocabulary: {self.chars!r}"
            ) from None

    def decode(self, ids: list[int]) -> str:
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i < len(SPECIALS):
                continue
            if i >= self.vocab_size or i < 0:
                raise ValueError(f"CharTokenizer: id {i} is outside the vocabulary (size {self.vocab_size})")
            out.append(self.chars[i - len(SPECIALS)])
        return "".join(out)

    def save(self, directory: str | Path) -> Path:
        """Write ``<directory>/char_tokenizer.json`` (creating the directory); returns its path."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        path = d / FILENAME
        path.write_text(json.dumps({"format": _FORMAT, "specials": list(SPECIALS), "chars": self.chars}))
        return path

    @classmethod
    def load(cls, directory: str | Path) -> "CharTokenizer":
        path = Path(directory) / FILENAME
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: {directory} holds no char tokenizer ({FILENAME})")
        data = json.loads(path.read_text())
        if data.get("format") != _FORMAT or tuple(data.get("specials", ())) != SPECIALS:
            raise ValueError(f"{path}: not a {_FORMAT} file")
        return cls(data["chars"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharTokenizer) and other.chars == self.chars

    def __hash__(self) -> int:
        return hash(self.chars)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size}, chars={self.chars!r})"
