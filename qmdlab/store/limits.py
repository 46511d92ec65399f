"""Capacity limits of one index and of one query (capacity gates).

qmdlab is an exact, in-process engine: every active document sits in one SQLite file, every
chunk vector of the current embedder is loaded into one float32 matrix, and a query runs its
stages one after another. The limits below are where that design stops being comfortable on
a laptop; past them a stage degrades instead of failing, and every crossing is said out loud.

==================  ==========================  ==================================================
limit               default                     past the limit
==================  ==========================  ==================================================
``documents``       250,000 active documents    ``update`` skips further *new* files (reason
                                                ``capacity``); changed files keep their old version
``chunks``          2,000,000 chunks            same as ``documents``, counted in chunks
``vector_bytes``    4 GiB (float32 matrix)      vector search is refused; the pipeline drops its
                                                vector lists with a note, ``vsearch`` says why
``query_ms``        30,000 ms per query         the pipeline skips the rerank stage (fusion order
                                                is kept) once retrieval has used the budget
==================  ==========================  ==================================================

At :data:`WARN_FRACTION` (80 %) of a limit a warning is given: ``update`` prints it, and the
pipeline records it in ``trace.notes`` (stage ``capacity``). Each limit can be changed with an
environment variable (:data:`ENV`), e.g. ``QMDLAB_MAX_DOCUMENTS=500000``.

Parser limits (input that arrives with a note, a config or a request; fixed, not tunable):
what a hostile or broken file can cost is bounded before it is parsed, so no note or config
can stall ``update`` or a server, whatever it holds.

==========================  ==================  ==================================================
limit                       value               past the limit
==========================  ==================  ==================================================
front matter block          64 KiB              the note is skipped (reason ``frontmatter``)
front matter YAML nodes     10,000 (aliases     the note is skipped (reason ``frontmatter``); an
                            counted expanded)   alias bomb is refused before it is built
tags of one note            1,000               the note is skipped (reason ``frontmatter``)
YAML nesting                100 levels          as the node limit
a config file               1 MiB               one-line :class:`~qmdlab.errors.ConfigError`
config YAML nodes           100,000 (expanded)  one-line :class:`~qmdlab.errors.ConfigError`
one glob                    1,024 characters    refused with one line (a mask, an ignore, a
                                                ``multi-get`` pattern)
globs ``{a,b}`` expands to  256                 ``import-qmd`` leaves the collection out
glob wildcards that can     2                   refused with one line: the pattern is
backtrack                                       simplified or rewritten first (see
                                                :func:`qmdlab.store.scan.glob_regex`)
==========================  ==================  ==================================================
"""

from __future__ import annotations

import os
from typing import NamedTuple

from qmdlab.errors import ConfigError, StoreError

WARN_FRACTION = 0.8
MAX_DOCUMENTS = 250_000
MAX_CHUNKS = 2_000_000
MAX_VECTOR_BYTES = 4 * 1024**3
QUERY_TIME_BUDGET_MS = 30_000.0

DEFAULTS: dict[str, float] = {
    "documents": MAX_DOCUMENTS,
    "chunks": MAX_CHUNKS,
    "vector_bytes": MAX_VECTOR_BYTES,
    "query_ms": QUERY_TIME_BUDGET_MS,
}
ENV: dict[str, str] = {
    "documents": "QMDLAB_MAX_DOCUMENTS",
    "chunks": "QMDLAB_MAX_CHUNKS",
    "vector_bytes": "QMDLAB_MAX_VECTOR_BYTES",
    "query_ms": "QMDLAB_QUERY_BUDGET_MS",
}
UNITS = {"documents": "documents", "chunks": "chunks", "vector_bytes": "bytes", "query_ms": "ms"}


#: Parser limits (see the module notes): front matter and configs are parsed within them.
MAX_FRONT_MATTER_BYTES = 64 * 1024
MAX_FRONT_MATTER_NODES = 10_000
MAX_TAGS = 1_000
MAX_YAML_DEPTH = 100
MAX_CONFIG_BYTES = 1024 * 1024
MAX_CONFIG_NODES = 100_000
MAX_GLOB_CHARS = 1_024
MAX_BRACE_EXPANSIONS = 256
MAX_GLOB_BACKTRACKING = 2


class CapacityError(StoreError):
    """A capacity limit is exceeded and the operation cannot degrade any further."""


def limit(kind: str) -> float:
    """The current limit of ``kind`` (the environment override, else the default).

    >>> import os; os.environ.pop("QMDLAB_MAX_CHUNKS", None) and None
    >>> limit("chunks")
    2000000
    """
    if kind not in DEFAULTS:
        raise ValueError(f"unknown capacity kind {kind!r}; one of {', '.join(DEFAULTS)}")
    raw = os.environ.get(ENV[kind])
    if raw is None or not raw.strip():
        return DEFAULTS[kind]
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(
            f"${ENV[kind]}={raw!r} is not a number; set it to a limit in {UNITS[kind]} or unset it"
        ) from None
    if value < 0:
        raise ConfigError(f"${ENV[kind]}={raw!r} is negative; set a limit >= 0 or unset it")
    return int(value) if kind != "query_ms" else value


class Check(NamedTuple):
    """One measurement against its limit: ``level`` is ``ok``, ``warn`` (≥ 80 %) or ``over`` (> 100 %)."""

    kind: str
    value: float
    limit: float
    level: str

    @property
    def message(self) -> str:
        """A one-line, actionable description (empty when ``ok``).

        >>> Check("documents", 850, 1000, "warn").message
        'documents at 85% of the capacity limit (850 of 1000 documents); raise $QMDLAB_MAX_DOCUMENTS if the machine allows'
        """
        if self.level == "ok":
            return ""
        pct = 100.0 * self.value / self.limit if self.limit else float("inf")
        state = "over" if self.level == "over" else "at"
        pct_text = f"{pct:.0f}%" if pct != float("inf") else "∞%"
        return (
            f"{self.kind} {state} {pct_text} of the capacity limit ({_fmt(self.value)} of {_fmt(self.limit)} "
            f"{UNITS[self.kind]}); raise ${ENV[self.kind]} if the machine allows"
        )


def _fmt(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


def check(kind: str, value: float, lim: float | None = None) -> Check:
    """Compare ``value`` with the limit of ``kind``.

    >>> [check("documents", v, 1000).level for v in (799, 800, 1000, 1001)]
    ['ok', 'warn', 'warn', 'over']
    >>> check("query_ms", 0.5, 0).level
    'over'
    """
    lim = limit(kind) if lim is None else lim
    if value > lim:
        level = "over"
    elif value >= WARN_FRACTION * lim and value > 0:
        level = "warn"
    else:
        level = "ok"
    return Check(kind, value, lim, level)


__all__ = [
    "WARN_FRACTION",
    "MAX_DOCUMENTS",
    "MAX_CHUNKS",
    "MAX_VECTOR_BYTES",
    "QUERY_TIME_BUDGET_MS",
    "MAX_FRONT_MATTER_BYTES",
    "MAX_FRONT_MATTER_NODES",
    "MAX_TAGS",
    "MAX_YAML_DEPTH",
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_NODES",
    "MAX_GLOB_CHARS",
    "MAX_BRACE_EXPANSIONS",
    "MAX_GLOB_BACKTRACKING",
    "ENV",
    "index_notes",
    "query_budget_note",
    "CapacityError",
    "Check",
    "check",
    "limit",
]


def index_notes(index, embedder=None) -> list[str]:
    """Capacity warnings of an index for a query trace: one message per limit at ≥ 80 %.

    Documents and chunks are checked always; the vector matrix when ``embedder`` is given
    (past its limit the vector lists are dropped by retrieval, which notes why).
    """
    fp = getattr(embedder, "fingerprint", None) if embedder is not None else None
    capacity = getattr(index, "capacity", None)
    if capacity is None:  # a stand-in index without capacity accounting
        return []
    return [c.message for c in capacity(fp) if c.level != "ok"]


def query_budget_note(elapsed_ms: float) -> tuple[str, str] | None:
    """``(level, message)`` when a query has used ≥ 80 % of its time budget, else ``None``.

    >>> import os; os.environ["QMDLAB_QUERY_BUDGET_MS"] = "100"
    >>> query_budget_note(10), query_budget_note(90)[0], query_budget_note(150)[0]
    (None, 'warn', 'over')
    >>> del os.environ["QMDLAB_QUERY_BUDGET_MS"]
    """
    chk = check("query_ms", elapsed_ms)
    if chk.level == "ok":
        return None
    return chk.level, chk.message
