"""YAML front matter and titles.

Front matter is a YAML mapping between a first line ``---`` and the next ``---`` (or
``...``) line. ``title``, ``tags`` and ``date`` are recognised; every other scalar field is kept
as metadata (lists of scalars too); nested mappings are dropped. Malformed YAML is not an
error: the block is treated as ordinary text (a note must never fail to index).

The block is parsed within the parser limits of :mod:`qmdlab.store.limits` (its size, its YAML
nodes with aliases counted expanded, its nesting, its number of tags; :mod:`qmdlab.store.safeyaml`):
past one, :attr:`FrontMatter.problem` says which, and ``update`` skips the note (reason
``frontmatter``) instead of spending minutes and gigabytes on it.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, NamedTuple

import yaml

from qmdlab.store import safeyaml
from qmdlab.store.limits import MAX_FRONT_MATTER_BYTES, MAX_FRONT_MATTER_NODES, MAX_TAGS

_OPEN = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n")
_CLOSE = re.compile(r"^(?:---|\.\.\.)[ \t]*\r?$", re.M)
_HEADING = re.compile(r"^(#{1,2})[ \t]+(.+?)[ \t#]*$")


class FrontMatter(NamedTuple):
    """``metadata`` (JSON-safe), ``body_offset``: where the text after the block starts, and
    ``problem``: which parser limit the block is over (``None`` within them; then the note is
    not indexed, see the module notes)."""

    metadata: dict[str, Any]
    body_offset: int
    problem: str | None = None


def _scalar(v: Any) -> Any:
    if isinstance(v, (_dt.date, _dt.datetime)):
        return v.isoformat()
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    return None


def normalize_tags(value: Any) -> list[str]:
    """Tags from a YAML list or a comma/space separated string, lower-cased, ``#`` stripped.

    >>> normalize_tags("Python, #git  notes")
    ['python', 'git', 'notes']
    >>> normalize_tags(["A", 3, "a"])
    ['a', '3']
    """
    if value is None:
        return []
    items = value if isinstance(value, list) else re.split(r"[,\s]+", str(value))
    out: dict[str, None] = {}  # insertion-ordered and O(1) membership: 40,000 tags take milliseconds
    for it in items:
        t = str(it).strip().lstrip("#").lower()
        if t:
            out[t] = None
    return list(out)


def normalize_date(value: Any) -> str | None:
    """An ISO date ``YYYY-MM-DD`` from a YAML date/datetime or a string starting with one.

    >>> normalize_date("2024-03-05T10:00"), normalize_date(_dt.date(2024, 1, 2)), normalize_date("soon")
    ('2024-03-05', '2024-01-02', None)
    """
    if isinstance(value, _dt.datetime):
        return value.date().isoformat()
    if isinstance(value, _dt.date):
        return value.isoformat()
    m = re.match(r"\s*(\d{4}-\d{2}-\d{2})", str(value)) if value is not None else None
    return m.group(1) if m else None


def parse_front_matter(text: str) -> FrontMatter:
    """Split off and parse the front matter.

    >>> fm = parse_front_matter("---\\ntitle: Hi\\ntags: [a, B]\\ndate: 2024-01-02\\nn: 3\\n---\\n# Body")
    >>> fm.metadata
    {'title': 'Hi', 'tags': ['a', 'b'], 'date': '2024-01-02', 'n': 3}
    >>> fm.body_offset
    53
    >>> parse_front_matter("# no front matter")
    FrontMatter(metadata={}, body_offset=0, problem=None)
    >>> parse_front_matter("---\\na: &a [x, x]\\nb: &b [*a, *a]\\nc: &c [*b, *b]\\n---\\n").problem is None
    True
    >>> parse_front_matter("---\\ntags: " + "t, " * 2000 + "u\\n---\\n").problem  # one tag, repeated
    >>> parse_front_matter("---\\ntags: " + " ".join(f"t{i}" for i in range(2000)) + "\\n---\\n").problem
    'front matter over the limit: 2000 tags (at most 1000)'
    """
    m = _OPEN.match(text)
    if not m:
        return FrontMatter({}, 0)
    close = _CLOSE.search(text, m.end())
    if not close:
        return FrontMatter({}, 0)
    try:
        data = safeyaml.load(
            text[m.end() : close.start()], max_bytes=MAX_FRONT_MATTER_BYTES, max_nodes=MAX_FRONT_MATTER_NODES
        )
    except safeyaml.YamlLimitError as err:
        return FrontMatter({}, 0, f"front matter over the limit: {err}")
    except yaml.YAMLError:
        return FrontMatter({}, 0)
    if not isinstance(data, dict):
        return FrontMatter({}, 0)
    end = close.end()
    if end < len(text) and text[end] == "\n":
        end += 1
    meta: dict[str, Any] = {}
    for k, v in data.items():
        key = str(k)
        if key == "tags":
            meta["tags"] = normalize_tags(v)
            if len(meta["tags"]) > MAX_TAGS:
                return FrontMatter({}, 0, f"front matter over the limit: {len(meta['tags'])} tags (at most {MAX_TAGS})")
        elif key == "date":
            meta["date"] = normalize_date(v)
        elif isinstance(v, list):
            vals = [_scalar(x) for x in v]
            if all(x is not None for x in vals):
                meta[key] = vals
        else:
            sv = _scalar(v)
            if sv is not None:
                meta[key] = sv
    return FrontMatter(meta, end)


def extract_title(text: str, metadata: dict[str, Any], filename: str) -> str:
    """Front-matter ``title``, else the first ``#``/``##`` heading outside code fences, else
    the file name without its extension.

    >>> extract_title("intro\\n## Second\\n# First", {}, "a.md")
    'Second'
    >>> extract_title("```\\n# code\\n```\\nplain", {}, "notes/b.md")
    'b'
    >>> extract_title("# H", {"title": "FM"}, "c.md")
    'FM'
    """
    t = metadata.get("title")
    if isinstance(t, str) and t.strip():
        return t.strip()
    in_fence = False
    for line in text.split("\n"):
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if not in_fence:
            m = _HEADING.match(line.rstrip("\r"))
            if m:
                return m.group(2).strip()
    name = filename.rsplit("/", 1)[-1]
    return name.rsplit(".", 1)[0] if "." in name else name
