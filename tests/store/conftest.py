"""Fixtures for store tests: a small notes folder and an index in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from qmdlab.store import Index

NOTES = {
    "git.md": "---\ntitle: Git rebase guide\ntags: [git, howto]\ndate: 2024-03-05\nauthor: Ann\n---\n"
    "# Rebasing\n\nUse git rebase -i to squash commits.\n",
    "cooking/pasta.md": "# Pasta\n\nBoil water, add salt, cook the pasta.\n",
    "cooking/soup.md": "Tomato soup without a heading.\n",
    "jp.md": "# 東京メモ\n\n東京大学の講義ノート。\n",
}


def write_notes(root: Path, notes: dict[str, str | bytes] = NOTES) -> Path:
    for rel, body in notes.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, bytes):
            p.write_bytes(body)
        else:
            p.write_text(body, encoding="utf-8")
    return root


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and mtime_ns of every file under root (to prove the index never writes there)."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def notes(tmp_path) -> Path:
    return write_notes(tmp_path / "notes")


@pytest.fixture
def index(tmp_path, notes) -> Index:
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("notes", notes)
    yield idx
    idx.close()
