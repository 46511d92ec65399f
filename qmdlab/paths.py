"""Where qmdlab keeps things.

- ``QMDLAB_HOME`` (default ``~/.cache/qmdlab``): indexes live in ``$QMDLAB_HOME/indexes/<name>/``.
- ``QMDLAB_INDEX``: the index used when no ``--index`` is given (a name or a directory path).
- ``QMDLAB_CACHE`` (default ``~/.cache/qmdlab/models``): downloaded / assembled model files.
  Deliberately *not* under ``QMDLAB_HOME`` so tests that isolate the index still find the models.
"""
from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("QMDLAB_HOME") or Path.home() / ".cache" / "qmdlab").expanduser()


def model_cache_dir() -> Path:
    return Path(os.environ.get("QMDLAB_CACHE") or Path.home() / ".cache" / "qmdlab" / "models").expanduser()


def resolve_index_dir(name_or_path: str | os.PathLike | None = None) -> Path:
    """Map an index name or path to its directory.

    A value containing a path separator, starting with ``.``/``~``, or naming an existing
    directory is a path; anything else is a name under ``$QMDLAB_HOME/indexes``.

    >>> import os; os.environ["QMDLAB_HOME"] = "/tmp/qh"; os.environ.pop("QMDLAB_INDEX", None) and None
    >>> str(resolve_index_dir("notes"))
    '/tmp/qh/indexes/notes'
    >>> str(resolve_index_dir("/data/idx"))
    '/data/idx'
    """
    value = name_or_path if name_or_path is not None else os.environ.get("QMDLAB_INDEX") or "default"
    text = str(value)
    if os.sep in text or text.startswith((".", "~")) or Path(text).is_dir():
        return Path(text).expanduser().resolve()
    return home() / "indexes" / text
