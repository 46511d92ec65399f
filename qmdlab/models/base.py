"""The three model roles behind tiny interfaces (docs/design.md, models).

Every backend (llama.cpp, the deterministic fakes, the caching wrappers) satisfies one of
these protocols; the pipeline only ever sees the protocol. ``model_id`` names the model,
``fingerprint`` additionally pins everything that changes its outputs (templates, sampling,
chunking), so stored vectors and cached LLM outputs are invalidated exactly when they must be.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Optional, Protocol, runtime_checkable

import numpy as np

ROLES = ("embed", "expand", "rerank")


@runtime_checkable
class Embedder(Protocol):
    """Text → L2-normalised vector. Owns its query/document input templates."""

    model_id: str
    dim: int
    fingerprint: str

    def embed_query(self, text: str) -> np.ndarray:
        """One query → ``(dim,)`` float32 vector, L2-normalised."""

    def embed_documents(self, docs: Sequence[tuple[str, str]]) -> np.ndarray:
        """``(title, text)`` pairs → ``(n, dim)`` float32 matrix, rows L2-normalised."""


class ExpandResult(NamedTuple):
    """What an expander generated, kept and dropped.

    Attributes
    ----------
    raw : str
        The text the model produced (grammar-constrained for llama.cpp backends).
    lines : list of (type, text)
        Parsed lines, ``type`` in ``{"lex", "vec", "hyde"}``, in generation order.
    dropped : list of (line, reason)
        Lines that did not survive parsing, with a short reason.
    """

    raw: str
    lines: list[tuple[str, str]]
    dropped: list[tuple[str, str]]


@runtime_checkable
class Expander(Protocol):
    """Query → typed ``lex``/``vec``/``hyde`` lines."""

    model_id: str
    fingerprint: str

    def expand(self, query: str, *, intent: Optional[str] = None) -> ExpandResult: ...


@runtime_checkable
class Reranker(Protocol):
    """``(query, text)`` → P(yes) in [0, 1], many texts per call."""

    model_id: str
    fingerprint: str

    def score(self, query: str, texts: Sequence[str]) -> list[float]: ...


class ModelSet(NamedTuple):
    """The models of one pipeline; any role may be ``None`` (that stage is skipped and noted).

    >>> ModelSet(None, None, None).roles()
    {'embed': None, 'expand': None, 'rerank': None}
    """

    embedder: Optional[Embedder]
    expander: Optional[Expander]
    reranker: Optional[Reranker]

    def roles(self) -> dict:
        """The models keyed by role name (``embed``, ``expand``, ``rerank``)."""
        return dict(zip(ROLES, self))

    def close(self) -> None:
        """Release loaded weights of every model that can release them."""
        for m in self:
            release = getattr(m, "release", None)
            if callable(release):
                release()


def l2_normalize(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (all-zero rows stay zero), as float32.

    >>> l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]])).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]
    """
    m = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(m, axis=-1, keepdims=True)
    norms[norms == 0] = 1.0
    return (m / norms).astype(np.float32)


def make_fingerprint(model_id: str, **parts) -> str:
    """``"{model_id}#{sha256(parts)[:12]}"``: readable, and different whenever any part differs.

    >>> make_fingerprint("pkg:m", template=("{query}", "{text}"), chunking={"size": 3600})
    'pkg:m#5fc8a74aed3e'
    >>> make_fingerprint("pkg:m", chunking={"size": 3600}) == make_fingerprint("pkg:m", chunking={"size": 900})
    False
    """
    import hashlib
    import json

    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=repr)
    return f"{model_id}#{hashlib.sha256(blob.encode('utf-8')).hexdigest()[:12]}"
