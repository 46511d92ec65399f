"""Caching wrappers: LLM outputs stored in the index's ``llm_cache`` table.

Keys are :func:`qmdlab.store.cache.cache_key` of ``(model fingerprint, role, input, params)``;
the fingerprint already pins the model file, template and sampling config, so a repeated query
makes no model call. ``.calls`` counts calls that reached the wrapped model, ``.items`` the
queries/pairs it computed.
"""
from __future__ import annotations

import hashlib
from typing import Any, Optional, Sequence

from qmdlab.models.base import ExpandResult, Expander, Reranker
from qmdlab.store.cache import LLMCache, cache_key


def text_hash(text: str) -> str:
    """sha256 hex of the UTF-8 text (how a chunk enters a rerank cache key).

    >>> text_hash("abc")[:16]
    'ba7816bf8f01cfea'
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CachedExpander:
    """An :class:`~qmdlab.models.base.Expander` whose results are read from/written to ``cache``."""

    role = "expand"

    def __init__(self, expander: Expander, cache: LLMCache, params: Any = None):
        self.inner, self.cache, self.params = expander, cache, params
        self.model_id, self.fingerprint = expander.model_id, expander.fingerprint
        self.calls = 0
        self.items = 0
        self.last_cached: Optional[bool] = None

    def key(self, query: str, intent: Optional[str] = None) -> str:
        return cache_key(self.fingerprint, self.role, {"query": query, "intent": intent}, self.params)

    def expand(self, query: str, *, intent: Optional[str] = None) -> ExpandResult:
        key = self.key(query, intent)
        hit = self.cache.get(key)
        if hit is not None:
            self.last_cached = True
            return ExpandResult(hit["raw"], [tuple(x) for x in hit["lines"]], [tuple(x) for x in hit["dropped"]])
        self.calls += 1
        self.items += 1
        res = self.inner.expand(query, intent=intent)
        self.cache.put(key, self.role, {"raw": res.raw, "lines": res.lines, "dropped": res.dropped})
        self.last_cached = False
        return res

    def __getattr__(self, name):  # delegate release(), stats, ... to the wrapped model
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


class CachedReranker:
    """A :class:`~qmdlab.models.base.Reranker` that only sends uncached pairs to the model (in one call)."""

    role = "rerank"

    def __init__(self, reranker: Reranker, cache: LLMCache, params: Any = None):
        self.inner, self.cache, self.params = reranker, cache, params
        self.model_id, self.fingerprint = reranker.model_id, reranker.fingerprint
        self.calls = 0
        self.items = 0

    def key(self, query: str, text: str) -> str:
        return cache_key(self.fingerprint, self.role, [query, text_hash(text)], self.params)

    def score_cached(self, query: str, texts: Sequence[str]) -> list[tuple[float, bool]]:
        """``(score, was_cached)`` per text, in order."""
        keys = [self.key(query, t) for t in texts]
        found = self.cache.get_many(list(dict.fromkeys(keys)))
        todo = list(dict.fromkeys(k for k in keys if k not in found))  # unique misses, first-seen order
        computed: dict[str, float] = {}
        if todo:
            by_key = {k: t for k, t in zip(keys, texts)}
            self.calls += 1
            self.items += len(todo)
            scores = self.inner.score(query, [by_key[k] for k in todo])
            computed = dict(zip(todo, (float(s) for s in scores)))
            self.cache.put_many([(k, self.role, s) for k, s in computed.items()])
        return [(float(found[k]), True) if k in found else (computed[k], False) for k in keys]

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return [s for s, _ in self.score_cached(query, texts)]

    def __getattr__(self, name):
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
