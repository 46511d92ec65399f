"""A folder swapped for a symbolic link between ``update``'s scan and its read.

The probe replaced a folder of a collection with a link to a folder outside it while ``update``
ran: the files listed inside were read through the link, indexed with the outside files' text,
and kept the inside files' size and date, so later updates kept them. Here the swap happens at
the exact point between the scan (``list_files``) and the reads, with no sleeps: the scan's
result is taken, the folder is swapped, then ``update`` goes on reading.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from qmdlab.store import Index, update

SECRET = "outside-secret-token"


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "notes"
    (root / "sub").mkdir(parents=True)
    (root / "top.md").write_text("# Top\n\nan inside note\n", encoding="utf-8")
    for i in range(3):
        (root / "sub" / f"n{i}.md").write_text(f"# Inside {i}\n\ninside words {i}\n", encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    for i in range(3):  # same names, other text (and other sizes)
        (outside / f"n{i}.md").write_text(f"# Secret {i}\n\n{SECRET} {i} and more bytes\n", encoding="utf-8")
    return root, outside


def _swap_after_scan(monkeypatch, root: Path, outside: Path) -> list[int]:
    """Wrap ``update``'s scan: once it has listed the files, swap ``sub/`` for a link to ``outside``."""
    real = update.list_files
    swaps: list[int] = []

    def scan_then_swap(coll, *args, **kwargs):
        entries = list(real(coll, *args, **kwargs))
        if not swaps:
            shutil.rmtree(root / "sub")
            os.symlink(outside, root / "sub")
            swaps.append(len(entries))
        return iter(entries)

    monkeypatch.setattr(update, "list_files", scan_then_swap)
    return swaps


def _indexed_text(idx: Index) -> str:
    return "\n".join((idx.get(d).body or "") for d in idx.documents()["docno"].to_list())


@pytest.mark.parametrize("indexed_before", [False, True], ids=["new-files", "changed-files"])
def test_a_folder_swapped_for_a_link_after_the_scan_indexes_nothing_from_outside(tmp_path, monkeypatch, indexed_before):
    root, outside = _layout(tmp_path)
    with Index(tmp_path / "idx") as idx:
        idx.add_collection("c", root)
        if indexed_before:
            assert idx.update().new == 4
            for i in range(3):  # changed since: the next update reads them again
                (root / "sub" / f"n{i}.md").write_text(f"# Inside {i}\n\nchanged {i}\n", encoding="utf-8")
        swaps = _swap_after_scan(monkeypatch, root, outside)
        rep = idx.update()
        assert swaps == [4]  # the swap happened between the scan and the reads
        assert SECRET not in _indexed_text(idx)
        assert rep.skipped_symlink == 3, rep
        assert {p for p, r in rep.skipped_paths if r == "symlink"} == {f"c/sub/n{i}.md" for i in range(3)}
        assert set(idx.documents()["docno"]) == {"c/top.md"}
        monkeypatch.undo()
        # a quiet update afterwards (the link still there) keeps the outside out
        rep = idx.update()
        assert SECRET not in _indexed_text(idx)
        assert set(idx.documents()["docno"]) == {"c/top.md"}


def test_a_file_swapped_for_a_link_after_the_scan_is_not_read(tmp_path, monkeypatch):
    """The last component itself: a note replaced by a link to an outside file after the scan."""
    root, outside = _layout(tmp_path)
    real = update.list_files

    def scan_then_swap(coll, *args, **kwargs):
        entries = list(real(coll, *args, **kwargs))
        (root / "top.md").unlink()
        os.symlink(outside / "n0.md", root / "top.md")
        return iter(entries)

    with Index(tmp_path / "idx") as idx:
        idx.add_collection("c", root)
        monkeypatch.setattr(update, "list_files", scan_then_swap)
        rep = idx.update()
        assert SECRET not in _indexed_text(idx)
        assert ("c/top.md", "symlink") in rep.skipped_paths


def test_stored_size_and_date_are_those_of_the_bytes_read(tmp_path, monkeypatch):
    """A file rewritten between the scan and the read: the row records what was read, so the next
    update's stat check sees the file as it is (the probe's outside files kept the inside's stat)."""
    root, _ = _layout(tmp_path)
    real = update.list_files
    note = root / "top.md"

    def scan_then_rewrite(coll, *args, **kwargs):
        entries = list(real(coll, *args, **kwargs))
        note.write_text("# Top\n\nrewritten after the scan, longer than before\n", encoding="utf-8")
        os.utime(note, (1_000_000_000, 1_000_000_000))
        return iter(entries)

    with Index(tmp_path / "idx") as idx:
        idx.add_collection("c", root)
        monkeypatch.setattr(update, "list_files", scan_then_rewrite)
        idx.update()
        monkeypatch.undo()
        row = idx.conn.execute("SELECT mtime, size FROM documents WHERE path = 'top.md'").fetchone()
        st = note.stat()
        assert row == (st.st_mtime, st.st_size)
        assert "rewritten after the scan" in idx.get("c/top.md").body
        rep = idx.update()
        assert rep.unchanged == 4 and rep.changed == 0
