"""Only `collection add` (and `import-qmd`, `init`) create an index: reading verbs open existing
indexes only, and every other writer (`update`, `embed`, `trust`, `trust revoke`, the `collection`
and `context` changes) opens an index whose database or collections.yaml exists. A mistyped
--index, or a notes folder given as --index, gets one line naming it and listing the indexes that
exist, and nothing is written anywhere."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.store import Index

from .conftest import snapshot, write_notes

READING = [
    ("search", "pasta"),
    ("vsearch", "--preset", "fake", "pasta"),
    ("query", "--preset", "fake", "pasta"),
    ("get", "notes/git.md"),
    ("multi-get", "notes/*.md"),
    ("ls",),
    ("status",),
    ("collection", "list"),
    ("context", "list"),
    ("cleanup",),
    ("mcp",),
]


#: Verbs that write to an index but never create one.
WRITING = [
    ("update", "--no-progress"),
    ("embed", "--preset", "fake"),
    ("trust",),
    ("trust", "--yes"),
    ("trust", "revoke"),
    ("collection", "remove", "notes"),
    ("collection", "rename", "notes", "n2"),
    ("collection", "include", "notes"),
    ("collection", "exclude", "notes"),
    ("collection", "ignore", "notes", "drafts/**"),
    ("collection", "update-cmd", "notes", "true"),
    ("context", "add", "notes", "text"),
    ("context", "rm", "notes"),
    ("expand-docs", "--clear"),
]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("QMDLAB_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("QMDLAB_INDEX", raising=False)
    notes = write_notes(tmp_path / "notes")
    with Index.open("main") as idx:
        idx.add_collection("notes", notes)
        idx.update()
    return tmp_path


def _one_line(res, *words) -> bool:
    return (
        res.exit_code == 1
        and isinstance(res.exception, SystemExit)
        and res.stderr.count("\n") == 1
        and all(w in res.stderr for w in words)
    )


@pytest.mark.parametrize("args", READING, ids=lambda a: " ".join(a))
def test_a_mistyped_index_name_is_named_and_not_created(home, args):
    res = CliRunner().invoke(cli, ["--index", "mian", *args])
    assert _one_line(res, "no index at", "'mian'", "existing indexes: main"), (res.output, res.exception)
    assert not (home / "home" / "indexes" / "mian").exists()


@pytest.mark.parametrize("args", [("status",), ("search", "pasta"), ("ls",)], ids=lambda a: " ".join(a))
def test_a_notes_folder_given_as_index_is_never_written(home, args):
    before = snapshot(home / "notes")
    res = CliRunner().invoke(cli, ["--index", str(home / "notes"), *args])
    assert _one_line(res, "no index at", str(home / "notes")), (res.output, res.exception)
    assert snapshot(home / "notes") == before and not (home / "notes" / "index.sqlite").exists()


@pytest.mark.parametrize("args", WRITING, ids=lambda a: " ".join(a))
def test_a_writer_refuses_a_mistyped_index_and_creates_nothing(home, args):
    res = CliRunner().invoke(cli, ["--index", "mian", *args])
    assert _one_line(res, "no index at", "'mian'", "existing indexes: main", "`qmdlab collection add PATH`"), (
        res.output,
        res.exception,
    )
    assert not (home / "home" / "indexes" / "mian").exists()


@pytest.mark.parametrize(
    "args",
    [("update",), ("embed", "--preset", "fake"), ("trust", "--yes"), ("context", "add", "/", "t")],
    ids=lambda a: " ".join(a),
)
def test_a_writer_never_makes_an_index_in_a_notes_folder(home, args):
    before = snapshot(home / "notes")
    res = CliRunner().invoke(cli, ["--index", str(home / "notes"), *args])
    assert _one_line(res, "no index at", str(home / "notes")), (res.output, res.exception)
    assert snapshot(home / "notes") == before and not (home / "notes" / "index.sqlite").exists()


def test_a_writer_opens_an_index_that_has_only_its_config(home, tmp_path):
    """A project checked out (collections.yaml committed, the database not): `update` builds it."""
    import shutil

    src = home / "home" / "indexes" / "main"
    fresh = tmp_path / "checkout-idx"
    fresh.mkdir()
    shutil.copy(src / "collections.yaml", fresh / "collections.yaml")
    assert CliRunner().invoke(cli, ["--index", str(fresh), "status"]).exit_code == 1  # a reader: no database yet
    res = CliRunner().invoke(cli, ["--index", str(fresh), "update", "--no-progress"])
    assert res.exit_code == 0 and (fresh / "index.sqlite").is_file(), res.output


def test_writing_verbs_still_create_an_index(home):
    res = CliRunner().invoke(cli, ["--index", "fresh", "collection", "add", str(home / "notes"), "--name", "n"])
    assert res.exit_code == 0, (res.output, res.exception)
    res = CliRunner().invoke(cli, ["--index", "fresh", "search", "pasta"])
    assert res.exit_code == 0 and "n/cooking/pasta.md" in res.stdout


def test_open_without_create_writes_nothing(tmp_path, monkeypatch):
    from qmdlab.errors import StoreError

    monkeypatch.setenv("QMDLAB_HOME", str(tmp_path / "home"))
    with pytest.raises(StoreError, match="no index exists yet"):
        Index.open("nope", create=False)
    assert not (tmp_path / "home").exists()
