"""The typed base of the :class:`~qmdlab.store.Index` mixins.

Each mixin (:mod:`qmdlab.store.content`, ...) is one part of :class:`~qmdlab.store.Index` and uses
attributes that ``Index.__init__`` sets and methods that ``Index`` defines; :class:`IndexBase`
declares them so the mixins are type-checked. It holds annotations only: nothing is set or
defined at run time (the methods are declared for the type checker alone).
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING


class IndexBase:
    """What the mixins use of :class:`~qmdlab.store.Index` (set in ``Index.__init__``)."""

    conn: sqlite3.Connection
    _lock: threading.RLock

    if TYPE_CHECKING:

        def transaction(self, label: str = "txn") -> AbstractContextManager[sqlite3.Connection]:
            """:meth:`Index.transaction <qmdlab.store.Index.transaction>`."""
            ...
