"""A folder ``update`` cannot read is not a folder without files.

An unreadable sub-folder is reported as skipped and the documents under it stay indexed; an
unreadable root, or a root that suddenly holds none (or far fewer) of the indexed files — an
unmounted mount point — is refused with nothing changed unless ``allow_vanish``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from qmdlab.errors import StoreError
from qmdlab.store import Index

from .conftest import write_notes

NOTES = {f"meetings/m{i}.md": f"# Meeting {i}\n\nminutes {i}\n" for i in range(4)}
NOTES.update({f"n{i:02d}.md": f"# Note {i}\n\nbody {i}\n" for i in range(12)})


def _deny(monkeypatch, *paths):
    """Listing ``paths`` fails with EACCES, as for ``chmod 000`` (which root ignores): ``os.scandir``
    of the path and ``os.open`` of it as a folder."""
    real_scandir, real_open = os.scandir, os.open
    denied = {os.path.realpath(p) for p in paths}

    def check(path):
        if isinstance(path, (str, os.PathLike)) and os.path.realpath(path) in denied:
            raise PermissionError(13, "Permission denied", os.fspath(path))

    def scandir(path="."):
        check(path)
        return real_scandir(path)

    def open_(path, flags, *args, **kwargs):
        if flags & getattr(os, "O_DIRECTORY", 0):
            check(path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "open", open_)


@pytest.fixture
def idx(tmp_path):
    write_notes(tmp_path / "notes", NOTES)
    with Index.open(str(tmp_path / "idx")) as index:
        index.add_collection("notes", tmp_path / "notes")
        assert index.update().new == len(NOTES)
        yield index


def _active(index) -> int:
    return index.conn.execute("SELECT count(*) FROM documents WHERE active = 1").fetchone()[0]


def test_unreadable_subfolder_is_skipped_and_its_documents_kept(idx, tmp_path, monkeypatch):
    (tmp_path / "notes" / "n00.md").write_text("# Note 0\n\nchanged\n")
    _deny(monkeypatch, tmp_path / "notes" / "meetings")
    rep = idx.update()
    assert rep.vanished == 0 and rep.changed == 1
    assert rep.skip_counts() == {"unreadable": 1} and ("notes/meetings/", "unreadable") in rep.skipped_paths
    assert _active(idx) == len(NOTES)
    assert idx.get("notes/meetings/m1.md").body == "# Meeting 1\n\nminutes 1\n"
    monkeypatch.undo()
    (tmp_path / "notes" / "meetings" / "m3.md").unlink()  # readable again: its changes are picked up
    assert idx.update().vanished == 1


def test_unreadable_root_is_refused_and_nothing_changes(idx, tmp_path, monkeypatch):
    _deny(monkeypatch, tmp_path / "notes")
    with pytest.raises(StoreError, match=r"root .* cannot be read; fix its permissions \(nothing was changed\)"):
        idx.update()
    assert _active(idx) == len(NOTES)


@pytest.mark.parametrize("keep", [0, 3])
def test_a_root_emptied_or_mostly_emptied_is_refused_unless_allowed(idx, tmp_path, keep):
    notes = tmp_path / "notes"
    shutil.rmtree(notes)  # an unmounted mount point: the folder is there, the files are not
    notes.mkdir()
    write_notes(notes, dict(list(NOTES.items())[:keep]))
    with pytest.raises(StoreError, match=r"are gone from .*`qmdlab update --allow-vanish`"):
        idx.update()
    assert _active(idx) == len(NOTES)
    rep = idx.update(allow_vanish=True)
    assert rep.vanished == len(NOTES) - keep and _active(idx) == keep


def test_deleting_a_few_files_or_moving_all_of_them_is_not_refused(idx, tmp_path):
    notes = tmp_path / "notes"
    for i in range(3):
        (notes / f"n{i:02d}.md").unlink()
    assert idx.update().vanished == 3
    os.rename(notes / "meetings", notes / "archive")  # every meeting moves: same count of files
    rep = idx.update()
    assert rep.moved == 4 and rep.vanished == 0


def test_cli_update_refuses_an_emptied_root_with_one_line(idx, tmp_path):
    notes = tmp_path / "notes"
    shutil.rmtree(notes)
    notes.mkdir()
    env = dict(os.environ, QMDLAB_INDEX=str(idx.dir))
    proc = subprocess.run(
        [sys.executable, "-m", "qmdlab.cli", "update", "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "--allow-vanish" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "qmdlab.cli", "update", "--no-progress", "--allow-vanish"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and f"{len(NOTES)} vanished" in proc.stdout, proc.stderr
