"""A full or read-only disk, for real: the index on a small tmpfs.

Every writer that runs out of space prints one line naming the file, the free space and the fix;
the index is never corrupted, ``collections.yaml`` never half-written, and once space is freed
the same command works. On a read-only file system writers refuse with one line and readers
still answer.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import cli_env, make_corpus


def _mount(path: Path, *options: str) -> bool:
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(path)], capture_output=True, text=True
    )
    return proc.returncode == 0


@pytest.fixture
def disk(tmp_path):
    """``disk(size)``: a tmpfs of that size under ``tmp_path`` (unmounted afterwards)."""
    mounted = []

    def make(size: str) -> Path:
        mnt = tmp_path / "disk"
        mnt.mkdir()
        if os.geteuid() != 0 or shutil.which("mount") is None or not _mount(mnt, f"size={size}"):
            pytest.skip("mounting a tmpfs needs root (CAP_SYS_ADMIN); the disk-full paths are then untested here")
        mounted.append(mnt)
        return mnt

    yield make
    for mnt in mounted:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _cli(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "qmdlab.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )


def _one_line(proc, *words) -> bool:
    """Exit 1 with one ``error:`` line holding ``words`` (progress bars aside), no traceback."""
    errors = [line for line in proc.stderr.replace("\r", "\n").splitlines() if "error:" in line]
    return (
        proc.returncode == 1
        and "Traceback" not in proc.stderr
        and len(errors) == 1
        and all(w in errors[0] for w in words)
    )


def _sound(db: Path, tmp: Path) -> bool:
    """``PRAGMA integrity_check`` on a copy (database and WAL) made on a roomy disk."""
    copy = tmp / "copy"
    copy.mkdir(exist_ok=True)
    for suffix in ("", "-wal"):
        if Path(f"{db}{suffix}").exists():
            shutil.copy(f"{db}{suffix}", copy / f"index.sqlite{suffix}")
    conn = sqlite3.connect(copy / "index.sqlite")
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def _fill(mnt: Path) -> Path:
    """Take whatever space is left (none may be: the failed write's WAL can hold it)."""
    filler = mnt / "filler"
    try:
        with open(filler, "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass
    return filler


def test_writers_on_a_full_disk_say_so_in_one_line_and_recover(disk, tmp_path):
    small_disk = disk("320k")
    (root,) = make_corpus(tmp_path / "kb", 400, seed=5)
    index = small_disk / "idx"
    env = cli_env(tmp_path / "home", QMDLAB_INDEX=str(index), QMDLAB_PRESET="fake")
    proc = _cli(env, "collection", "add", str(root), "--name", "c0")
    assert _one_line(proc, "the disk is full", "free", str(index)), proc.stderr[-3000:]
    db = index / "index.sqlite"
    assert _sound(db, tmp_path)

    yaml_before = (index / "collections.yaml").read_bytes()
    filler = _fill(small_disk)
    proc = _cli(env, "context", "add", "c0", "notes about things")
    assert _one_line(proc, "the disk is full", "collections.yaml"), proc.stderr[-3000:]
    assert (index / "collections.yaml").read_bytes() == yaml_before
    assert not (index / "collections.yaml.tmp").exists()
    for args in (("update", "--no-progress"), ("cleanup",)):
        proc = _cli(env, *args)
        assert proc.returncode == 0 or _one_line(proc, "the disk is full"), (args, proc.stderr[-3000:])
    assert _sound(db, tmp_path)

    filler.unlink(missing_ok=True)
    assert subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)]).returncode == 0
    proc = _cli(env, "update", "--no-progress")
    assert proc.returncode == 0 and "400 new" in proc.stdout, proc.stderr[-3000:]
    proc = _cli(env, "context", "add", "c0", "notes about things")
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_read_only_index_refuses_writes_in_one_line_and_still_answers(disk, tmp_path):
    small_disk = disk("16m")
    (root,) = make_corpus(tmp_path / "kb", 30, seed=6)
    index = small_disk / "idx"
    env = cli_env(tmp_path / "home", QMDLAB_INDEX=str(index), QMDLAB_PRESET="fake")
    assert _cli(env, "collection", "add", str(root), "--name", "c0").returncode == 0
    assert subprocess.run(["mount", "-o", "remount,ro", str(small_disk)]).returncode == 0
    (root / "d0" / "n00000.md").write_text("# changed\n\nnew words\n")
    proc = _cli(env, "update", "--no-progress")
    assert _one_line(proc, "read-only", str(index)), proc.stderr[-3000:]
    proc = _cli(env, "context", "add", "c0", "more")
    assert _one_line(proc, "read-only", "collections.yaml"), proc.stderr[-3000:]
    for args in (("search", "alpha"), ("ls", "c0"), ("status",), ("get", "c0/d0/n00000.md")):
        proc = _cli(env, *args)
        assert proc.returncode == 0 and proc.stdout, (args, proc.stderr[-3000:])
