"""qmd's markdown break-point chunker (the default of :mod:`qmdlab.store.chunkers`; documents are
cut into addressed chunks by :func:`qmdlab.store.chunking.chunk_document`).

A document longer than ``max_chars`` is cut near every ``max_chars`` characters at the
best-scoring *break point* inside a look-back window. Tokens are approximated as
characters / 4 (qmd does the same), so the defaults are:

======================  ==========  =======
constant                tokens      chars
======================  ==========  =======
target chunk size       900         3600
overlap (15 %)          135         540
search window           200         800
======================  ==========  =======

Break points sit on the newline that starts a structure; a cut there ends the chunk
*before* the newline. Scores: h1 100, h2 90, h3 80, h4 70, h5 60, h6 50, code fence 80,
horizontal rule 60, blank line 20, list item 5, numbered item 5, any newline 1 (the highest
score wins where patterns coincide). A candidate at distance ``d`` before the target
scores ``score * (1 - (d / window)**2 * 0.7)``; the best one wins (earliest on ties).

Deviation from qmd, on purpose: qmd skips break points inside a code fence but can still
fall back to a hard cut at the target inside one. Here a cut never lands inside a fence:
a fallback cut inside a fence moves to the fence's start (or, if that is not past the
chunk's start, to its end). Markdown tables (a header row, a ``|---|`` delimiter row and the
rows that follow, :func:`find_tables`) are kept whole the same way : a row
cut off from its header is unreadable, so no break point inside a table is used and a fallback
cut inside one moves to its start or end. A table or fence longer than ``max_chars`` therefore
makes one chunk longer than ``max_chars``. The overlap never starts in the middle of a table row: a
start inside a table moves back to the newline before its row (:func:`_row_start`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

CHUNK_SIZE_TOKENS = 900
CHUNK_OVERLAP_TOKENS = int(CHUNK_SIZE_TOKENS * 0.15)  # 135
CHUNK_WINDOW_TOKENS = 200
CHARS_PER_TOKEN = 4
CHUNK_SIZE_CHARS = CHUNK_SIZE_TOKENS * CHARS_PER_TOKEN  # 3600
CHUNK_OVERLAP_CHARS = CHUNK_OVERLAP_TOKENS * CHARS_PER_TOKEN  # 540
CHUNK_WINDOW_CHARS = CHUNK_WINDOW_TOKENS * CHARS_PER_TOKEN  # 800
DECAY = 0.7

BREAK_PATTERNS: tuple[tuple[re.Pattern[str], int, str], ...] = (
    # headings h1 to h6 (exactly n #), scored 100 down to 50 as the module docs say
    *((re.compile(rf"\n{'#' * n}(?!#)"), 110 - 10 * n, f"h{n}") for n in range(1, 7)),
    (re.compile(r"\n```"), 80, "codeblock"),
    (re.compile(r"\n(?:---|\*\*\*|___)[ \t]*\n"), 60, "hr"),
    (re.compile(r"\n\n+"), 20, "blank"),
    (re.compile(r"\n[-*+]\s"), 5, "list"),
    (re.compile(r"\n\d+\.\s"), 5, "numlist"),
    (re.compile(r"\n"), 1, "newline"),
)

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t#]*$")


class BreakPoint(NamedTuple):
    pos: int
    score: int
    kind: str


def scan_break_points(text: str) -> list[BreakPoint]:
    """All break points, sorted by position, keeping the best score per position.

    >>> scan_break_points("a\\n## B\\n\\nc")
    [BreakPoint(pos=1, score=90, kind='h2'), BreakPoint(pos=6, score=20, kind='blank'), BreakPoint(pos=7, score=1, kind='newline')]
    """
    best: dict[int, BreakPoint] = {}
    for pattern, score, kind in BREAK_PATTERNS:
        for m in pattern.finditer(text):
            cur = best.get(m.start())
            if cur is None or score > cur.score:
                best[m.start()] = BreakPoint(m.start(), score, kind)
    return sorted(best.values())


def find_code_fences(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each fenced block: from its opening ``\\n```` to past the closing one.

    An unclosed fence runs to the end of the text.

    >>> find_code_fences("x\\n```py\\ncode\\n```\\ny")
    [(1, 16)]
    """
    regions, start = [], None
    for m in re.finditer(r"\n```", text):
        if start is None:
            start = m.start()
        else:
            regions.append((start, m.end()))
            start = None
    if start is not None:
        regions.append((start, len(text)))
    return regions


_TABLE_DELIMITER = re.compile(
    r"^[ \t]*\|?[ \t]*:?-+:?[ \t]*(\|[ \t]*:?-+:?[ \t]*)+\|?[ \t]*$|"
    r"^[ \t]*\|[ \t]*:?-+:?[ \t]*\|[ \t]*$"
)


def find_tables(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each markdown table: from the newline before its header row (0 at the
    start of the text) to the newline that ends its last row (or the end of the text).

    A table is a line holding ``|``, then a delimiter row (``|---|:--:|``), then every following
    non-blank line holding ``|``. Tables inside code fences are the fence's business.

    >>> t = "intro\\n| a | b |\\n|---|---|\\n| 1 | 2 |\\n\\nafter"
    >>> find_tables(t), t[5:35]
    ([(5, 35)], '\\n| a | b |\\n|---|---|\\n| 1 | 2 |')
    >>> find_tables("a | b\\n--|--\\nc | d"), find_tables("no | table\\njust text")
    ([(0, 17)], [])
    """
    lines = text.split("\n")
    starts, pos = [], 0
    for line in lines:
        starts.append(pos)
        pos += len(line) + 1
    fences = find_code_fences(text)
    out, i = [], 0
    while i + 1 < len(lines):
        if "|" in lines[i] and _TABLE_DELIMITER.match(lines[i + 1]) and not _inside(starts[i], fences):
            j = i + 2
            while j < len(lines) and lines[j].strip() and "|" in lines[j]:
                j += 1
            start = starts[i] - 1 if i > 0 else 0
            end = starts[j - 1] + len(lines[j - 1])
            out.append((start, min(end, len(text))))
            i = j
        else:
            i += 1
    return out


def _inside(pos: int, fences: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    for start, end in fences:
        if start < pos < end:
            return start, end
    return None


def decayed_score(score: float, distance: int, window: int = CHUNK_WINDOW_CHARS, decay: float = DECAY) -> float:
    """``score * (1 - (distance / window)**2 * decay)``.

    >>> decayed_score(100, 400, 800)
    82.5
    >>> decayed_score(20, 0, 800)
    20.0
    """
    return score * (1.0 - (distance / window) ** 2 * decay)


def find_best_cutoff(
    points: list[BreakPoint],
    target: int,
    window: int = CHUNK_WINDOW_CHARS,
    fences: Sequence[tuple[int, int]] = (),
) -> int:
    """The best break position in ``[target - window, target]``, or ``target`` if none.

    >>> pts = [BreakPoint(10, 100, "h1"), BreakPoint(95, 1, "newline")]
    >>> find_best_cutoff(pts, 100, window=100)  # 100*(1-0.81*0.7)=43.3 beats 1*(...)~1
    10
    """
    best_score, best_pos = -1.0, target
    for bp in points:
        if bp.pos < target - window:
            continue
        if bp.pos > target:
            break
        if _inside(bp.pos, list(fences)):
            continue
        s = decayed_score(bp.score, target - bp.pos, window)
        if s > best_score:
            best_score, best_pos = s, bp.pos
    return best_pos


def heading_paths(text: str) -> list[tuple[int, str]]:
    """``(char offset of the heading line, path)`` for each heading outside code fences.

    >>> heading_paths("# Setup\\n## Linux\\n```\\n# not\\n```\\n## Mac")
    [(0, 'Setup'), (8, 'Setup > Linux'), (31, 'Setup > Mac')]
    """
    out: list[tuple[int, str]] = []
    stack: list[tuple[int, str]] = []
    in_fence = False
    pos = 0
    for line in text.split("\n"):
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence:
            m = _HEADING.match(line)
            if m:
                level = len(m.group(1))
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, m.group(2).strip()))
                out.append((pos, " > ".join(t for _, t in stack)))
        pos += len(line) + 1
    return out


def chunk_spans(
    text: str,
    max_chars: int = CHUNK_SIZE_CHARS,
    overlap_chars: int = CHUNK_OVERLAP_CHARS,
    window_chars: int = CHUNK_WINDOW_CHARS,
) -> list[tuple[int, int]]:
    """``(start, end)`` character spans of the chunks (qmd's loop).

    >>> chunk_spans("short")
    [(0, 5)]
    >>> chunk_spans("aaaa\\n# b\\ncccc", max_chars=8, overlap_chars=2, window_chars=4)
    [(0, 4), (2, 8), (6, 13)]
    """
    n = len(text)
    if n <= max_chars:
        return [(0, n)]
    points = scan_break_points(text)
    fences = sorted(find_code_fences(text) + find_tables(text))  # regions never cut: fences and tables
    spans: list[tuple[int, int]] = []
    pos = prev_end = 0
    while pos < n:
        target = min(pos + max_chars, n)
        end = target
        floor = max(pos, prev_end)  # a chunk must reach past the previous one (none held inside another)
        if end < n:
            cut = find_best_cutoff(points, target, window_chars, fences)
            if floor < cut <= target:
                end = cut
            fence = _inside(end, fences)
            if fence is not None:  # fallback cut landed inside a fence: move it out
                end = fence[0] if fence[0] > floor else min(fence[1], n)
        if end <= floor:
            end = min(max(pos + max_chars, floor + 1), n)
        spans.append((pos, end))
        prev_end = end
        if end >= n:
            break
        nxt = _row_start(text, end - overlap_chars, fences)
        pos = nxt if nxt > pos else end
    return spans


def _row_start(text: str, pos: int, regions: list[tuple[int, int]]) -> int:
    """``pos`` moved back to the newline that starts its line when it falls inside a table (a
    chunk's overlap never starts mid-row); elsewhere ``pos`` itself.

    >>> t = "x\\n| a | b |\\n|---|---|\\n| 1 | 2 |"
    >>> _row_start(t, 27, find_tables(t)), _row_start(t, 0, find_tables(t))
    (21, 0)
    """
    region = _inside(pos, regions)
    if region is None or text.startswith("```", region[0] + 1):  # not in a table (fences keep the old rule)
        return pos
    return max(text.rfind("\n", region[0], pos + 1), region[0])
