"""Query-expansion output: the GBNF grammar (docs/design.md, pipeline) and a pure parser.

The expander writes lines ``type: content`` with ``type`` in ``lex|vec|hyde``. The grammar
forces that shape during llama.cpp sampling; the parser turns the text into typed lines and
records every line it cannot use, with the reason, so a trace can show what was dropped.
What it reads of an answer is bounded, whatever the expander (a served one may send megabytes):
at most :data:`MAX_LINES` non-blank lines within the first :data:`MAX_TEXT_CHARS` characters,
each at most :data:`MAX_LINE_CHARS` long; a longer line, and the rest of the answer, are dropped
with that reason (their text cut to :data:`SHOWN_CHARS`), never an error.
Query-relevance filtering (lines equal to the query, lines sharing no query term) is a pipeline
stage decision: :func:`qmdlab.pipeline.expand.filter_expansions`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from qmdlab.models.base import ExpandResult

LINE_TYPES = ("lex", "vec", "hyde")
#: Non-blank lines of an answer read at most (qmd's expander writes 1–3 lex, 1–3 vec, one hyde).
MAX_LINES = 128
#: Characters of one line at most (a hyde passage is 50–200); a longer line is dropped.
MAX_LINE_CHARS = 1000
#: Characters of an answer read at most; lines starting later are dropped as one.
MAX_TEXT_CHARS = 256 * 1024
#: Characters of a dropped over-long line (or of the unread rest) kept to show it.
SHOWN_CHARS = 80

#: docs/design.md, pipeline, verbatim in GBNF.
GRAMMAR = r"""root ::= line+
line ::= type ": " content "\n"
type ::= "lex" | "vec" | "hyde"
content ::= [^\n]+
"""


def grammar_for(max_lines: int | None = None, max_chars: int | None = None, open_end: bool = False) -> str:
    """:data:`GRAMMAR`, optionally bounded to ``max_lines`` lines of at most ``max_chars`` characters,
    and with ``open_end`` a last line that may stop without its newline.

    Generic instruct models were not trained to stop after a few short lines; under DESIGN's
    ``line+`` / ``[^\\n]+`` they can run one sentence to ``max_tokens``. The bounds use GBNF
    repetition (``line{1,6}``, ``[^\\n]{1,160}``); after the last allowed line only
    end-of-text remains. ``open_end``: such a model ends its answer with end-of-text straight after
    a sentence (``hyde: How to rebase a branch.``); DESIGN's grammar forbids that (every line ends in
    a newline), so greedy decoding wrote on to ``max_tokens`` (Qwen2.5-Coder-0.5B: 200 tokens in
    23 s, against 25 tokens in 2 s with the last newline optional, the same three lines first).

    >>> grammar_for() == GRAMMAR
    True
    >>> print(grammar_for(3, 80))
    root ::= line{1,3}
    line ::= type ": " content "\\n"
    type ::= "lex" | "vec" | "hyde"
    content ::= [^\\n]{1,80}
    <BLANKLINE>
    >>> for line in grammar_for(3, 80, open_end=True).splitlines()[0::4]:
    ...     print(line)
    root ::= line{0,2} last
    last ::= type ": " content "\\n"?
    """
    g = GRAMMAR
    if max_lines is not None:
        if max_lines < 1:
            raise ValueError("max_lines must be at least 1")
        g = g.replace("root ::= line+", f"root ::= line{{1,{max_lines}}}", 1)
    if max_chars is not None:
        if max_chars < 1:
            raise ValueError("max_chars must be at least 1")
        g = g.replace("content ::= [^\\n]+", f"content ::= [^\\n]{{1,{max_chars}}}", 1)
    if open_end:
        before = "line*" if max_lines is None else f"line{{0,{max_lines - 1}}}"
        g = g.replace(g.splitlines()[0], f"root ::= {before} last", 1) + 'last ::= type ": " content "\\n"?\n'
    return g


_LINE = re.compile(r"^\s*(?P<type>[A-Za-z]+)\s*:\s?(?P<content>.*)$")
#: The line boundaries of :meth:`str.splitlines`.
_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
_NONBLANK = re.compile(r"\S")


def _spans(raw: str) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each line of ``raw`` as :meth:`str.splitlines` cuts them, lazily."""
    pos = 0
    for m in _BREAK.finditer(raw):
        yield pos, m.start()
        pos = m.end()
    if pos < len(raw):
        yield pos, len(raw)


def shown_part(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters, ``…`` marking the cut.

    >>> shown_part("abcdef", 4), shown_part("abc", 4)
    ('abc…', 'abc')
    """
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_expansion(raw: str) -> ExpandResult:
    """Parse generated text into typed lines, keeping a reason for every dropped line.

    Blank lines are ignored. The type is matched case-insensitively; the content is stripped.
    Reasons: ``"not a 'type: content' line"``, ``"unknown type 'x'"``, ``"empty content"``,
    ``"duplicate"`` (same type and content, case-insensitive, as an earlier line), and the
    bounds of the module docs (``"longer than 1000 characters (27000)"``, ``"over the limit of 128
    lines read: the rest of the answer (N characters) is not read"``).

    >>> r = parse_expansion("lex: git rebase\\nvec: how to rebase a branch\\nLEX: git rebase\\nfoo: bar\\nhello\\nhyde:   \\n")
    >>> r.lines
    [('lex', 'git rebase'), ('vec', 'how to rebase a branch')]
    >>> r.dropped
    [('LEX: git rebase', 'duplicate'), ('foo: bar', "unknown type 'foo'"), ('hello', "not a 'type: content' line"), ('hyde:   ', 'empty content')]
    >>> parse_expansion("").lines
    []
    >>> parse_expansion("vec: " + "x" * 2000 + "\\nlex: a").dropped[0][1]
    'longer than 1000 characters (2005)'
    """
    lines: list[tuple[str, str]] = []
    dropped: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    read = 0
    for start, end in _spans(raw):
        if read >= MAX_LINES or start >= MAX_TEXT_CHARS:
            if _NONBLANK.search(raw, start) is not None:
                limit = f"{MAX_LINES} lines" if read >= MAX_LINES else f"{MAX_TEXT_CHARS} characters"
                dropped.append(
                    (
                        shown_part(raw[start : start + SHOWN_CHARS + 1]),
                        f"over the limit of {limit} read: the rest of the answer "
                        f"({len(raw) - start} characters) is not read",
                    )
                )
            break
        if _NONBLANK.search(raw, start, end) is None:
            continue
        read += 1
        if end - start > MAX_LINE_CHARS:
            dropped.append(
                (
                    shown_part(raw[start : start + SHOWN_CHARS + 1]),
                    f"longer than {MAX_LINE_CHARS} characters ({end - start})",
                )
            )
            continue
        line = raw[start:end]
        m = _LINE.match(line)
        if m is None:
            dropped.append((line, "not a 'type: content' line"))
            continue
        kind, content = m.group("type").lower(), m.group("content").strip()
        if kind not in LINE_TYPES:
            dropped.append((line, f"unknown type {m.group('type')!r}"))
        elif not content:
            dropped.append((line, "empty content"))
        elif (kind, content.lower()) in seen:
            dropped.append((line, "duplicate"))
        else:
            seen.add((kind, content.lower()))
            lines.append((kind, content))
    return ExpandResult(raw, lines, dropped)


def bounded(res: ExpandResult) -> ExpandResult:
    """``res`` with its raw text cut to :data:`MAX_TEXT_CHARS` and each dropped line's text to
    :data:`SHOWN_CHARS` — what a cache entry and a trace keep of an over-long answer.

    >>> bounded(ExpandResult("lex: a\\n" + "x" * 300, [("lex", "a")], [("x" * 300, "cut off")])).dropped[0][0][-3:]
    'xx…'
    """
    if len(res.raw) <= MAX_TEXT_CHARS and all(len(line) <= SHOWN_CHARS for line, _ in res.dropped):
        return res
    dropped = [(shown_part(line), why) for line, why in res.dropped]
    return ExpandResult(res.raw[:MAX_TEXT_CHARS], list(res.lines), dropped)


def format_lines(lines: Iterable[tuple[str, str]]) -> str:
    """Inverse of :func:`parse_expansion` for clean lines (grammar-conformant text).

    >>> format_lines([("lex", "a b"), ("hyde", "c")])
    'lex: a b\\nhyde: c\\n'
    """
    return "".join(f"{t}: {c}\n" for t, c in lines)


def matches_grammar(raw: str) -> bool:
    """Whether ``raw`` is derivable from :data:`GRAMMAR` (one or more ``type: content\\n`` lines).

    >>> matches_grammar("lex: a\\nvec: b c\\n"), matches_grammar("lex: a"), matches_grammar("lex:a\\n")
    (True, False, False)
    >>> matches_grammar(""), matches_grammar("lex: \\n"), matches_grammar("lex:  \\n"), matches_grammar("hyde: x\\n\\n")
    (False, False, True, False)
    """
    return re.fullmatch(r"(?:(?:lex|vec|hyde): [^\n]+\n)+", raw) is not None
