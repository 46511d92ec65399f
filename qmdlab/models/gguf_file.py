"""What a local GGUF file says of itself: the metadata at the head of its header, and the digest a
converter stamped beside it.

A model named by its path (``--embed-model runs/x/model.gguf``, ``QMDLAB_EMBED_MODEL``) has no
registry entry, and its file name need not say what it is: from the name alone, a fine-tuned
EmbeddingGemma saved as ``model.gguf`` would be fed plain text cut at 512 tokens instead of its
prompts. The header's ``general.architecture`` names the family whatever the file is called. And a
file replaced in place (a model trained again into the same folder) keeps its path; the digest stamped
beside it (``model.gguf.sha256``, written by ``qmdlab train embedder``) makes it another model to the
index.

Only the key/value section is read, up to the keys asked for, so a multi-gigabyte file costs a few
kilobytes of reading.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from qmdlab.models.hf import GGUF_MAGIC

#: Byte sizes (``struct`` codes) of GGUF's scalar value types, by type id.
_SCALARS = {
    0: "B",  # uint8
    1: "b",  # int8
    2: "H",  # uint16
    3: "h",  # int16
    4: "I",  # uint32
    5: "i",  # int32
    6: "f",  # float32
    7: "?",  # bool
    10: "Q",  # uint64
    11: "q",  # int64
    12: "d",  # float64
}
_STRING, _ARRAY = 8, 9

#: Embedding template family of a GGUF architecture whose name-based guess can be wrong.
ARCHITECTURE_FAMILIES = {"gemma-embedding": "gemma"}


def _read(f: BinaryIO, fmt: str) -> Any:
    size = struct.calcsize("<" + fmt)
    data = f.read(size)
    if len(data) != size:
        raise ValueError("the GGUF header ends early")
    return struct.unpack("<" + fmt, data)[0]


def _string(f: BinaryIO) -> str:
    n = _read(f, "Q")
    if n > 1 << 24:
        raise ValueError(f"a GGUF string of {n} bytes")
    data = f.read(n)
    if len(data) != n:
        raise ValueError("the GGUF header ends early")
    return data.decode("utf-8", errors="replace")


def _value(f: BinaryIO, vtype: int, keep: bool) -> Any:
    if vtype in _SCALARS:
        return _read(f, _SCALARS[vtype])
    if vtype == _STRING:
        return _string(f)
    if vtype == _ARRAY:
        etype, n = _read(f, "I"), _read(f, "Q")
        if etype in _SCALARS and not keep:  # skipped without parsing (token tables are large)
            f.seek(n * struct.calcsize("<" + _SCALARS[etype]), 1)
            return None
        items = [_value(f, etype, keep) for _ in range(n)]
        return items if keep else None
    raise ValueError(f"unknown GGUF value type {vtype}")


def read_metadata(path: str | Path, keys: Iterable[str]) -> dict[str, Any]:
    """The values of ``keys`` in the GGUF header of ``path``; reading stops once all are found.
    A key the file lacks is absent from the result. Raises :class:`ValueError` when the file is not a
    GGUF file or its header is cut short."""
    want = set(keys)
    found: dict[str, Any] = {}
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ValueError(f"{path} is not a GGUF file (bad magic)")
        version = _read(f, "I")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        _read(f, "Q")  # tensor count
        n_kv = _read(f, "Q")
        for _ in range(n_kv):
            if not want - found.keys():
                break
            key = _string(f)
            vtype = _read(f, "I")
            value = _value(f, vtype, keep=key in want)
            if key in want:
                found[key] = value
    return found


def architecture(path: str | Path) -> str | None:
    """``general.architecture`` of the GGUF file at ``path`` (``None`` when it is missing or the file
    cannot be read as GGUF)."""
    try:
        return read_metadata(path, ["general.architecture"]).get("general.architecture")
    except (OSError, ValueError):
        return None


def stamped_digest(path: str | Path) -> str:
    """The first 12 hex digits of the digest stamped beside ``path`` (``<name>.sha256``), or ``""``."""
    p = Path(path)
    try:
        return p.with_name(p.name + ".sha256").read_text(encoding="utf-8").strip()[:12]
    except OSError:
        return ""


def local_model_id(path: str | Path) -> str:
    """The model id (and so the vector fingerprint's model part) of a GGUF named by its path: the path,
    and the stamped digest when there is one.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     g = Path(d) / "model.gguf"
    ...     bare = local_model_id(g)
    ...     _ = g.with_name("model.gguf.sha256").write_text("d34c31045b83a9c6e7c6\\n")
    ...     bare == str(g), local_model_id(g) == f"{g}@d34c31045b83"
    (True, True)
    """
    digest = stamped_digest(path)
    return f"{path}@{digest}" if digest else str(path)


def weights_identity(path: str | Path) -> str:
    """A cheap identity of a GGUF's weights for a cache key: the stamped digest when there is one, else
    the size and modification time (a file rewritten in place, say by another training run, changes it).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     g = Path(d) / "model.gguf"
    ...     _ = g.write_bytes(b"GGUF")
    ...     first = weights_identity(g)
    ...     _ = g.write_bytes(b"GGUF, retrained")
    ...     _ = g.with_name("model.gguf.sha256").write_text("d34c31045b83a9c6e7c6\\n")
    ...     first != weights_identity(g), weights_identity(g)
    (True, 'd34c31045b83')
    """
    digest = stamped_digest(path)
    if digest:
        return digest
    st = Path(path).stat()
    return f"{st.st_size}-{st.st_mtime_ns}"


__all__ = [
    "ARCHITECTURE_FAMILIES",
    "architecture",
    "local_model_id",
    "read_metadata",
    "stamped_digest",
    "weights_identity",
]
