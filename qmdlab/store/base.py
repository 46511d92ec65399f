"""The typed base of the :class:`~qmdlab.store.Index` mixins.

Each mixin (:mod:`qmdlab.store.content`, ...) is one part of :class:`~qmdlab.store.Index` and uses
attributes that ``Index.__init__`` sets and methods that ``Index`` defines; :class:`IndexBase`
declares them so the mixins are type-checked. It holds annotations only: nothing is set or
defined at run time (the methods are declared for the type checker alone).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from qmdlab.store import limits
    from qmdlab.store.config import Collection
    from qmdlab.store.content import RechunkReport
    from qmdlab.store.vectors import VectorMatrix


class IndexBase:
    """What the mixins use of :class:`~qmdlab.store.Index` (set in ``Index.__init__``)."""

    dir: Path
    db_path: Path
    config_path: Path
    conn: sqlite3.Connection
    _lock: threading.RLock
    _vectors: dict[str, VectorMatrix]  # fingerprint -> the loaded matrix
    _capacity: dict[str | None, tuple[tuple, list]]  # fingerprint -> (limits, checks)
    _data_version: int | None  # PRAGMA data_version when the caches above were loaded

    if TYPE_CHECKING:

        def transaction(self, label: str = "txn") -> AbstractContextManager[sqlite3.Connection]:
            """:meth:`Index.transaction <qmdlab.store.Index.transaction>`."""
            ...

        def check_writable(self, path: Path | None = None) -> None:
            """:meth:`Index.check_writable <qmdlab.store.Index.check_writable>`."""

        def collections(self) -> list[Collection]:
            """:meth:`CatalogMixin.collections <qmdlab.store.catalog.CatalogMixin.collections>`."""
            ...

        def collection(self, name: str) -> Collection:
            """:meth:`CatalogMixin.collection <qmdlab.store.catalog.CatalogMixin.collection>`."""
            ...

        def _coll_clause(
            self, collections: Iterable[str] | None, alias: str = "d", *, scoped: bool = False
        ) -> tuple[str, list[str]]:
            """:meth:`CatalogMixin._coll_clause <qmdlab.store.catalog.CatalogMixin._coll_clause>`."""
            ...

        def capacity(self, fingerprint: str | None = None) -> list[limits.Check]:
            """:meth:`UsageMixin.capacity <qmdlab.store.usage.UsageMixin.capacity>`."""
            ...

        def _drop_stale_caches(self) -> None:
            """:meth:`UsageMixin._drop_stale_caches <qmdlab.store.usage.UsageMixin._drop_stale_caches>`."""

        def vector_capacity(self, fingerprint: str) -> limits.Check:
            """:meth:`UsageMixin.vector_capacity <qmdlab.store.usage.UsageMixin.vector_capacity>`."""
            ...

        def ensure_chunker(self, *, progress: bool = False) -> RechunkReport:
            """:meth:`ContentMixin.ensure_chunker <qmdlab.store.content.ContentMixin.ensure_chunker>`."""
            ...

        def _chunk(self, text: str) -> list:
            """:meth:`ContentMixin._chunk <qmdlab.store.content.ContentMixin._chunk>`."""
            ...

        def _store_content(self, c: sqlite3.Connection, h: str, text: str, chunks: list | None = None) -> int:
            """:meth:`ContentMixin._store_content <qmdlab.store.content.ContentMixin._store_content>`."""
            ...

        @staticmethod
        def _gc(c: sqlite3.Connection) -> None:
            """:meth:`ContentMixin._gc <qmdlab.store.content.ContentMixin._gc>`."""
