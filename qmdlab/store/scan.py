"""Finding a collection's files and reading them safely.

Never writes anything. Files that cannot be indexed are skipped with a reason, never raised:
``symlink`` (resolves outside the collection root), ``large`` (over the size cap), ``empty``
(no non-whitespace text), ``binary`` (a NUL byte in the first 8 KiB), ``utf8`` (not valid
UTF-8).
"""
from __future__ import annotations

import re
import os
from pathlib import Path
from typing import Iterator, NamedTuple

from qmdlab.store.config import Collection

DEFAULT_MAX_BYTES = 5 * 1024 * 1024
SKIP_REASONS = ("binary", "utf8", "large", "empty", "symlink")


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
        try:
            real = p.resolve()
            if not real.is_file():
                continue
            st = p.stat()
        except OSError:
            continue
        skip = None if real_root in real.parents else "symlink"
        if skip is None and st.st_size > max_bytes:
            skip = "large"
        yield FileEntry(rel, p, st.st_mtime, st.st_size, skip)


def read_text(path: Path) -> tuple[bytes, str | None, str | None]:
    """``(raw bytes, text or None, skip reason or None)``. A UTF-8 BOM is dropped from the text."""
    raw = path.read_bytes()
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
