"""Where qmdlab keeps things.

- ``QMDLAB_HOME`` (default ``~/.cache/qmdlab``): indexes live in ``$QMDLAB_HOME/indexes/<name>/``.
- ``QMDLAB_INDEX``: the index used when no ``--index`` is given (a name or a directory path).
  Without either, a project-local index (``.qmdlab/`` in the current folder or one above it, made
  by ``qmdlab init``) is used when there is one, else the index named ``default``.
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


PROJECT_DIR = ".qmdlab"
#: The SQLite database file inside an index directory.
DB_NAME = "index.sqlite"


def project_index(cwd: str | os.PathLike | None = None) -> Path | None:
    """The project-local index of ``cwd`` (default: the current folder): ``.qmdlab/`` holding a
    ``collections.yaml`` there or in a folder above it; ``None`` when there is none."""
    try:
        here = Path(cwd or os.getcwd()).resolve()
    except OSError:  # the current folder was removed
        return None
    for folder in (here, *here.parents):
        cand = folder / PROJECT_DIR
        if (cand / "collections.yaml").is_file():
            return cand
    return None


def resolve_index_dir(name_or_path: str | os.PathLike | None = None) -> Path:
    """Map an index name or path to its directory.

    A value containing a path separator, starting with ``.``/``~``, or naming an existing
    directory is a path; anything else is a name under ``$QMDLAB_HOME/indexes``.

    >>> import os; saved = dict(os.environ)
    >>> os.environ["QMDLAB_HOME"] = "/home/me/.qmdlab"; os.environ.pop("QMDLAB_INDEX", None) and None
    >>> str(resolve_index_dir("notes"))
    '/home/me/.qmdlab/indexes/notes'
    >>> str(resolve_index_dir("/data/idx"))
    '/data/idx'
    >>> os.environ.clear(); os.environ.update(saved)
    """
    value = name_or_path if name_or_path is not None else os.environ.get("QMDLAB_INDEX")
    if value is None or value == "":
        local = project_index()
        if local is not None:
            return local
        value = "default"
    text = str(value)
    if os.sep in text or text.startswith((".", "~")) or Path(text).is_dir():
        # links above the folder are resolved, the folder itself is kept: a linked project
        # ``.qmdlab`` is still seen as one (``qmdlab.store.trust.check_index_links``)
        path = Path(os.path.abspath(Path(text).expanduser()))
        return path.parent.resolve() / path.name if path.name else path
    return home() / "indexes" / text


_ACTIVE_INDEX: Path | None = None


def set_active_index(index_dir: str | os.PathLike | None) -> None:
    """Name the index the running command works on (the CLI sets it from ``--index``): its
    ``collections.yaml`` ``models:`` are read over ``$QMDLAB_HOME/models.yaml``
    (:func:`qmdlab.models.registry.resolve_refs`). ``None``: no index."""
    global _ACTIVE_INDEX
    _ACTIVE_INDEX = Path(index_dir) if index_dir is not None else None


def active_index() -> Path | None:
    """The directory :func:`set_active_index` named, if any."""
    return _ACTIVE_INDEX


def existing_indexes() -> list[str]:
    """Names of the indexes under ``$QMDLAB_HOME/indexes`` (folders holding an ``index.sqlite``)."""
    root = home() / "indexes"
    try:
        return sorted(p.name for p in root.iterdir() if (p / "index.sqlite").is_file())
    except OSError:
        return []
