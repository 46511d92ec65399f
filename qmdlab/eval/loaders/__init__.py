"""Suite loaders: read a labelled collection from disk into a :class:`SuiteData`.

Formats: ``qmdlab`` (the default corpus layout), ``smart``, ``trec``, ``beir``, ``jsonl``, and
``qmd-bench`` (a qmd bench fixture file beside a markdown folder; :mod:`.qmdbench`).
:func:`detect_format` guesses the format of a directory from the files it holds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from qmdlab.errors import DataFormatError

from ._common import OfficialSplit, SuiteData, same_text
from .beir import load_beir
from .default import load_default
from .jsonl import load_jsonl
from .qmdbench import load_qmd_bench
from .smart import load_smart
from .trec import load_trec

LOADERS: dict[str, Callable[[Path], SuiteData]] = {
    "qmdlab": load_default,
    "smart": load_smart,
    "trec": load_trec,
    "beir": load_beir,
    "jsonl": load_jsonl,
    "qmd-bench": load_qmd_bench,
}
FORMATS = tuple(LOADERS)


def detect_format(directory: str | Path) -> str:
    """Guess a suite directory's format from its files.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "CISI.ALL").write_text("")
    >>> detect_format(d)
    'smart'
    """
    d = Path(directory)
    names = {p.name for p in d.iterdir()} if d.is_dir() else set()
    if not names:
        raise DataFormatError(d, None, "not a directory or empty", "pass a suite directory")
    if "corpus.jsonl" in names:
        return "beir"
    if any(n.upper().endswith(".ALL") or ".all." in n for n in names):
        return "smart"
    if any(n.startswith("topics") for n in names):
        return "trec"
    if "qrels.txt" in names and "corpus" in names and "docs.jsonl" not in names:
        return "qmdlab"
    if "queries.jsonl" in names:
        return "jsonl"
    raise DataFormatError(d, None, "cannot tell the suite format", "pass --format smart|trec|beir|jsonl|qmdlab")


def load(directory: str | Path, fmt: str | None = None, **options) -> SuiteData:
    """Load ``directory`` in format ``fmt`` (detected when ``None``); ``options`` go to the
    format's loader (e.g. ``qrels_ids="position"`` for :func:`load_smart`)."""
    fmt = fmt or detect_format(directory)
    if fmt not in LOADERS:
        raise DataFormatError(directory, None, f"unknown suite format {fmt!r}", f"use one of {', '.join(FORMATS)}")
    return LOADERS[fmt](Path(directory), **options)


__all__ = [
    "OfficialSplit",
    "SuiteData",
    "FORMATS",
    "LOADERS",
    "detect_format",
    "load",
    "load_beir",
    "load_default",
    "load_jsonl",
    "load_qmd_bench",
    "load_smart",
    "load_trec",
    "same_text",
]
