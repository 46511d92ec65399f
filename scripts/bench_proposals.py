"""Prototypes of fixes for rows that miss their goal, measured by ``scripts/bench.py`` next to the
real code so the owning area can adopt them with numbers in hand. Nothing in ``qmdlab`` imports
this module; each prototype is checked against the real function's output before it is timed.

- :func:`list_files_scandir` — ``qmdlab.store.scan.list_files`` without pathlib: one
  ``os.scandir`` walk (directory entries carry the file type, so only one ``stat`` per file), the
  masks and ignores as precompiled regexes, ``realpath`` only for symlinks (a regular file
  reached without crossing a symlink is inside the root by construction), and ``abs_path`` a
  ``str`` (``read_text`` then needs ``open(path, "rb")`` instead of ``path.read_bytes()``).

The vector (``np.maximum.reduceat``), BM25 (top-k-first join) and query-embedding memo
prototypes that used to live here have been adopted by ``qmdlab.search`` and
``qmdlab.models.cached.MemoEmbedder``, so the plain rows of ``bench.py`` now measure them.
"""
from __future__ import annotations

import os
import re
from typing import Iterator



def _glob_regex(pattern: str) -> str:
    """The regex :func:`qmdlab.store.scan.glob_match` builds (same translation), to compile once."""
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
    return "".join(out)


def list_files_scandir(coll, max_bytes: int = 5 * 1024 * 1024) -> Iterator:
    """Same entries as ``qmdlab.store.scan.list_files`` (sorted by relative path)."""
    from qmdlab.store.scan import FileEntry

    root = str(coll.root)
    real_root = os.path.realpath(root)
    want = re.compile("|".join(f"(?:{_glob_regex(m)})" for m in coll.masks))
    ign = [re.compile(_glob_regex(p)) for p in coll.ignore] + [re.compile(_glob_regex("**/" + p)) for p in coll.ignore]
    found: list[tuple[str, os.DirEntry]] = []
    stack = [("", root)]
    while stack:
        prefix, path = stack.pop()
        try:
            it = os.scandir(path)
        except OSError:
            continue
        with it:
            for e in it:
                rel = prefix + e.name
                try:
                    is_dir = e.is_dir(follow_symlinks=False)
                except OSError:
                    continue
                if is_dir:
                    stack.append((rel + "/", e.path))
                    continue
                if want.fullmatch(rel) and not any(r.fullmatch(rel) for r in ign):
                    found.append((rel, e))
    found.sort(key=lambda x: x[0])
    for rel, e in found:
        try:
            if e.is_symlink():
                real = os.path.realpath(e.path)
                if not os.path.isfile(real):
                    continue
                st = os.stat(e.path)
                inside = real.startswith(real_root + os.sep)
            else:
                if not e.is_file(follow_symlinks=False):
                    continue
                st = e.stat(follow_symlinks=False)
                inside = True
        except OSError:
            continue
        skip = None if inside else "symlink"
        if skip is None and st.st_size > max_bytes:
            skip = "large"
        # a str path: building 10k pathlib objects costs more than the stat calls; ``read_text``
        # would open it with ``open(path, "rb")`` (it is only read when mtime/size changed)
        yield FileEntry(rel, e.path, st.st_mtime, st.st_size, skip)
