import json

import pytest

from trainer.tasks.tokenizer import FILENAME, CharTokenizer


def test_fixed_vocabulary_layout():
    tok = CharTokenizer()
    assert (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    assert tok.vocab_size == 19
    assert tok.encode("0") == [3] and tok.encode("9") == [12]
    assert tok.encode("+-*= ?") == [13, 14, 15, 16, 17, 18]


def test_round_trip_without_specials():
    tok = CharTokenizer()
    text = "37+85=122"
    ids = tok.encode(text)
    assert len(ids) == len(text) and min(ids) >= 3
    assert tok.decode(ids) == text


def test_decode_skips_specials_and_stops_at_eos():
    tok = CharTokenizer()
    ids = [tok.bos_id] + tok.encode("12") + [tok.pad_id] + tok.encode("3") + [tok.eos_id] + tok.encode("99")
    assert tok.decode(ids) == "123"
    assert tok.decode([tok.eos_id]) == ""


def test_unknown_character_is_named():
    with pytest.raises(ValueError, match="'x'"):
        CharTokenizer().encode("12x3")


def test_out_of_range_id_is_an_error():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        CharTokenizer().decode([3, 19])


def test_save_load_round_trip(tmp_path):
    tok = CharTokenizer()
    path = tok.save(tmp_path / "ckpt")
    assert path.name == FILENAME and json.loads(path.read_text())["chars"] == tok.chars
    loaded = CharTokenizer.load(tmp_path / "ckpt")
    assert loaded == tok and loaded.encode("7*8=") == tok.encode("7*8=")


def test_load_rejects_missing_and_foreign_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        CharTokenizer.load(tmp_path)
    (tmp_path / FILENAME).write_text(json.dumps({"format": "something-else", "chars": "01"}))
    with pytest.raises(ValueError):
        CharTokenizer.load(tmp_path)
