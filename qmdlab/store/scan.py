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

A folder that cannot be listed (permissions, an I/O error) is not a folder without files:
:func:`list_files` reports it through its ``unreadable`` list, and ``update`` keeps the indexed
documents under it.

Text with a UTF-8 byte-order mark is indexed without it; UTF-16 text with a BOM is decoded and
indexed (its hash stays the sha256 of the raw bytes).
"""

from __future__ import annotations

import codecs
import errno
import functools
import hashlib
import os
import re
import stat
import sys
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from qmdlab.errors import ConfigError
from qmdlab.store.config import Collection

DEFAULT_MAX_BYTES = 5 * 1024 * 1024
SKIP_REASONS = ("binary", "utf8", "large", "empty", "symlink", "unreadable", "name")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def bad_name(rel: str) -> bool:
    """Is a relative path unusable as a docno (not UTF-8, or a control character in it)?

    >>> bad_name("a/b c.md"), bad_name("a\\nb.md"), bad_name("caf\\udce9.md"), bad_name("東京.md")
    (False, True, True, False)
    """
    if rel.isascii():  # the common case, without the regex: ASCII's unprintable are the controls
        return not rel.isprintable()
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
    text = _CONTROL.sub(lambda m: repr(m.group(0))[1:-1], text)
    if not text.isascii():  # format characters (U+202E …) would make the name display as another
        from qmdlab.display import printable

        text = printable(text)
    return text


class FileEntry(NamedTuple):
    rel: str  # POSIX path relative to the root
    abs_path: str  # a str, not a Path: 10,000 Path objects cost more than the stat calls
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


def list_files(
    coll: Collection, max_bytes: int = DEFAULT_MAX_BYTES, unreadable: list[str] | None = None
) -> Iterator[FileEntry]:
    """Matching files, sorted by relative path, each stat-ed (not read).

    One ``os.scandir`` walk that does not enter links to folders (as ``Path.glob("**")``), the
    masks and ignore patterns as regexes compiled once, one ``stat`` per regular file and no
    ``Path`` objects: the stat-only path of an unchanged ``update``. Links (to files or
    folders), odd names and other rare cases take the per-file checks of
    :func:`list_files_glob`; when the walk meets a link to a folder, a mask could reach through
    it (``linked/*.md``), so the file list itself then comes from ``Path.glob`` as well.
    ``tests/store/test_scan.py`` checks both give the same entries.

    ``unreadable``, when given, receives the relative path (ending in ``/``; ``""`` for the root)
    of every folder the walk could not list.
    """
    root = str(coll.root)
    found, linked_dir = _walk(coll, unreadable)
    rels = _glob_rels(coll) if linked_dir else sorted(found)
    real_root = None
    for rel in rels:
        e = found.get(rel)
        if e is not None and not bad_name(rel):
            try:
                if e.is_file(follow_symlinks=False):  # a regular file, not a link: inside the root
                    st = e.stat(follow_symlinks=False)
                    yield FileEntry(rel, e.path, st.st_mtime, st.st_size, "large" if st.st_size > max_bytes else None)
                    continue
            except OSError:
                yield FileEntry(rel, e.path, 0.0, 0, "unreadable")
                continue
        if real_root is None:
            real_root = Path(root).resolve()
        entry = _check_path(Path(root), real_root, rel, max_bytes)
        if entry is not None:
            yield entry


def stat_files(coll: Collection, max_bytes: int = DEFAULT_MAX_BYTES) -> list[tuple[str, float, int]] | None:
    """``(relative path, mtime, size)`` of the matching files, sorted, when every one of them is a plain
    regular file with a usable name under the size cap — what :func:`list_files` would list with
    no skip reason — else ``None`` (a link, a fifo, an odd name, a large file: use
    :func:`list_files`). The stat-only check of an unchanged collection: the walk of
    :func:`_walk` with the stat in the same loop and no entry objects."""
    want, ign = _matchers(coll)
    suffixes = _name_suffixes(coll)
    out: list[tuple[str, float, int]] = []
    stack = [("", str(coll.root))]
    while stack:
        prefix, path = stack.pop()
        fd = None
        try:  # through a folder descriptor where the OS allows: each stat is fstatat(folder, name),
            # not a lookup of the whole path again (~10 % less CPU on 10,000 notes)
            if _SCANDIR_FD:
                fd = os.open(path, _DIR_FLAGS)
                it = os.scandir(fd)
            else:
                it = os.scandir(path)
        except OSError:  # an unreadable folder: the full path reports it
            if fd is not None:
                os.close(fd)
            return None
        try:
            with it:
                for e in it:
                    name = e.name
                    rel = prefix + name
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append((rel + "/", path + os.sep + name))
                            continue
                        if suffixes is not None:  # the default mask: the name's end decides, no regex
                            hit = name.endswith(suffixes)
                        else:
                            hit = want.fullmatch(rel) is not None and (ign is None or ign.fullmatch(rel) is None)
                        if not hit:
                            if e.is_symlink() and os.path.isdir(path + os.sep + name):  # a mask could reach through it
                                return None
                            continue
                        if not e.is_file(follow_symlinks=False) or not (
                            rel.isascii() and rel.isprintable() or not bad_name(rel)
                        ):
                            return None
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        return None
                    if st.st_size > max_bytes:
                        return None
                    out.append((rel, st.st_mtime, st.st_size))
        finally:
            if fd is not None:
                os.close(fd)
    out.sort()
    return out


_SCANDIR_FD = os.scandir in os.supports_fd
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def stat_digest(stats: list[tuple[str, float, int]]) -> str:
    """A digest of a sorted ``(relative path, mtime, size)`` list (:func:`stat_files`'s, or the
    index's rows in path order): equal lists, equal digests. Paths joined by NUL (no path holds
    one), then the mtimes as float64 and sizes as int64: no per-file formatting.

    >>> a = [("a.md", 1.5, 10), ("b/c.md", 2.25, 20)]
    >>> stat_digest(a) == stat_digest(list(a)), stat_digest(a) == stat_digest([("a.md", 1.5, 11), a[1]])
    (True, False)
    >>> stat_digest([("a", 1.0, 1), ("b", 1.0, 1)]) == stat_digest([("a\\x00b", 1.0, 1)])
    False
    """
    h = hashlib.blake2b(len(stats).to_bytes(8, "little"), digest_size=20)
    if stats:
        rels, mtimes, sizes = zip(*stats)
        h.update("\0".join(rels).encode("utf-8", "surrogateescape"))
        h.update(array("d", mtimes).tobytes())
        h.update(array("q", sizes).tobytes())
    return h.hexdigest()


def _name_suffixes(coll: Collection) -> tuple[str, ...] | None:
    """When every mask is ``**/*SUFFIX`` (a literal suffix: the default ``**/*.md``) and nothing is
    ignored, the suffixes: a file matches when its name ends with one (``str.endswith``, not a
    regex on the whole path). Else ``None``.

    >>> _name_suffixes(Collection("a", Path("/x"), "**/*.md, **/*.txt")), _name_suffixes(Collection("a", Path("/x"), "*.md"))
    (('.md', '.txt'), None)
    """
    if coll.ignore:
        return None
    out = []
    for m in coll.masks:
        if not m.startswith("**/*") or any(ch in m[4:] for ch in "*?[]/\\"):
            return None
        out.append(m[4:])
    return tuple(out) or None


def check_globs(coll: Collection) -> None:
    """Raise :class:`GlobError` (one line) for a mask or ignore glob of ``coll`` that qmdlab will
    not match (:func:`_glob_regex`): before it is saved, not at the next ``update``."""
    _matchers(coll)


def _matchers(coll: Collection) -> tuple[re.Pattern, re.Pattern | None]:
    """The masks and the ignore patterns (each also at any depth) as two compiled regexes."""
    want = re.compile("|".join(f"(?:{_glob_regex(m)})" for m in coll.masks))
    ign = (
        re.compile("|".join(f"(?:{_glob_regex(q)})" for pat in coll.ignore for q in (pat, "**/" + pat)))
        if coll.ignore
        else None
    )
    return want, ign


def _walk(coll: Collection, unreadable: list[str] | None = None) -> tuple[dict[str, os.DirEntry], bool]:
    """``({relative path: directory entry}, met a link to a folder)`` of the files the masks
    match and no ignore pattern does, in one ``os.scandir`` walk that does not follow links;
    folders it cannot list are appended to ``unreadable`` (``"dir/"``, ``""`` for the root)."""
    want, ign = _matchers(coll)
    found: dict[str, os.DirEntry] = {}
    linked_dir = False
    stack = [("", str(coll.root))]
    while stack:
        prefix, path = stack.pop()
        try:
            it = os.scandir(path)
        except OSError:  # unreadable folder: Path.glob skips it too; the caller is told
            if unreadable is not None:
                unreadable.append(prefix)
            continue
        with it:
            for e in it:
                rel = prefix + e.name
                try:
                    if e.is_dir(follow_symlinks=False):
                        stack.append((rel + "/", e.path))
                        continue
                    if e.is_symlink() and not linked_dir and os.path.isdir(e.path):
                        linked_dir = True
                except OSError:
                    pass
                if want.fullmatch(rel) and (ign is None or not ign.fullmatch(rel)):
                    found[rel] = e
    return found, linked_dir


def list_files_glob(coll: Collection, max_bytes: int = DEFAULT_MAX_BYTES) -> Iterator[FileEntry]:
    """:func:`list_files` through ``Path.glob`` and ``Path.resolve`` for every file: the reference
    implementation (several times slower on 10,000 files) the fast one is tested against."""
    root = Path(coll.root)
    real_root = root.resolve()
    for rel in _glob_rels(coll):
        entry = _check_path(root, real_root, rel, max_bytes)
        if entry is not None:
            yield entry


def _glob_rels(coll: Collection) -> list[str]:
    """Sorted relative paths ``Path.glob`` finds for the masks, less the ignored ones."""
    root = Path(coll.root)
    seen: set[str] = set()
    for mask in coll.masks:
        for p in root.glob(mask):
            rel = p.relative_to(root).as_posix()
            if rel in seen or ignored(rel, coll.ignore):
                continue
            seen.add(rel)
    return sorted(seen)


def _check_path(root: Path, real_root: Path, rel: str, max_bytes: int) -> FileEntry | None:
    """The entry of one listed path (``None`` for a folder or a plain file that vanished)."""
    p = root / rel
    if bad_name(rel):
        return FileEntry(rel, str(p), 0.0, 0, "name")
    try:
        real = p.resolve()
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        return FileEntry(rel, str(p), 0.0, 0, "symlink")
    try:
        if real.is_dir():
            return None
        if not real.exists():  # broken link (a plain file that vanished mid-scan is dropped)
            return FileEntry(rel, str(p), 0.0, 0, "symlink") if p.is_symlink() else None
        if not real.is_file():  # a fifo, socket or device: never opened
            return FileEntry(rel, str(p), 0.0, 0, "unreadable")
        st = p.stat()
    except OSError:
        return FileEntry(rel, str(p), 0.0, 0, "unreadable")
    skip = None if real_root in real.parents else "symlink"
    if skip is None and st.st_size > max_bytes:
        skip = "large"
    return FileEntry(rel, str(p), st.st_mtime, st.st_size, skip)


class ReadResult(NamedTuple):
    """What :func:`read_file` read: the raw bytes, the text (``None`` when skipped), the skip
    reason, and the ``mtime`` and ``size`` of the file *that was read* (``fstat`` of the open
    descriptor, not an earlier scan's)."""

    raw: bytes
    text: str | None
    skip: str | None
    mtime: float = 0.0
    size: int = 0


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0) | _NONBLOCK
_PROC_FD = "/proc/self/fd"


def _opened_path(fd: int, path: str) -> str | None:
    """The real path of the file open on ``fd``: ``/proc/self/fd`` where the OS has it (what was
    opened, whatever the path names now); elsewhere the path resolved again, accepted only when
    it still names the same file as ``fd``."""
    try:
        real = os.readlink(f"{_PROC_FD}/{fd}")
        if real.startswith("/"):
            return real[: -len(" (deleted)")] if real.endswith(" (deleted)") else real
    except OSError:
        pass
    try:
        real = os.path.realpath(path)
        a, b = os.fstat(fd), os.stat(real)
    except OSError:
        return None
    return real if (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino) else None


def _inside(real: str, real_root: str) -> bool:
    """Is the real path ``real`` the folder ``real_root`` or below it?

    >>> _inside("/a/b/c.md", "/a/b"), _inside("/a/bc.md", "/a/b"), _inside("/x.md", "/")
    (True, False, True)
    """
    root = real_root.rstrip(os.sep) + os.sep
    return real.startswith(root) or real == real_root


def read_file(
    path: str | os.PathLike,
    real_root: str | os.PathLike | None = None,
    *,
    follow: bool = False,
    max_bytes: int | None = None,
) -> ReadResult:
    """Open and read one file safely: never a file outside ``real_root``, never a fifo or device.

    A folder of the path, or the file itself, may have been swapped for a symbolic link since the
    scan listed it; so the path is opened once (``O_NOFOLLOW`` first: a link as the last
    component is opened only when ``real_root`` is given, or with ``follow``) and the descriptor
    is what is checked: its real path (``/proc/self/fd``) must lie inside ``real_root`` (else
    ``symlink``), it must be a regular file (else ``unreadable``; opened non-blocking, so a
    fifo put in its place never hangs the read) and at most ``max_bytes`` long (else
    ``large``). ``mtime`` is the descriptor's ``fstat`` after the read, ``size`` the bytes read.

    The text rules are :func:`read_text`'s.
    """
    path = os.fspath(path)
    try:
        fd = os.open(path, _READ_FLAGS | (0 if follow else _NOFOLLOW))
    except OSError as err:
        if follow or err.errno not in (errno.ELOOP, errno.EMLINK):
            return ReadResult(b"", None, "unreadable")
        if real_root is None:  # the file itself is a link, and nothing says where it may lead
            return ReadResult(b"", None, "symlink")
        try:  # a link to a note inside the collection is indexed: where it leads is checked below
            fd = os.open(path, _READ_FLAGS)
        except OSError:
            return ReadResult(b"", None, "symlink")
    try:
        try:
            st = os.fstat(fd)
        except OSError:
            return ReadResult(b"", None, "unreadable")
        if not stat.S_ISREG(st.st_mode):
            return ReadResult(b"", None, "unreadable", st.st_mtime, 0)
        if real_root is not None:
            real = _opened_path(fd, path)
            if real is None or not _inside(real, os.fspath(real_root)):
                return ReadResult(b"", None, "symlink", st.st_mtime, st.st_size)
        if max_bytes is not None and st.st_size > max_bytes:
            return ReadResult(b"", None, "large", st.st_mtime, st.st_size)
        chunks = []
        total = 0
        limit = None if max_bytes is None else max_bytes + 1
        try:
            while True:
                want = 1 << 20 if limit is None else min(1 << 20, limit - total)
                if want <= 0:
                    break
                piece = os.read(fd, want)
                if not piece:
                    break
                chunks.append(piece)
                total += len(piece)
        except OSError:
            return ReadResult(b"", None, "unreadable", st.st_mtime, st.st_size)
        raw = b"".join(chunks)
        if max_bytes is not None and len(raw) > max_bytes:  # grew since the fstat
            return ReadResult(b"", None, "large", st.st_mtime, len(raw))
        try:
            st = os.fstat(fd)  # after the read: the date and size of what was read
        except OSError:
            pass
    finally:
        os.close(fd)
    _, text, skip = decode_text(raw)
    return ReadResult(raw, text, skip, st.st_mtime, len(raw))


def read_text(path: str | os.PathLike) -> tuple[bytes, str | None, str | None]:
    """``(raw bytes, text or None, skip reason or None)``. A UTF-8 BOM is dropped from the text;
    UTF-16 with a BOM is decoded. An unreadable file gives ``(b"", None, "unreadable")``."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return b"", None, "unreadable"
    return decode_text(raw)


def decode_text(raw: bytes) -> tuple[bytes, str | None, str | None]:
    """The text of a file's bytes, or why it is not text (:func:`read_text`'s rules)."""
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
    return re.fullmatch(_glob_regex(pattern), path) is not None


_ATOMIC = sys.version_info >= (3, 11)  # (?>...) groups; before 3.11 a glob is matched as written


class GlobError(ConfigError):
    """A glob qmdlab will not match: too long, a bad ``[...]`` class, or too many wildcards that
    could make the match backtrack (:data:`~qmdlab.store.limits.MAX_GLOB_BACKTRACKING`)."""


def _glob_tokens(pattern: str) -> list[tuple[str, str]]:
    """``(kind, regex)`` tokens: ``A`` (``*``), ``B`` (``**``), ``C`` (``**/``) are the wildcards;
    ``/`` a literal slash, ``c`` a class that can match a slash, ``f`` any other fixed-width token."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append(("C", "(?:.*/)?"))
            i += 3
        elif pattern.startswith("**", i):
            out.append(("B", ".*"))
            i += 2
        elif pattern[i] == "*":
            out.append(("A", "[^/]*"))
            i += 1
        elif pattern[i] == "?":
            out.append(("f", "[^/]"))
            i += 1
        elif pattern[i] == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(("f", re.escape("[")))
                i += 1
            else:
                body = pattern[i + 1 : j].replace("\\", "\\\\")
                cls = "[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]"
                try:
                    slash = re.fullmatch(cls, "/") is not None
                except re.error as err:
                    raise GlobError(f"glob {pattern!r}: bad character class {pattern[i : j + 1]!r} ({err})") from None
                out.append(("c" if slash else "f", cls))
                i = j + 1
        else:
            out.append(("/" if pattern[i] == "/" else "f", re.escape(pattern[i])))
            i += 1
    return out


# Two wildcards side by side match what one does: ``**/**/`` is ``**/``, ``**/*`` is ``**`` …
_MERGE = {("A", "A"): "A", ("C", "C"): "C", ("C", "A"): "B"}
_STAR_RE = {"A": "[^/]*", "B": ".*", "C": "(?:.*/)?"}
_LAZY_RE = {"A": "[^/]*?", "B": ".*?", "C": "(?:.*?/)??"}


def _pinned(fixed: list[tuple[str, str]]) -> bool:
    """After a ``*``: does the fixed part hold a literal ``/`` with nothing before it that can match
    one? Then ``*`` ends at the first ``/`` it meets: the part has one place only."""
    for kind, _ in fixed:
        if kind == "/":
            return True
        if kind != "f":
            return False
    return False


@functools.lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> str:
    """The regular expression (unanchored) of a :func:`glob_match` pattern, written so that
    matching cannot backtrack without bound.

    A glob of wildcards and fixed parts is a regex of quantifiers, and a naive one backtracks
    through every way to split a path between them (``**/`` twelve times against a 25-folder
    path: 51 s; ``*a*a*a*a*a*b`` against a 120-character name: 2 minutes). So: adjacent
    wildcards are merged first (``**/**/`` → ``**/``, ``**/*`` → ``**``); then a wildcard
    followed by a fixed part and another wildcard takes the *first* place the fixed part fits,
    atomically, wherever that provably loses no match (the next wildcard can absorb whatever the
    first place leaves: it is ``**``, or it is ``**/`` after a part ending in ``/``, or both are
    ``*`` around a part that cannot match ``/``: the classic greedy wildcard match; or the part
    has one place only: a ``*`` then a part with a ``/`` ends at the first ``/``). At most
    :data:`~qmdlab.store.limits.MAX_GLOB_BACKTRACKING` wildcards may remain free to backtrack
    (the last one always does: it is matched against the end); a glob with more, or over
    :data:`~qmdlab.store.limits.MAX_GLOB_CHARS` characters, is refused (:class:`GlobError`).

    >>> _glob_regex("**/*.md"), _glob_regex("kb/**/**/x")
    ('.*\\\\.md', 'kb/(?:.*/)?x')
    """
    from qmdlab.store.limits import MAX_GLOB_BACKTRACKING, MAX_GLOB_CHARS

    if len(pattern) > MAX_GLOB_CHARS:
        raise GlobError(f"a glob of {len(pattern)} characters, over {MAX_GLOB_CHARS}; shorten it")
    tokens: list[tuple[str, str]] = []
    for kind, rx in _glob_tokens(pattern):
        if tokens and kind in "ABC" and tokens[-1][0] in "ABC":
            prev = tokens[-1][0]
            merged = "B" if "B" in (prev, kind) else _MERGE.get((prev, kind))
            if merged is not None:
                tokens[-1] = (merged, _STAR_RE[merged])
                continue
        tokens.append((kind, rx))
    # segments: fixed runs between wildcards
    stars = [k for k, (kind, _) in enumerate(tokens) if kind in "ABC"]
    out: list[str] = [rx for _, rx in tokens[: stars[0] if stars else len(tokens)]]
    free = 0
    for n, at in enumerate(stars):
        star = tokens[at][0]
        end = stars[n + 1] if n + 1 < len(stars) else len(tokens)
        fixed = tokens[at + 1 : end]
        after = tokens[end][0] if end < len(tokens) else None
        commit = (
            _ATOMIC
            and fixed
            and (
                after == "B"
                or (after == "C" and fixed[-1][0] == "/")
                or (after == "A" and star == "A" and all(k == "f" for k, _ in fixed))
                or (star == "A" and _pinned(fixed))
            )
        )
        body = "".join(rx for _, rx in fixed)
        if commit:
            out.append(f"(?>{_LAZY_RE[star]}{body})")
        else:
            free += 1
            out.append(_STAR_RE[star] + body)
    if free > MAX_GLOB_BACKTRACKING and _ATOMIC:  # (before Python 3.11 no glob is refused: matched as written)
        raise GlobError(
            f"glob {pattern!r} has {free} wildcards whose matches could backtrack (at most "
            f"{MAX_GLOB_BACKTRACKING}); use fewer '*', or put a '/' or '**' between them"
        )
    return "".join(out)
