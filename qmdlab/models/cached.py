"""Caching wrappers: LLM outputs stored in the index's ``llm_cache`` table.

Keys are :func:`qmdlab.store.cache.cache_key` of ``(model fingerprint, role, input, params)``;
the fingerprint already pins the model file, template and sampling config, so a repeated query
makes no model call. ``.calls`` counts calls that reached the wrapped model, ``.items`` the
queries/pairs it computed. A cached value of the wrong shape (an expansion that is not
``{raw, lines, dropped}`` of strings, a score that is not a finite number) is a miss: it is
computed again and replaced, never an error.

:class:`MemoEmbedder` is the in-memory counterpart for query embeddings: a bounded LRU memo
of ``embed_query`` results, so a repeated query (and its repeated expansion lines) is not
embedded again within one process.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from qmdlab.models.base import Embedder, Expander, ExpandResult, Reranker
from qmdlab.store.cache import LLMCache, cache_key


def text_hash(text: str) -> str:
    """sha256 hex of the UTF-8 text (how a chunk enters a rerank cache key).

    >>> text_hash("abc")[:16]
    'ba7816bf8f01cfea'
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _pairs(value: Any) -> Optional[list[tuple[str, str]]]:
    if not isinstance(value, list) or not all(
        isinstance(x, list) and len(x) == 2 and all(isinstance(y, str) for y in x) for x in value
    ):
        return None
    return [(x[0], x[1]) for x in value]


def cached_expansion(hit: Any) -> Optional[ExpandResult]:
    """The :class:`ExpandResult` a cache entry holds, or ``None`` when it is not one.

    >>> cached_expansion({"raw": "lex: a", "lines": [["lex", "a"]], "dropped": []}).lines
    [('lex', 'a')]
    >>> cached_expansion(3), cached_expansion({"raw": "x", "lines": {"a": 1}, "dropped": []})
    (None, None)
    """
    if not isinstance(hit, dict) or not isinstance(hit.get("raw"), str):
        return None
    lines, dropped = _pairs(hit.get("lines")), _pairs(hit.get("dropped"))
    if lines is None or dropped is None:
        return None
    return ExpandResult(hit["raw"], lines, dropped)


def cached_score(hit: Any) -> Optional[float]:
    """The rerank score a cache entry holds, or ``None`` when it is not a finite number.

    >>> cached_score(0.25), cached_score("0.5"), cached_score(float("nan")), cached_score(True)
    (0.25, None, None, None)
    """
    if isinstance(hit, bool) or not isinstance(hit, (int, float)) or not math.isfinite(hit):
        return None
    return float(hit)


class Wrapper:
    """A model wrapper: an attribute it does not set itself (``release()``, ``dim``, ...) is the wrapped model's."""

    inner: Any

    def __getattr__(self, name):
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class CachedModel(Wrapper):
    """What the caching wrappers share: the wrapped model, its cache, the extra cache-key ``params``, the
    wrapped model's id and fingerprint, and the call and item counts (module docs)."""

    role = ""

    def __init__(self, inner: Any, cache: LLMCache, params: Any = None):
        self.inner, self.cache, self.params = inner, cache, params
        self.model_id, self.fingerprint = inner.model_id, inner.fingerprint
        self.calls = 0
        self.items = 0


class CachedExpander(CachedModel):
    """An :class:`~qmdlab.models.base.Expander` whose results are read from/written to ``cache``."""

    role = "expand"
    inner: Expander

    def __init__(self, expander: Expander, cache: LLMCache, params: Any = None):
        super().__init__(expander, cache, params)
        self.last_cached: Optional[bool] = None

    def key(self, query: str, intent: Optional[str] = None) -> str:
        return cache_key(self.fingerprint, self.role, {"query": query, "intent": intent}, self.params)

    def peek(self, query: str, *, intent: Optional[str] = None) -> Optional[ExpandResult]:
        """The cached expansion of ``query``, or ``None`` (no model call either way)."""
        hit = cached_expansion(self.cache.get(self.key(query, intent)))
        if hit is None:  # not cached, or an entry of the wrong shape: computed again
            return None
        self.last_cached = True
        return hit

    def expand(self, query: str, *, intent: Optional[str] = None) -> ExpandResult:
        hit = self.peek(query, intent=intent)
        if hit is not None:
            return hit
        key = self.key(query, intent)
        self.calls += 1
        self.items += 1
        res = self.inner.expand(query, intent=intent)
        self.cache.put(key, self.role, {"raw": res.raw, "lines": res.lines, "dropped": res.dropped})
        self.last_cached = False
        return res


class CachedReranker(CachedModel):
    """A :class:`~qmdlab.models.base.Reranker` that only sends uncached pairs to the model (in one call)."""

    role = "rerank"
    inner: Reranker

    def __init__(self, reranker: Reranker, cache: LLMCache, params: Any = None):
        super().__init__(reranker, cache, params)

    def key(self, query: str, text: str) -> str:
        return cache_key(self.fingerprint, self.role, [query, text_hash(text)], self.params)

    def peek_cached(self, query: str, texts: Sequence[str]) -> Optional[list[tuple[float, bool]]]:
        """``(score, True)`` per text when every pair is cached, else ``None`` (no model call)."""
        keys = [self.key(query, t) for t in texts]
        found = self._found(keys)
        if any(k not in found for k in keys):
            return None
        return [(found[k], True) for k in keys]

    def _found(self, keys: list[str]) -> dict[str, float]:
        """The cached scores of ``keys``; an entry that is not a finite number is a miss."""
        got = self.cache.get_many(list(dict.fromkeys(keys)))
        return {k: s for k, v in got.items() if (s := cached_score(v)) is not None}

    def score_cached(self, query: str, texts: Sequence[str]) -> list[tuple[float, bool]]:
        """``(score, was_cached)`` per text, in order."""
        keys = [self.key(query, t) for t in texts]
        found = self._found(keys)
        todo = list(dict.fromkeys(k for k in keys if k not in found))  # unique misses, first-seen order
        computed: dict[str, float] = {}
        if todo:
            by_key = {k: t for k, t in zip(keys, texts)}
            self.calls += 1
            self.items += len(todo)
            scores = self.inner.score(query, [by_key[k] for k in todo])
            computed = dict(zip(todo, (float(s) for s in scores)))
            self.cache.put_many([(k, self.role, s) for k, s in computed.items()])
        return [(found[k], True) if k in found else (computed[k], False) for k in keys]

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return [s for s, _ in self.score_cached(query, texts)]


class MemoEmbedder(Wrapper):
    """An :class:`~qmdlab.models.base.Embedder` whose ``embed_query`` results are memoised in
    memory (least recently used first out, at most ``maxsize`` texts).

    The memo is keyed by the wrapped model's fingerprint and the query text, and returns a fresh
    copy of the stored vector each time (callers may modify it). Every other attribute
    (``embed_documents``, ``model_id``, ``fingerprint``, ``dim``, ``release()``, ...) is read from
    the wrapped model when asked for, so wrapping loads nothing. ``.query_calls`` counts
    ``embed_query`` calls that reached the wrapped model, ``.query_hits`` those answered from
    the memo.
    """

    inner: Embedder

    def __init__(self, embedder: Embedder, maxsize: int = 1024):
        self.inner = embedder
        self.maxsize = max(0, int(maxsize))
        self._memo: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.query_calls = 0
        self.query_hits = 0

    def embed_query(self, text: str) -> np.ndarray:
        key = (self.inner.fingerprint, text)
        with self._lock:
            hit = self._memo.get(key)
            if hit is not None:
                self._memo.move_to_end(key)
                self.query_hits += 1
                return hit.copy()
            self.query_calls += 1
        vec = self.inner.embed_query(text)
        if self.maxsize:
            stored = np.array(vec, copy=True)
            with self._lock:
                self._memo[key] = stored
                self._memo.move_to_end(key)
                while len(self._memo) > self.maxsize:
                    self._memo.popitem(last=False)
        return vec

    def peek_query(self, text: str) -> Optional[np.ndarray]:
        """A copy of the memoised vector of ``text``, or ``None`` (no model call either way)."""
        key = (self.inner.fingerprint, text)
        with self._lock:
            hit = self._memo.get(key)
            if hit is None:
                return None
            self._memo.move_to_end(key)
            self.query_hits += 1
            return hit.copy()

    def embed_documents(self, docs):
        return self.inner.embed_documents(docs)

    def clear(self) -> None:
        """Forget every memoised query vector."""
        with self._lock:
            self._memo.clear()
