"""The LLM output cache: one table in the index DB, keyed by a hash of
(model fingerprint, role, input, params). ``update`` never touches it (qmd wipes it)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_cache (
    key TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    value TEXT NOT NULL,
    created REAL NOT NULL
);
"""


def cache_key(model_fingerprint: str, role: str, payload: Any, params: Any = None) -> str:
    """Stable key: sha256 of the canonical JSON of the four parts.

    >>> cache_key("m", "rerank", ["q", "h"]) == cache_key("m", "rerank", ["q", "h"], None)
    True
    >>> cache_key("m", "rerank", ["q", "h"]) == cache_key("m2", "rerank", ["q", "h"])
    False
    """
    blob = json.dumps([model_fingerprint, role, payload, params], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class LLMCache:
    """JSON values in ``llm_cache``; safe to share across threads (one lock, short transactions).

    >>> import sqlite3
    >>> c = LLMCache(sqlite3.connect(":memory:", check_same_thread=False))
    >>> k = cache_key("m", "expand", "q")
    >>> c.get(k) is None
    True
    >>> c.put(k, "expand", {"lines": [["lex", "a"]]}); c.get(k)
    {'lines': [['lex', 'a']]}
    >>> c.get_many([k, "nope"]) == {k: {"lines": [["lex", "a"]]}}
    True
    """

    def __init__(self, conn: sqlite3.Connection, read_only: bool = False):
        self.conn = conn
        self.read_only = read_only  # an index on a read-only disk: lookups only, puts are dropped
        self._lock = threading.Lock()
        if not read_only:
            with self._lock:
                conn.executescript(SCHEMA)

    def get(self, key: str) -> Any | None:
        with self._lock:
            row = self.conn.execute("SELECT value FROM llm_cache WHERE key = ?", (key,)).fetchone()
        return None if row is None else _loads(row[0])

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        """Found keys only."""
        out: dict[str, Any] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                part = keys[i : i + 500]
                q = f"SELECT key, value FROM llm_cache WHERE key IN ({','.join('?' * len(part))})"
                for k, v in self.conn.execute(q, part):
                    value = _loads(v)
                    if value is not None:
                        out[k] = value
        return out

    def put(self, key: str, role: str, value: Any) -> None:
        if self.read_only:
            return
        blob = json.dumps(value, ensure_ascii=False)
        with self._lock:
            with self.conn:
                self.conn.execute(
                    "INSERT OR REPLACE INTO llm_cache(key, role, value, created) VALUES (?, ?, ?, ?)",
                    (key, role, blob, time.time()),
                )

    def put_many(self, items: list[tuple[str, str, Any]]) -> None:
        if self.read_only:
            return
        rows = [(k, r, json.dumps(v, ensure_ascii=False), time.time()) for k, r, v in items]
        with self._lock:
            with self.conn:
                self.conn.executemany(
                    "INSERT OR REPLACE INTO llm_cache(key, role, value, created) VALUES (?, ?, ?, ?)", rows
                )

    def count(self, role: str | None = None) -> int:
        with self._lock:
            if role is None:
                return self.conn.execute("SELECT count(*) FROM llm_cache").fetchone()[0]
            return self.conn.execute("SELECT count(*) FROM llm_cache WHERE role = ?", (role,)).fetchone()[0]


def _loads(text: Any) -> Any | None:
    """A cached value; ``None`` (a miss: computed again) for one a damaged file garbled."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None
