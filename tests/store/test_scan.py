"""The fast file listing (one ``os.scandir`` walk) against the ``Path.glob`` reference, entry for entry."""

from __future__ import annotations

import os

import pytest

from qmdlab.store.config import Collection
from qmdlab.store.scan import list_files, list_files_glob, stat_files

from .conftest import write_notes

MASKS = [
    ("**/*.md",),
    ("*.md",),
    ("**/*.md", "*.txt"),
    ("sub/**/*.md",),
    ("sub/*.md", "**/n?.md"),
    ("**/*.md", "linked/*.md"),
    ("[ab]*.md", "**/[!x]*.txt"),
    ("**/*.md", "**/*.txt"),
    ("**/*",),
]  # the last two: stat_files' name-suffix path (no regex)
IGNORES = [(), ("drafts/**",), ("*tmp.md", "sub/deep/**")]


@pytest.fixture
def tree(tmp_path):
    root = write_notes(
        tmp_path / "r",
        {
            "a.md": "# a\n",
            "b.txt": "b\n",
            "n1.md": "n1\n",
            "big.md": "x" * 5000,
            "empty.md": "",
            "sub/c.md": "# c\n",
            "sub/deep/d.md": "# d\n",
            "sub/e.tmp.md": "tmp\n",
            "sub/x.txt": "x\n",
            "drafts/f.md": "# f\n",
            ".hidden/g.md": "# g\n",
            "dir.md/inner.md": "# inner\n",
            "bad\tname.md": "# tab\n",
        },
    )
    outside = write_notes(tmp_path / "outside", {"secret.md": "# secret\n"})
    os.symlink(root / "a.md", root / "sub" / "link-in.md")
    os.symlink(outside / "secret.md", root / "link-out.md")
    os.symlink(root / "missing.md", root / "broken.md")
    os.symlink(root / "loop2.md", root / "loop1.md")
    os.symlink(root / "loop1.md", root / "loop2.md")
    os.mkfifo(root / "pipe.md")
    return root, outside


def _collection(root, masks, ignore) -> Collection:
    return Collection(name="r", root=root, mask=", ".join(masks), ignore=tuple(ignore))


@pytest.mark.parametrize("ignore", IGNORES)
@pytest.mark.parametrize("masks", MASKS)
def test_scandir_listing_equals_glob_listing(tree, masks, ignore):
    root, _ = tree
    coll = _collection(root, masks, ignore)
    fast = list(list_files(coll, max_bytes=1000))
    assert fast == list(list_files_glob(coll, max_bytes=1000))
    assert fast, "the tree has matching files for every mask"
    stats = stat_files(coll, max_bytes=1000)
    if any(e.skip for e in fast):
        assert stats is None  # (None is also allowed without a skip: a link inside the root, say)
    if stats is not None:
        assert stats == [(e.rel, e.mtime, e.size) for e in fast]


@pytest.mark.parametrize("ignore", IGNORES)
@pytest.mark.parametrize("masks", MASKS)
def test_stat_files_equals_the_listing_on_a_clean_tree(tmp_path, masks, ignore):
    """No link, odd name or large file: ``stat_files`` gives every listed file's mtime and size, in order."""
    root = write_notes(
        tmp_path / "r",
        {
            "a.md": "# a\n",
            "b.txt": "b\n",
            "n1.md": "n1\n",
            "sub/c.md": "# c\n",
            "sub/deep/d.md": "# d\n",
            "sub/e.tmp.md": "tmp\n",
            "drafts/f.md": "# f\n",
            ".hidden/g.md": "# g\n",
            "dir.md/inner.md": "# inner\n",
        },
    )
    coll = _collection(root, masks, ignore)
    listed = list(list_files_glob(coll))
    assert all(e.skip is None for e in listed)
    assert stat_files(coll) == [(e.rel, e.mtime, e.size) for e in listed]


@pytest.mark.parametrize("masks", [("**/*.md",), ("**/*.md", "linked/*.md"), ("*/*.md",)])
def test_listing_with_a_folder_link_equals_glob_listing(tree, masks):
    """A link to a folder sends the listing through Path.glob: ``linked/*.md`` reaches through it."""
    root, outside = tree
    os.symlink(outside, root / "linked")
    coll = _collection(root, masks, ())
    fast = list(list_files(coll))
    assert fast == list(list_files_glob(coll))
    assert ("linked/secret.md" in {e.rel for e in fast}) == (masks != ("**/*.md",))


def test_skip_reasons_of_the_fast_listing(tree):
    root, _ = tree
    got = {e.rel: e.skip for e in list_files(_collection(root, ("**/*.md",), ()), max_bytes=1000)}
    assert got["a.md"] is None and got["sub/link-in.md"] is None and got["empty.md"] is None
    assert (got["big.md"], got["link-out.md"], got["broken.md"], got["loop1.md"]) == (
        "large",
        "symlink",
        "symlink",
        "symlink",
    )
    assert (got["pipe.md"], got["bad\tname.md"]) == ("unreadable", "name")
    assert "dir.md" not in got and got["dir.md/inner.md"] is None and got[".hidden/g.md"] is None


def test_the_fast_listing_stats_each_file_once(tree, monkeypatch):
    """No ``os.stat`` of a regular file (its stat comes from the directory entry); links are looked at."""
    root, _ = tree
    coll = _collection(root, ("sub/**/*.md",), ("*tmp.md", "*link*"))
    calls = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda *a, **k: calls.append(a) or real_stat(*a, **k))
    entries = list(list_files(coll))
    assert [e.rel for e in entries] == ["sub/c.md", "sub/deep/d.md"]
    assert calls and all(os.path.islink(a[0]) for a in calls)  # only links are followed (to spot folder links)


# ---------------------------------------------------------------- the stat-only update path
def _no_transaction(monkeypatch):
    from qmdlab.store import index as index_mod

    def refuse(self, label="txn"):
        raise AssertionError("the unchanged collection opened a write transaction")

    monkeypatch.setattr(index_mod.Index, "transaction", refuse)


def test_unchanged_update_opens_no_transaction(tmp_path, monkeypatch):
    from qmdlab.store import Index

    notes = {f"d{i % 3}/n{i}.md": f"# note {i}\n" for i in range(26)}
    # names whose order differs between naive and code-point sorting: SQL and Python must agree
    notes.update({"Ärger.md": "# a\n", "zeta.md": "# z\n", "東京/メモ.md": "# t\n", "d0/a b.md": "# s\n"})
    root = write_notes(tmp_path / "n", notes)
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", root)
    assert idx.update().new == 30
    with monkeypatch.context() as m:
        _no_transaction(m)
        rep = idx.update()
    assert (rep.scanned, rep.unchanged, rep.new, rep.changed, rep.vanished) == (30, 30, 0, 0, 0)
    (root / "d0" / "n0.md").write_text("# note 0, longer now\n", encoding="utf-8")
    with monkeypatch.context() as m:
        _no_transaction(m)
        with pytest.raises(AssertionError, match="write transaction"):  # a change takes the full path
            idx.update()
    rep = idx.update()
    assert (rep.unchanged, rep.changed) == (29, 1)


@pytest.mark.parametrize("change", ["vanished", "new", "empty-file", "touched-same-bytes"])
def test_stat_only_path_hands_every_difference_to_the_full_path(tmp_path, change):
    from qmdlab.store import Index

    root = write_notes(tmp_path / "n", {f"n{i}.md": f"# note {i}\n" for i in range(5)})
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", root)
    idx.update()
    if change == "vanished":
        (root / "n1.md").unlink()
    elif change == "new":
        (root / "n9.md").write_text("# nine\n", encoding="utf-8")
    elif change == "empty-file":
        (root / "e.md").write_text("  \n", encoding="utf-8")
    else:
        st = (root / "n2.md").stat()
        os.utime(root / "n2.md", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    rep = idx.update()
    expect = {
        "vanished": (4, 0, 1, 0),
        "new": (5, 1, 0, 0),
        "empty-file": (5, 0, 0, 1),
        "touched-same-bytes": (5, 0, 0, 0),
    }[change]
    assert (rep.unchanged, rep.new, rep.vanished, rep.skipped) == expect
    assert idx.update().unchanged == expect[0] + expect[1]


def test_same_size_same_mtime_rewrite_is_the_known_limit(tmp_path):
    """Stat-only: bytes rewritten with equal size and a restored mtime are not noticed until touched."""
    from qmdlab.store import Index

    root = write_notes(tmp_path / "n", {"a.md": "# alpha\n"})
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", root)
    idx.update()
    st = (root / "a.md").stat()
    (root / "a.md").write_text("# omega\n", encoding="utf-8")
    os.utime(root / "a.md", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert idx.update().unchanged == 1
    os.utime(root / "a.md", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    rep = idx.update()
    assert rep.changed == 1 and "omega" in idx.get("n/a.md").body


def test_stat_check_reads_a_covering_index_added_to_older_indexes(tmp_path):
    from qmdlab.store import Index

    root = write_notes(tmp_path / "n", {"a.md": "# a\n", "b.md": "# b\n"})
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", root)
    idx.update()
    idx.conn.execute("DROP INDEX documents_stat")  # an index created before it existed
    idx.close()
    idx = Index.open(str(tmp_path / "idx"))
    assert idx.update().unchanged == 2
    plan = idx.conn.execute(
        "EXPLAIN QUERY PLAN SELECT path, mtime, size FROM documents WHERE collection = ? AND active = 1 ORDER BY path",
        ("n",),
    ).fetchall()
    assert "documents_stat" in str(plan) and "TEMP B-TREE" not in str(plan)


# ---------------------------------------------------------------- the stored stat digest
def _stat_reads(idx) -> list[str]:
    """Record the SQL statements run on ``idx``'s connection that read a collection's stat rows."""
    seen: list[str] = []
    idx.conn.set_trace_callback(lambda sql: seen.append(sql) if "mtime, size FROM documents" in sql else None)
    return seen


def test_unchanged_update_compares_the_stored_digest_not_the_rows(tmp_path):
    from qmdlab.store import Index
    from qmdlab.store.scan import stat_digest

    root = write_notes(tmp_path / "n", {f"d{i % 2}/n{i}.md": f"# note {i}\n" for i in range(12)})
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", root)
    idx.update()
    stored = idx.conn.execute("SELECT digest FROM stat_digest WHERE collection = 'n'").fetchone()
    assert stored == (stat_digest(stat_files(idx.collection("n"))),)
    reads = _stat_reads(idx)
    assert idx.update().unchanged == 12
    assert reads == []  # one digest row read, no per-file row
    (root / "d0" / "n0.md").write_text("# note 0, longer\n", encoding="utf-8")
    rep = idx.update()
    assert (rep.changed, rep.unchanged) == (1, 11)


@pytest.mark.parametrize("writer", ["deactivate", "mtime", "delete-row", "rename", "remove-readd", "cleanup"])
def test_any_other_write_to_the_rows_drops_the_digest(tmp_path, writer):
    """A digest left over from before another writer changed the rows would hide the change; the
    triggers remove it, so the next update compares the rows and puts the index right."""
    from qmdlab.store import Index

    root = write_notes(tmp_path / "n", {f"n{i}.md": f"# note {i}\n" for i in range(4)})
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", root)
    idx.update()
    name = "n"
    if writer == "deactivate":
        idx.conn.execute("UPDATE documents SET active = 0 WHERE path = 'n1.md'")
    elif writer == "mtime":
        idx.conn.execute("UPDATE documents SET mtime = 0 WHERE path = 'n1.md'")
    elif writer == "delete-row":
        idx.conn.execute("DELETE FROM documents WHERE path = 'n1.md'")
    elif writer == "rename":
        idx.rename_collection("n", "m")
        name = "m"
    elif writer == "remove-readd":
        idx.remove_collection("n")
        idx.add_collection("n", root)
    else:  # cleanup deletes inactive rows only: the active ones are as they were, the digest still goes
        from qmdlab.store.cleanup import cleanup

        (root / "n3.md").unlink()
        idx.update()
        cleanup(idx, vacuum=False)
    assert idx.conn.execute("SELECT 1 FROM stat_digest WHERE collection = ?", (name,)).fetchone() is None
    rep = idx.update()
    active = idx.conn.execute("SELECT count(*) FROM documents WHERE collection = ? AND active = 1", (name,)).fetchone()
    files = 3 if writer == "cleanup" else 4
    assert active[0] == files and rep.scanned == files
    expect_unchanged = {"deactivate": 3, "mtime": 4, "delete-row": 3, "rename": 4, "remove-readd": 0, "cleanup": 3}
    assert rep.unchanged == expect_unchanged[writer], rep
    reads = _stat_reads(idx)
    assert idx.update().unchanged == files and reads == []  # the digest is back


def test_an_index_without_the_digest_table_gets_it_on_update(tmp_path, monkeypatch):
    from qmdlab.store import Index

    root = write_notes(tmp_path / "n", {"a.md": "# a\n", "b.md": "# b\n"})
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", root)
    idx.update()
    for name in ("documents_stat_digest_ai", "documents_stat_digest_au", "documents_stat_digest_ad"):
        idx.conn.execute(f"DROP TRIGGER {name}")
    idx.conn.execute("DROP TABLE stat_digest")  # an index created before they existed
    idx.close()
    idx = Index.open(str(tmp_path / "idx"))
    assert idx.update().unchanged == 2  # adds the table and triggers, compares the rows, stores the digest
    with monkeypatch.context() as m:
        _no_transaction(m)
        reads = _stat_reads(idx)
        assert idx.update().unchanged == 2 and reads == []
    idx.conn.execute("UPDATE documents SET active = 0 WHERE path = 'a.md'")  # the trigger is there again
    assert idx.update().new == 1
