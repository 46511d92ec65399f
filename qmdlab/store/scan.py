"""Finding a collection's files and reading them safely.

Never writes anything. Files that cannot be indexed are skipped with a reason, never raised:

- ``symlink``: a link that resolves outside the collection root, a broken link or a link loop;
- ``large``: over the size cap (``max_bytes``, default 5 MiB; checked on ``stat``, never read);
- ``empty``: no non-whitespace text;
- ``binary``: a NUL byte in the first 8 KiB (after the UTF-16 check below);
- ``utf8``: not valid UTF-8 (nor UTF-16 with a byte-order mark);
- ``unreadable``: the file cannot be stat-ed or opened (permissions, vanished mid-scan);
- ``name``: the file name is not valid UTF-8 or holds a control character (a newline, a tab…):
  such a name cannot round-trip through docnos, TREC runs, qrels or line-based CLI output.

Text with a UTF-8 byte-order mark is indexed without it; UTF-16 text with a BOM is decoded and
indexed (its hash stays the sha256 of the raw bytes).
"""
from __future__ import annotations

import codecs
import os
import re
from pathlib import Path
from typing import Iterator, NamedTuple

from qmdlab.store.config import Collection

DEFAULT_MAX_BYTES = 5 * 1024 * 1024
SKIP_REASONS = ("binary", "utf8", "large", "empty", "symlink", "unreadable", "name")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def bad_name(rel: str) -> bool:
    """Is a relative path unusable as a docno (not UTF-8, or a control character in it)?

    >>> bad_name("a/b c.md"), bad_name("a\\nb.md"), bad_name("caf\\udce9.md"), bad_name("東京.md")
    (False, True, True, False)
    """
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return _CONTROL.search(rel) is not None


def display_path(rel: str) -> str:
    """A printable form of any path: undecodable bytes as ``\\xNN``, control characters escaped.

    >>> display_path("a\\nb.md"), display_path("caf\\udce9.md")
    ('a\\\\nb.md', 'caf\\\\xe9.md')
    """
    raw = os.fsencode(rel)
    text = raw.decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], text)


class FileEntry(NamedTuple):
    rel: str  # POSIX path relative to the root
    abs_path: Path
    mtime: float
    size: int
    skip: str | None  # one of SKIP_REASONS, or None


def ignored(rel: str, patterns: tuple[str, ...] | list[str]) -> bool:
    """Is a POSIX relative path ignored? Each pattern is a :func:`glob_match` glob, tried at the
    root and at any depth (``*.tmp`` ignores ``a/b.tmp``); ``dir/**`` ignores everything under
    ``dir``.

    >>> ignored("drafts/a/b.md", ["drafts/**"]), ignored("a.md", ["drafts/**"]), ignored("x/tmp.md", ["*tmp.md"])
    (True, False, True)
    >>> ignored("notes/drafts/a.md", ["drafts/**"]), ignored("draftsman.md", ["drafts/**"])
    (True, False)
    """
    return any(glob_match(rel, pat) or glob_match(rel, "**/" + pat) for pat in patterns)


def list_files(coll: Collection, max_bytes: int = DEFAULT_MAX_BYTES) -> Iterator[FileEntry]:
    """Matching files, sorted by relative path, each stat-ed (not read)."""
    root = Path(coll.root)
    real_root = root.resolve()
    seen: set[str] = set()
    for mask in coll.masks:
        for p in root.glob(mask):
            rel = p.relative_to(root).as_posix()
            if rel in seen or ignored(rel, coll.ignore):
                continue
            seen.add(rel)
    for rel in sorted(seen):
        p = root / rel
        if bad_name(rel):
            yield FileEntry(rel, p, 0.0, 0, "name")
            continue
        try:
            real = p.resolve()
        except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
            yield FileEntry(rel, p, 0.0, 0, "symlink")
            continue
        try:
            if real.is_dir():
                continue
            if not real.exists():  # broken link (a plain file that vanished mid-scan is dropped)
                if p.is_symlink():
                    yield FileEntry(rel, p, 0.0, 0, "symlink")
                continue
            if not real.is_file():  # a fifo, socket or device: never opened
                yield FileEntry(rel, p, 0.0, 0, "unreadable")
                continue
            st = p.stat()
        except OSError:
            yield FileEntry(rel, p, 0.0, 0, "unreadable")
            continue
        skip = None if real_root in real.parents else "symlink"
        if skip is None and st.st_size > max_bytes:
            skip = "large"
        yield FileEntry(rel, p, st.st_mtime, st.st_size, skip)


def read_text(path: Path) -> tuple[bytes, str | None, str | None]:
    """``(raw bytes, text or None, skip reason or None)``. A UTF-8 BOM is dropped from the text;
    UTF-16 with a BOM is decoded. An unreadable file gives ``(b"", None, "unreadable")``."""
    try:
        raw = path.read_bytes()
    except OSError:
        return b"", None, "unreadable"
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) and not raw.startswith(codecs.BOM_UTF32_LE):
        try:
            text = raw.decode("utf-16")
        except UnicodeDecodeError:
            return raw, None, "utf8"
        if "\x00" in text[:8192]:
            return raw, None, "binary"
        if not text.strip():
            return raw, None, "empty"
        return raw, text.lstrip("\ufeff"), None
    if b"\x00" in raw[:8192]:
        return raw, None, "binary"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw, None, "utf8"
    if text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        return raw, None, "empty"
    return raw, text, None


def glob_match(path: str, pattern: str) -> bool:
    """Whole-path glob: ``*``/``?`` stay inside one path segment, ``**`` crosses segments.

    >>> glob_match("kb/a.md", "kb/*.md"), glob_match("kb/x/a.md", "kb/*.md"), glob_match("kb/x/a.md", "kb/**/*.md")
    (True, False, True)
    >>> glob_match("kb/a.md", "kb/**/*.md"), glob_match("kb/a.md", "kb/?.md")
    (True, True)
    """
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape("["))
                i += 1
            else:
                body = pattern[i + 1 : j].replace("\\", "\\\\")
                out.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
                i = j + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.fullmatch("".join(out), path) is not None
