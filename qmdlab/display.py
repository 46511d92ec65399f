"""Text as it is shown: escapes for a terminal and the line formats, for JSON and for XML; line numbers.

A base module (it imports nothing of qmdlab): the store names files in its messages with
:func:`printable`, the result and document formatters escape with all of them, and every front end
prints through them.
"""

from __future__ import annotations

import json

#: Unicode categories never written as they are to a terminal: controls, format characters
#: (bidi overrides such as U+202E, zero-width ones), line and paragraph separators, lone surrogates.
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _hidden(ch: str) -> bool:
    import unicodedata

    return unicodedata.category(ch) in HIDDEN_CATEGORIES


def printable(text: str, keep: str = "") -> str:
    r"""``text`` for a terminal and for the line formats (cli, md, csv, files): control characters
    (but those in ``keep``), Unicode format characters (bidirectional overrides such as U+202E,
    zero-width ones), the line and paragraph separators U+2028/U+2029 and lone surrogates written
    as Python escapes (``\x1b``, ``\u202e``, ``\u2028``), so a file name cannot display as
    another and no line breaks where there is no newline. json and xml keep values exact with
    escapes of their own (:func:`json_text`, :func:`xml_text`).

    >>> printable("notes/\u202egnp.md"), printable("東京.md"), printable("a\u2028b\x1b[2J")
    ('notes/\\u202egnp.md', '東京.md', 'a\\u2028b\\x1b[2J')
    >>> printable("line 1\n\tline 2\u2029", keep="\n\t")
    'line 1\n\tline 2\\u2029'
    """
    if text.isprintable():
        return text
    return "".join(repr(ch)[1:-1] if ch not in keep and _hidden(ch) else ch for ch in text)


def printable_text(text: str) -> str:
    """:func:`printable` for text of several lines (a snippet, a context): newlines and tabs kept."""
    return printable(text, keep="\n\t")


def _json_escape(ch: str) -> str:
    o = ord(ch)
    if o < 0x10000:
        return f"\\u{o:04x}"
    o -= 0x10000
    return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"


def json_text(obj: object, *, indent: int | None = 2) -> str:
    r"""``obj`` as JSON (UTF-8 text, not ASCII-escaped), except that every non-ASCII character of
    :data:`HIDDEN_CATEGORIES` (U+202E, U+2028, C1 controls, lone surrogates …) is written as a
    ``\uXXXX`` escape: the same JSON value, and nothing that a terminal or a JavaScript reader
    would take as a control, an override or a line break.

    >>> json_text({"file": "a\u202eb\u2028.md"}, indent=None)
    '{"file": "a\\u202eb\\u2028.md"}'
    >>> import json; json.loads(json_text(["x\u2029\ud800"])) == ["x\u2029\ud800"]
    True
    """
    import re

    text = json.dumps(obj, ensure_ascii=False, indent=indent)
    if text.isascii():
        return text
    return re.sub("[^\x00-\x7f]", lambda m: _json_escape(m.group()) if _hidden(m.group()) else m.group(), text)


def xml_text(text: str) -> str:
    r"""An XML document or fragment with the characters of :data:`HIDDEN_CATEGORIES` made safe:
    non-ASCII ones (U+202E, U+2028, C1 controls) as character references (the same value); those
    XML cannot hold at all (C0 controls but tab and newline, lone surrogates) as Python escapes.

    >>> xml_text("<t>a\u202eb\x1bc\u2028</t>")
    '<t>a&#x202e;b\\x1bc&#x2028;</t>'
    """
    if text.isprintable():
        return text

    def one(ch: str) -> str:
        if ch in "\t\n\r" or not _hidden(ch):
            return ch
        o = ord(ch)
        if o < 0x20 or 0xD800 <= o <= 0xDFFF:
            return repr(ch)[1:-1]
        return f"&#x{o:x};"

    return "".join(one(ch) for ch in text)


def number_lines(text: str, first: int) -> str:
    """Prefix every line of ``text`` with its 1-based number (width of the largest): ``--line-numbers``.

    >>> print(number_lines("a\\nb", 9))
     9: a
    10: b
    """
    lines = text.split("\n")
    width = len(str(first + len(lines) - 1))
    return "\n".join(f"{first + i:>{width}}: {line}" for i, line in enumerate(lines))
