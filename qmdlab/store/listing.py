"""Targets as qmd reads them: ``qmdlab ls`` (a collection, ``collection/prefix``,
``/collection/prefix`` or ``qmd://collection/prefix``) and ``qmdlab context add`` (those, or a
folder on disk inside a collection)."""

from __future__ import annotations

from collections.abc import Sequence

from qmdlab.errors import QmdlabError


def split_ls_target(target: str, names: Sequence[str]) -> tuple[str, str]:
    """``(collection, path prefix)`` of an ``ls`` argument; the longest collection name that the
    target starts with wins (a collection name may hold a ``/``).

    >>> split_ls_target("qmd://notes/2024/", ["notes"]), split_ls_target("notes", ["notes"])
    (('notes', '2024/'), ('notes', ''))
    >>> split_ls_target("/a/b/c.md", ["a", "a/b"])
    ('a/b', 'c.md')
    >>> split_ls_target("nope/x", ["notes"])
    Traceback (most recent call last):
    ...
    qmdlab.errors.QmdlabError: ls nope/x: unknown collection 'nope' (known: notes); see `qmdlab collection list`
    """
    rest = target.removeprefix("qmd://").lstrip("/")
    matches = [n for n in names if rest == n or rest.startswith(n + "/")]
    if not matches:
        shown = ", ".join(names) or "none"
        raise QmdlabError(
            f"ls {target}: unknown collection {rest.split('/', 1)[0]!r} (known: {shown}); see `qmdlab collection list`"
        )
    name = max(matches, key=len)
    return name, rest[len(name) :].lstrip("/")


def context_target(target: str, collections: Sequence) -> str:
    """The ``context add`` target for ``target``: ``/``, a ``qmd://`` URI and a name that starts
    with a collection's name are kept; a folder on disk becomes ``collection/prefix`` of the
    collection whose root holds it (the deepest root).

    >>> from types import SimpleNamespace as C
    >>> from pathlib import Path
    >>> context_target("notes/2024", [C(name="notes", root=Path("/n"))])
    'notes/2024'
    """
    from pathlib import Path

    names = [c.name for c in collections]
    if target == "/" or target.startswith("qmd://") or any(target == n or target.startswith(n + "/") for n in names):
        return target
    folder = Path(target).expanduser()
    if not folder.is_dir():
        return target  # add_context says what is wrong with it
    folder = folder.resolve()
    holders = [c for c in collections if folder == Path(c.root).resolve() or Path(c.root).resolve() in folder.parents]
    if not holders:
        raise QmdlabError(
            f"context add {target}: the folder {folder} is in no collection (known: {', '.join(names) or 'none'}); "
            "add it with `qmdlab collection add PATH` or name the target as COLLECTION/PREFIX"
        )
    best = max(holders, key=lambda c: len(Path(c.root).resolve().parts))
    rel = folder.relative_to(Path(best.root).resolve()).as_posix()
    return best.name if rel == "." else f"{best.name}/{rel}"


__all__ = ["split_ls_target", "context_target"]
