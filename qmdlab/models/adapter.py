"""A query-side embedding adapter: a small linear map applied to query vectors only.

An adapter is fitted (``qmdlab train adapter``, :mod:`qmdlab.training.adapter`) on (query,
relevant chunk) pairs against the *stored* document vectors of an embedder, which it never
changes: nothing is embedded again. It works on any embedder (a llama.cpp GGUF, MiniLM, a served
model, the fakes), because it only sees the vectors.

The map is ``q' = normalise(W q)`` with ``W`` a ``d × d`` matrix that starts at the identity,
either full or low-rank (``W = I + U Vᵀ``, ``U`` and ``V`` of shape ``d × r``). On disk it is two
files side by side (:func:`save_adapter`): ``NAME.npz`` (the arrays ``W``, or ``U`` and ``V``)
and ``NAME.json`` (the base embedder's reference, model id and fingerprint, the dimension, the
rank, the arrays' :attr:`~QueryAdapter.digest` and the training record). A path to the folder of
a training run stands for its ``adapter.npz``.

Used through a model reference with a suffix, ``BASE+adapter:PATH`` (``--embed-model
pkg:embeddinggemma-300m-q8_0+adapter:runs/adapter``, ``QMDLAB_EMBED_MODEL``, or ``embed:`` in a
model config); :data:`qmdlab.models.registry.SCHEMES` parses it. :class:`AdaptedEmbedder`
applies the map in :meth:`~AdaptedEmbedder.embed_query` and passes documents through
unchanged. Its fingerprint is the base's plus ``+adapter:<digest>``, so the query memo, the
trace cache and recordings tell it apart from the bare embedder, while the index keeps storing
and reading document vectors under the base's fingerprint
(:func:`qmdlab.store.vectors.document_fingerprint`).

An adapter is refused (:class:`~qmdlab.errors.ModelError` naming the file and the fix) when
its base fingerprint or dimension is not the embedder's: the map means nothing against vectors of
another model, template or chunking.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from qmdlab.errors import ModelError
from qmdlab.models.base import l2_normalize
from qmdlab.store.vectors import QUERY_SIDE_MARK

#: What joins a base reference and an adapter's path in a model reference.
ADAPTER_MARK = "+adapter:"
FORMAT = "qmdlab-query-adapter"
VERSION = 1


def split_adapter_ref(ref: str) -> tuple[str, str]:
    """``(base reference, adapter path)`` of ``BASE+adapter:PATH``.

    >>> split_adapter_ref("pkg:embeddinggemma-300m-q8_0+adapter:runs/adapter")
    ('pkg:embeddinggemma-300m-q8_0', 'runs/adapter')
    >>> split_adapter_ref("fake:keyword+adapter:")
    Traceback (most recent call last):
    ...
    qmdlab.errors.ModelError: 'fake:keyword+adapter:' names no adapter: write BASE+adapter:PATH (PATH: a `qmdlab train adapter` output folder or its adapter.npz)
    """
    base, mark, path = ref.partition(ADAPTER_MARK)
    if not mark or not base.strip() or not path.strip():
        raise ModelError(
            f"{ref!r} names no {'adapter' if not path.strip() else 'base embedder'}: write BASE+adapter:PATH "
            "(PATH: a `qmdlab train adapter` output folder or its adapter.npz)"
        )
    if ADAPTER_MARK in path:
        raise ModelError(f"{ref!r} names two adapters; an embedder takes one (train one adapter on the base)")
    return base.strip(), path.strip()


def adapter_files(path: str | Path) -> tuple[Path, Path]:
    """``(arrays, sidecar)`` of an adapter path: a folder's ``adapter.npz``/``adapter.json``, or
    ``NAME.npz`` (or ``NAME.json``, or ``NAME``) and ``NAME.json``.

    >>> [p.name for p in adapter_files("runs/a/my.npz")], [p.name for p in adapter_files("runs/a/my.json")]
    (['my.npz', 'my.json'], ['my.npz', 'my.json'])
    """
    p = Path(path).expanduser()
    if p.is_dir():
        return p / "adapter.npz", p / "adapter.json"
    stem = p.with_suffix("") if p.suffix in (".npz", ".json") else p
    return stem.with_name(stem.name + ".npz"), stem.with_name(stem.name + ".json")


def array_digest(arrays: Mapping[str, np.ndarray]) -> str:
    """sha256 (16 hex digits) of the arrays' names, shapes and float32 bytes: the same map gives the
    same digest whichever way it was saved.

    >>> array_digest({"W": np.eye(2)}) == array_digest({"W": np.eye(2, dtype=np.float32)})
    True
    >>> array_digest({"W": np.eye(2)}) == array_digest({"W": 2 * np.eye(2)})
    False
    """
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(np.asarray(arrays[name], dtype=np.float32))
        h.update(f"{name}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


@dataclass
class QueryAdapter:
    """A linear map of query vectors: ``W`` (full), or ``I + U Vᵀ`` (low-rank).

    Parameters
    ----------
    arrays : mapping
        ``{"W": (d, d)}`` or ``{"U": (d, r), "V": (d, r)}``, stored as float32.
    base_fingerprint : str
        The fingerprint of the embedder whose vectors it was fitted against.
    base_ref : str
        That embedder's reference (what to pass as ``--embed-model``).
    base_model : str
        That embedder's model id.
    training : dict
        What the trainer records (data, settings, held-back figures).

    Examples
    --------
    >>> a = QueryAdapter.identity(3, base_fingerprint="fake:keyword:x", base_ref="fake:keyword")
    >>> v = np.array([[0.6, 0.8, 0.0]], dtype=np.float32)
    >>> a.apply(v).tolist() == v.tolist(), a.dim, a.rank
    (True, 3, 0)
    >>> QueryAdapter({"W": np.diag([1.0, 0.0, 1.0])}).apply(v).tolist()
    [[1.0, 0.0, 0.0]]
    """

    arrays: Mapping[str, np.ndarray]
    base_fingerprint: str = ""
    base_ref: str = ""
    base_model: str = ""
    training: dict = field(default_factory=dict)
    path: Optional[Path] = None

    def __post_init__(self) -> None:
        self.arrays = {k: np.ascontiguousarray(np.asarray(v, dtype=np.float32)) for k, v in self.arrays.items()}
        keys = set(self.arrays)
        if keys == {"W"}:
            w = self.arrays["W"]
            if w.ndim != 2 or w.shape[0] != w.shape[1] or not w.shape[0]:
                raise ModelError(f"{self._where()}: W has shape {w.shape}, not (d, d)")
        elif keys == {"U", "V"}:
            u, v = self.arrays["U"], self.arrays["V"]
            if u.ndim != 2 or u.shape != v.shape or not u.shape[0]:
                raise ModelError(f"{self._where()}: U {u.shape} and V {v.shape} are not two (d, r) matrices")
        else:
            raise ModelError(f"{self._where()}: holds {sorted(keys)}; an adapter holds W, or U and V")
        if not all(np.isfinite(a).all() for a in self.arrays.values()):
            raise ModelError(f"{self._where()}: holds a NaN or infinite value; train it again")

    def _where(self) -> str:
        return f"query adapter {self.path}" if self.path is not None else "query adapter"

    @classmethod
    def identity(cls, dim: int, rank: int = 0, **meta: Any) -> QueryAdapter:
        """The identity map (full when ``rank`` is 0, else ``U = 0`` and ``V = 0``)."""
        if rank:
            return cls({"U": np.zeros((dim, rank)), "V": np.zeros((dim, rank))}, **meta)
        return cls({"W": np.eye(dim)}, **meta)

    @property
    def dim(self) -> int:
        return int(next(iter(self.arrays.values())).shape[0])

    @property
    def rank(self) -> int:
        """0 for a full matrix, else the rank ``r`` of ``U Vᵀ``."""
        return 0 if "W" in self.arrays else int(self.arrays["U"].shape[1])

    @property
    def digest(self) -> str:
        return array_digest(self.arrays)

    def matrix(self) -> np.ndarray:
        """``W`` as a full ``(d, d)`` float32 matrix."""
        if "W" in self.arrays:
            return self.arrays["W"]
        return (np.eye(self.dim) + self.arrays["U"].astype(np.float64) @ self.arrays["V"].T).astype(np.float32)

    def map(self, vectors: np.ndarray) -> np.ndarray:
        """``W q`` for each row ``q`` (not normalised)."""
        x = np.asarray(vectors, dtype=np.float32)
        if "W" in self.arrays:
            return x @ self.arrays["W"].T
        return x + (x @ self.arrays["V"]) @ self.arrays["U"].T

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        """Rows mapped and L2-normalised again; a row the map leaves as it was is returned as it was
        (so the identity reproduces the embedder's vectors bit for bit)."""
        x = np.asarray(vectors, dtype=np.float32)
        squeeze = x.ndim == 1
        rows = x[None, :] if squeeze else x
        if rows.shape[-1] != self.dim:
            raise ModelError(
                f"{self._where()} maps {self.dim}-d vectors but the embedder gave {rows.shape[-1]}-d ones; "
                f"train an adapter for this embedder (`qmdlab train adapter`) or drop {ADAPTER_MARK}…"
            )
        mapped = self.map(rows)
        same = (mapped == rows).all(axis=1)
        out = np.where(same[:, None], rows, l2_normalize(mapped))
        return out[0] if squeeze else out

    def sidecar(self) -> dict[str, Any]:
        """The JSON written beside the arrays."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "base_ref": self.base_ref,
            "base_model": self.base_model,
            "base_fingerprint": self.base_fingerprint,
            "dim": self.dim,
            "rank": self.rank,
            "digest": self.digest,
            "training": self.training,
        }


def save_adapter(adapter: QueryAdapter, path: str | Path) -> Path:
    """Write ``adapter`` as ``.npz`` + ``.json`` (:func:`adapter_files` of ``path``); returns the ``.npz``."""
    arrays, meta = adapter_files(path)
    arrays.parent.mkdir(parents=True, exist_ok=True)
    with arrays.open("wb") as fh:
        np.savez(fh, allow_pickle=False, **dict(adapter.arrays))
    meta.write_text(json.dumps(adapter.sidecar(), indent=1, default=str) + "\n", encoding="utf-8")
    adapter.path = arrays
    return arrays


def load_adapter(path: str | Path) -> QueryAdapter:
    """The adapter at ``path`` (:func:`adapter_files`), its sidecar checked against its arrays.

    Raises
    ------
    ModelError
        A file is missing or unreadable, the sidecar is not an adapter's, or its digest or
        dimension is not that of the arrays beside it.
    """
    arrays_path, meta_path = adapter_files(path)
    fix = "give the folder `qmdlab train adapter` wrote (its adapter.npz and adapter.json), or train one"
    for p in (arrays_path, meta_path):
        if not p.is_file():
            raise ModelError(f"query adapter {p} does not exist; {fix}")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelError(f"query adapter {meta_path}: cannot read it ({err}); {fix}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ModelError(f'{meta_path} is not a query adapter\'s sidecar (no "format": {FORMAT!r}); {fix}')
    if meta.get("version") != VERSION:
        raise ModelError(
            f"query adapter {meta_path} has version {meta.get('version')!r}, not {VERSION}; train it again"
        )
    try:
        with np.load(arrays_path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as err:
        raise ModelError(f"query adapter {arrays_path}: cannot read it ({err}); {fix}") from None
    adapter = QueryAdapter(
        arrays,
        base_fingerprint=str(meta.get("base_fingerprint", "")),
        base_ref=str(meta.get("base_ref", "")),
        base_model=str(meta.get("base_model", "")),
        training=dict(meta.get("training") or {}),
        path=arrays_path,
    )
    if meta.get("digest") != adapter.digest or meta.get("dim") != adapter.dim:
        raise ModelError(
            f"query adapter {meta_path} describes other arrays (digest {meta.get('digest')!r}, {meta.get('dim')}-d) "
            f"than {arrays_path.name} holds ({adapter.digest}, {adapter.dim}-d); keep the two files of one run together"
        )
    return adapter


def known_dim(embedder: Any) -> Optional[int]:
    """The embedder's dimension when it is known without loading or calling the model (set at
    construction: the registry's known dimension, a fake's vocabulary size), else ``None``."""
    found = vars(embedder).get("dim", vars(embedder).get("_dim")) if hasattr(embedder, "__dict__") else None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


class AdaptedEmbedder:
    """An embedder whose query vectors go through a :class:`QueryAdapter`; documents are the base's.

    Parameters
    ----------
    base : Embedder
        The embedder the adapter was fitted for (its fingerprint must be the adapter's
        ``base_fingerprint``).
    adapter : QueryAdapter
    name : str, optional
        How the adapter is named in ``model_id`` (default its path).

    Raises
    ------
    ModelError
        The base's fingerprint, or (when known without loading the model) its dimension, is not
        the adapter's.

    Examples
    --------
    >>> from qmdlab.models.fakes import KeywordEmbedder
    >>> base = KeywordEmbedder(["git", "rebase"])
    >>> e = AdaptedEmbedder(base, QueryAdapter.identity(2, base_fingerprint=base.fingerprint))
    >>> e.fingerprint.startswith(base.fingerprint + "+adapter:"), e.dim
    (True, 2)
    >>> e.embed_query("git rebase").tolist() == base.embed_query("git rebase").tolist()
    True
    """

    def __init__(self, base: Any, adapter: QueryAdapter, *, name: Optional[str] = None):
        where = f"query adapter {adapter.path}" if adapter.path is not None else "the query adapter"
        path = adapter.path.parent if adapter.path is not None and adapter.path.name == "adapter.npz" else adapter.path
        if adapter.base_fingerprint != base.fingerprint:
            was = adapter.base_ref or adapter.base_model or "another embedder"
            raise ModelError(
                f"{where} was fitted against the vectors of {was} ({adapter.base_fingerprint}), not of "
                f"{base.model_id} ({base.fingerprint}); use it as --embed-model {was}{ADAPTER_MARK}{path}, "
                f"or fit one for this embedder: `qmdlab train adapter --embed-model {base.model_id}`"
            )
        dim = known_dim(base)
        if dim is not None and dim != adapter.dim:
            raise ModelError(
                f"{where} maps {adapter.dim}-d vectors but {base.model_id} gives {dim}-d ones; fit one for "
                f"this embedder: `qmdlab train adapter --embed-model {base.model_id}`"
            )
        self.inner = base
        self.adapter = adapter
        self.model_id = f"{base.model_id}{ADAPTER_MARK}{name or path or adapter.digest}"
        self.fingerprint = f"{base.fingerprint}{QUERY_SIDE_MARK}{adapter.digest}"
        #: What the vector stage notes in a query's trace.
        self.query_note = (
            f"query vectors mapped by the query adapter {name or path or ''} (digest {adapter.digest}, "
            f"{'full' if not adapter.rank else f'rank {adapter.rank}'}, {adapter.dim}-d; documents: "
            f"{base.model_id}'s stored vectors)"
        )

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    def embed_query(self, text: str) -> np.ndarray:
        return self.adapter.apply(self.inner.embed_query(text))

    def embed_documents(self, docs: Sequence[tuple[str, str]]) -> np.ndarray:
        return self.inner.embed_documents(docs)

    def __getattr__(self, name: str) -> Any:
        # release(), prepare(), template, count_tokens … are the base's
        if name in ("inner", "adapter"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def adapted(base: Any, path: str | Path) -> AdaptedEmbedder:
    """``base`` with the adapter at ``path`` (:func:`load_adapter`), named by ``path`` as given."""
    return AdaptedEmbedder(base, load_adapter(path), name=str(path))


__all__ = [
    "ADAPTER_MARK",
    "AdaptedEmbedder",
    "QueryAdapter",
    "adapted",
    "adapter_files",
    "array_digest",
    "load_adapter",
    "save_adapter",
    "split_adapter_ref",
]
