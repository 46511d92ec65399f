"""Query-expansion output: the GBNF grammar (docs/design.md, pipeline) and a pure parser.

The expander writes lines ``type: content`` with ``type`` in ``lex|vec|hyde``. The grammar
forces that shape during llama.cpp sampling; the parser turns the text into typed lines and
records every line it cannot use, with the reason, so a trace can show what was dropped.
Query-relevance filtering (lines equal to the query, lines sharing no query term) is a pipeline
stage decision: :func:`qmdlab.pipeline.expand.filter_expansions`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from qmdlab.models.base import ExpandResult

LINE_TYPES = ("lex", "vec", "hyde")

#: docs/design.md, pipeline, verbatim in GBNF.
GRAMMAR = r"""root ::= line+
line ::= type ": " content "\n"
type ::= "lex" | "vec" | "hyde"
content ::= [^\n]+
"""


def grammar_for(max_lines: int | None = None, max_chars: int | None = None) -> str:
    """:data:`GRAMMAR`, optionally bounded to ``max_lines`` lines of at most ``max_chars`` characters.

    Generic instruct models were not trained to stop after a few short lines; under DESIGN's
    ``line+`` / ``[^\\n]+`` they can run one sentence to ``max_tokens``. The bounds use GBNF
    repetition (``line{1,6}``, ``[^\\n]{1,160}``); after the last allowed line only
    end-of-text remains.

    >>> grammar_for() == GRAMMAR
    True
    >>> print(grammar_for(3, 80))
    root ::= line{1,3}
    line ::= type ": " content "\\n"
    type ::= "lex" | "vec" | "hyde"
    content ::= [^\\n]{1,80}
    <BLANKLINE>
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
    return g


_LINE = re.compile(r"^\s*(?P<type>[A-Za-z]+)\s*:\s?(?P<content>.*)$")


def parse_expansion(raw: str) -> ExpandResult:
    """Parse generated text into typed lines, keeping a reason for every dropped line.

    Blank lines are ignored. The type is matched case-insensitively; the content is stripped.
    Reasons: ``"not a 'type: content' line"``, ``"unknown type 'x'"``, ``"empty content"``,
    ``"duplicate"`` (same type and content, case-insensitive, as an earlier line).

    >>> r = parse_expansion("lex: git rebase\\nvec: how to rebase a branch\\nLEX: git rebase\\nfoo: bar\\nhello\\nhyde:   \\n")
    >>> r.lines
    [('lex', 'git rebase'), ('vec', 'how to rebase a branch')]
    >>> r.dropped
    [('LEX: git rebase', 'duplicate'), ('foo: bar', "unknown type 'foo'"), ('hello', "not a 'type: content' line"), ('hyde:   ', 'empty content')]
    >>> parse_expansion("").lines
    []
    """
    lines: list[tuple[str, str]] = []
    dropped: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for line in raw.splitlines():
        if not line.strip():
            continue
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
