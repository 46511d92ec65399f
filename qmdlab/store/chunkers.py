"""Selectable chunking strategies (an index-level setting: ``qmdlab update --chunker NAME``).

=====================  ==================================================================================
chunker                what a chunk is
=====================  ==================================================================================
``breakpoints``        qmd's chunker (:func:`qmdlab.store.breakpoints.chunk_spans`): a cut near every
                       ``max_chars`` at the best-scoring break point, 15 % overlap. The default.
``headings``           one section (a heading line up to the next heading of any level, outside code
                       fences); a section shorter than ``min_chars`` joins the next one (a title heading
                       directly followed by a sub-heading is not a chunk of its own) unless the pair
                       would exceed ``max_chars``; the last short one joins the one before when the
                       pair fits ``max_chars``. A section longer than
                       ``max_chars`` is cut inside by ``breakpoints`` (fences and tables kept whole).
                       No overlap between sections.
``fences-and-tables``  blocks (paragraphs between blank lines; every code fence and markdown table one
                       block, whatever blank lines it holds) packed greedily up to ``max_chars``; a
                       block longer than ``max_chars`` is cut by ``breakpoints`` unless it is a fence or
                       table (kept whole: the chunk is then longer than ``max_chars``). No overlap
                       between packed chunks.
=====================  ==================================================================================

Every strategy returns contiguous ``(start, end)`` spans that cover every character of the text
(overlapping only where ``breakpoints`` cuts a long piece). :func:`chunker_fingerprint` names a
strategy, its version and its sizes; the index stores it (``meta.chunker_fingerprint``) and
re-chunks when it changes (:meth:`qmdlab.store.content.ContentMixin.rechunk`), so chunks of two
strategies (or of two versions of one) are never mixed. An index written before the setting existed
holds :data:`LEGACY_FINGERPRINT` (``breakpoints`` version 1: its overlap could start mid-table-row).
"""

from __future__ import annotations

import re

from qmdlab.errors import ConfigError
from qmdlab.store.breakpoints import (
    CHUNK_OVERLAP_CHARS,
    CHUNK_SIZE_CHARS,
    CHUNK_WINDOW_CHARS,
    chunk_spans,
    find_code_fences,
    find_tables,
    heading_paths,
)

CHUNKERS = ("breakpoints", "headings", "fences-and-tables")
DEFAULT_CHUNKER = "breakpoints"
#: Bumped whenever a strategy's output changes (breakpoints 2: the overlap starts on a table row).
VERSIONS = {"breakpoints": 2, "headings": 1, "fences-and-tables": 1}
HEADING_MIN_CHARS = 200  # ~50 tokens: a shorter section joins the next one
LEGACY_FINGERPRINT = f"breakpoints/v1/{CHUNK_SIZE_CHARS}/{CHUNK_OVERLAP_CHARS}/{CHUNK_WINDOW_CHARS}"


def check_chunker(name: str, flag: str = "--chunker") -> str:
    """``name`` if it is a chunker, else a :class:`~qmdlab.errors.ConfigError` naming the choices.

    >>> check_chunker("headings")
    'headings'
    >>> check_chunker("sentences")
    Traceback (most recent call last):
    ...
    qmdlab.errors.ConfigError: --chunker 'sentences': unknown chunker; use one of breakpoints, headings, fences-and-tables
    """
    if name not in CHUNKERS:
        raise ConfigError(f"{flag} {name!r}: unknown chunker; use one of {', '.join(CHUNKERS)}")
    return name


def chunker_fingerprint(
    name: str = DEFAULT_CHUNKER,
    max_chars: int = CHUNK_SIZE_CHARS,
    overlap_chars: int = CHUNK_OVERLAP_CHARS,
    window_chars: int = CHUNK_WINDOW_CHARS,
) -> str:
    """What the stored chunks depend on: strategy, its version and the sizes.

    >>> chunker_fingerprint()
    'breakpoints/v2/3600/540/800'
    >>> chunker_fingerprint("headings")
    'headings/v1/3600/540/800/min200'
    """
    fp = f"{check_chunker(name)}/v{VERSIONS[name]}/{max_chars}/{overlap_chars}/{window_chars}"
    return fp + (f"/min{HEADING_MIN_CHARS}" if name == "headings" else "")


def spans(
    text: str,
    chunker: str = DEFAULT_CHUNKER,
    max_chars: int = CHUNK_SIZE_CHARS,
    overlap_chars: int = CHUNK_OVERLAP_CHARS,
    window_chars: int = CHUNK_WINDOW_CHARS,
) -> list[tuple[int, int]]:
    """``(start, end)`` spans of ``text``'s chunks under ``chunker``.

    >>> t = "# A\\n" + "a" * 250 + "\\n## B\\n" + "b" * 250
    >>> spans(t, "headings"), spans(t, "breakpoints")
    ([(0, 254), (254, 510)], [(0, 510)])
    """
    check_chunker(chunker)
    if chunker == "breakpoints":
        return chunk_spans(text, max_chars, overlap_chars, window_chars)
    bounds = _heading_bounds(text) if chunker == "headings" else _block_bounds(text)
    pieces = list(zip(bounds, bounds[1:]))
    if chunker == "headings":
        groups = _join_short(pieces, HEADING_MIN_CHARS, max_chars)
    else:
        groups = _pack(pieces, max_chars)
    out: list[tuple[int, int]] = []
    for s, e in groups:
        if e - s <= max_chars:
            out.append((s, e))
        else:  # over the cap: breakpoints inside the piece (fences and tables never cut)
            out.extend((s + a, s + b) for a, b in chunk_spans(text[s:e], max_chars, overlap_chars, window_chars))
    return out


def _heading_bounds(text: str) -> list[int]:
    """0, the newline before every heading outside fences, ``len(text)``."""
    cuts = {pos - 1 for pos, _ in heading_paths(text) if pos > 0}
    return sorted({0, len(text)} | cuts)


def _block_bounds(text: str) -> list[int]:
    """0, the start of every blank-line run and the edges of every fence and table, ``len(text)``;
    never a position strictly inside a fence or table."""
    regions = find_code_fences(text) + find_tables(text)
    cuts = {m.start() for m in re.finditer(r"\n[ \t]*\n", text)}
    cuts |= {p for r in regions for p in r}
    inside = [(s, e) for s, e in regions]
    keep = {c for c in cuts if 0 < c < len(text) and not any(s < c < e for s, e in inside)}
    return sorted({0, len(text)} | keep)


def _join_short(pieces: list[tuple[int, int]], min_chars: int, max_chars: int) -> list[tuple[int, int]]:
    """Merge each piece shorter than ``min_chars`` into the next one unless that would exceed
    ``max_chars`` (the last into the one before when the pair fits ``max_chars``).

    >>> _join_short([(0, 50), (50, 400), (400, 450)], 100, 1000)
    [(0, 450)]
    >>> _join_short([(0, 50), (50, 1000), (1000, 1050)], 100, 900)
    [(0, 50), (50, 1000), (1000, 1050)]
    """
    out: list[tuple[int, int]] = []
    start = None
    for s, e in pieces:
        if start is not None and e - start > max_chars:  # joining would push the section over the cap
            out.append((start, s))
            start = None
        s = s if start is None else start
        if e - s < min_chars:
            start = s
            continue
        out.append((s, e))
        start = None
    if start is not None:
        end = pieces[-1][1]
        if out and end - out[-1][0] <= max_chars:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _pack(pieces: list[tuple[int, int]], max_chars: int) -> list[tuple[int, int]]:
    """Greedy packing of consecutive pieces while the chunk stays within ``max_chars``."""
    out: list[tuple[int, int]] = []
    for s, e in pieces:
        if out and e - out[-1][0] <= max_chars:
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


__all__ = [
    "CHUNKERS",
    "DEFAULT_CHUNKER",
    "VERSIONS",
    "HEADING_MIN_CHARS",
    "LEGACY_FINGERPRINT",
    "check_chunker",
    "chunker_fingerprint",
    "spans",
]
