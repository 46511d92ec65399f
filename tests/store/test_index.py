"""The SQLite index on temporary folders: update outcomes, skips, rollback, get, contexts."""

from __future__ import annotations

import os

import pytest

from qmdlab.errors import ConfigError, StoreError
from qmdlab.store import Index, docid_of
from qmdlab.store import index as index_mod

from .conftest import NOTES, snapshot, write_notes


def fts_docnos(idx: Index, match: str) -> list[str]:
    return [
        r[0]
        for r in idx.conn.execute("SELECT filepath FROM documents_fts WHERE documents_fts MATCH ? ORDER BY 1", (match,))
    ]


def test_open_creates_files_and_pragmas(tmp_path, qmdlab_home):
    idx = Index.open("named")
    assert idx.dir == qmdlab_home / "indexes" / "named"
    assert (idx.dir / "index.sqlite").exists()
    assert idx.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert idx.conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
    idx.add_collection("c", tmp_path)
    assert "name: c" in (idx.dir / "collections.yaml").read_text()
    assert [c.name for c in Index.open("named").collections()] == ["c"]


def test_first_update_indexes_everything(index, notes):
    before = snapshot(notes)
    rep = index.update()
    assert (rep.scanned, rep.new, rep.changed, rep.moved, rep.unchanged, rep.vanished, rep.skipped) == (
        4,
        4,
        0,
        0,
        0,
        0,
        0,
    )
    docs = index.documents()
    assert docs["docno"].to_list() == ["notes/cooking/pasta.md", "notes/cooking/soup.md", "notes/git.md", "notes/jp.md"]
    titles = dict(zip(docs["docno"], docs["title"]))
    assert titles == {
        "notes/git.md": "Git rebase guide",
        "notes/cooking/pasta.md": "Pasta",
        "notes/cooking/soup.md": "soup",
        "notes/jp.md": "東京メモ",
    }
    git = index.get("notes/git.md")
    assert git.metadata == {
        "title": "Git rebase guide",
        "tags": ["git", "howto"],
        "date": "2024-03-05",
        "author": "Ann",
    }
    import hashlib

    h = hashlib.sha256(NOTES["git.md"].encode()).hexdigest()
    assert git.hash == h and git.docid == h[:6] == docid_of(h)
    assert git.body == NOTES["git.md"]
    assert snapshot(notes) == before  # user files byte-identical, mtimes untouched
    assert index.update().unchanged == 4


def test_changed_moved_vanished(index, notes):
    index.update()
    chunks_before = index.chunks(["notes/cooking/pasta.md"])
    (notes / "git.md").write_text(NOTES["git.md"] + "\nNew paragraph about cherry-pick.\n")
    (notes / "cooking/pasta.md").rename(notes / "pasta-moved.md")
    (notes / "cooking/soup.md").unlink()
    (notes / "new.md").write_text("# Fresh\n\nbrand new note\n")
    rep = index.update()
    assert (rep.new, rep.changed, rep.moved, rep.vanished, rep.unchanged) == (1, 1, 1, 1, 1)
    assert rep.chunks_added == 2  # changed git.md + new.md; the moved file is not re-chunked
    moved = index.chunks(["notes/pasta-moved.md"])
    assert moved["chunk_id"].to_list() == chunks_before["chunk_id"].to_list()
    assert "notes/cooking/soup.md" not in index.documents()["docno"].to_list()
    row = index.conn.execute("SELECT active FROM documents WHERE path = 'cooking/soup.md'").fetchone()
    assert row == (0,)  # deactivated, not deleted
    assert fts_docnos(index, "cherry") == ["notes/git.md"]
    assert fts_docnos(index, "tomato") == []  # vanished docs leave the FTS table
    assert fts_docnos(index, "boil") == ["notes/pasta-moved.md"]
    # a vanished file that comes back is new again
    (notes / "cooking/soup.md").write_text(NOTES["cooking/soup.md"])
    rep = index.update()
    assert (rep.new, rep.vanished) == (1, 0)
    assert fts_docnos(index, "tomato") == ["notes/cooking/soup.md"]


def test_mtime_size_gate_skips_reading(index, notes):
    index.update()
    p = notes / "cooking/pasta.md"
    st = p.stat()
    p.write_text(NOTES["cooking/pasta.md"].replace("salt", "SALT"))  # same size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert index.update().unchanged == 4
    assert "salt" in index.get("notes/cooking/pasta.md").body  # not re-read: the gate held
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert index.update().changed == 1
    assert "SALT" in index.get("notes/cooking/pasta.md").body


def test_touched_but_identical_file_is_unchanged(index, notes):
    index.update()
    p = notes / "git.md"
    os.utime(p, (p.stat().st_atime + 5, p.stat().st_mtime + 5))
    rep = index.update()
    assert (rep.changed, rep.unchanged, rep.chunks_added) == (0, 4, 0)


def test_skips_bad_files_without_crashing(tmp_path):
    root = write_notes(
        tmp_path / "bad",
        {
            "ok.md": "# fine\n",
            "bin.md": b"abc\x00def",
            "latin1.md": b"caf\xe9\n",
            "empty.md": "  \n\n",
            "big.md": "x" * 2000,
        },
    )
    outside = tmp_path / "outside.md"
    outside.write_text("# secret outside the root\n")
    os.symlink(outside, root / "link.md")
    os.symlink(root / "ok.md", root / "inner-link.md")  # inside the root: fine
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("bad", root)
    before = snapshot(root)
    rep = idx.update(max_bytes=1000)
    assert (rep.skipped_binary, rep.skipped_utf8, rep.skipped_empty, rep.skipped_large, rep.skipped_symlink) == (
        1,
        1,
        1,
        1,
        1,
    )
    assert rep.new == 2 and rep.scanned == 7
    assert dict(rep.skipped_paths)["bad/link.md"] == "symlink"
    assert sorted(idx.documents()["docno"]) == ["bad/inner-link.md", "bad/ok.md"]
    assert snapshot(root) == before


def test_injected_failure_rolls_back_the_collection(index, notes, monkeypatch):
    index.update()
    state = (index.documents().to_dicts(), index.chunks().to_dicts(), fts_docnos(index, "pasta OR rebase OR tomato"))
    (notes / "git.md").write_text("# Rewritten\n\nentirely different\n")
    (notes / "cooking/soup.md").unlink()
    (notes / "a-new.md").write_text("# A new one\n\nwith text\n")
    (notes / "z-new.md").write_text("# Z new one\n\nwith text\n")
    calls = {"n": 0}
    real = index_mod.Index._insert_chunks

    def boom(c, h, text):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("injected crash")
        return real(c, h, text)

    monkeypatch.setattr(index_mod.Index, "_insert_chunks", staticmethod(boom))
    with pytest.raises(RuntimeError, match="injected"):
        index.update()
    assert calls["n"] == 2
    after = (index.documents().to_dicts(), index.chunks().to_dicts(), fts_docnos(index, "pasta OR rebase OR tomato"))
    assert after == state
    assert index.conn.execute("SELECT count(*) FROM content").fetchone()[0] == 4
    monkeypatch.undo()
    rep = index.update()
    assert (rep.new, rep.changed, rep.vanished) == (2, 1, 1)


def test_an_open_transaction_is_not_leaked(index):
    with pytest.raises(ZeroDivisionError):
        with index.transaction() as c:
            c.execute("INSERT INTO content(hash, body) VALUES ('x', 'y')")
            1 / 0
    assert not index.conn.in_transaction
    assert index.conn.execute("SELECT count(*) FROM content WHERE hash = 'x'").fetchone()[0] == 0


def test_masks_union_and_ignore(tmp_path):
    root = write_notes(
        tmp_path / "m", {"a.md": "# a\n", "b.txt": "b text\n", "drafts/c.md": "# c\n", "sub/d.md": "# d\n"}
    )
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("m", root, mask="**/*.md, *.txt", ignore=["drafts/**"])
    idx.update()
    assert sorted(idx.documents()["path"]) == ["a.md", "b.txt", "sub/d.md"]


def test_get_by_every_kind_of_ref(index, notes):
    index.update()
    git = index.get("notes/git.md")
    assert index.get("git.md").docno == git.docno
    assert index.get(str(notes / "git.md")).docno == git.docno
    assert index.get("#" + git.docid).docno == git.docno
    assert index.get("pasta.md").docno == "notes/cooking/pasta.md"
    assert git.abs_path == notes / "git.md"
    with pytest.raises(StoreError, match=r"did you mean notes/git\.md"):
        index.get("notes/gti.md")
    with pytest.raises(StoreError, match="no document '#ffffff'"):
        index.get("#ffffff")


def test_contexts_all_matching_are_returned(index, tmp_path):
    index.add_context("notes", "Personal notes")
    index.add_context("notes/cooking", "Recipes")
    index.add_context("/", "Everything")
    assert index.contexts_for("notes/cooking/pasta.md") == ["Everything", "Personal notes", "Recipes"]
    assert index.contexts_for("notes/git.md") == ["Everything", "Personal notes"]
    index.remove_context("notes/cooking")
    assert index.contexts_for("notes/cooking/pasta.md") == ["Everything", "Personal notes"]
    with pytest.raises(ConfigError, match="names no collection"):
        index.add_context("nope/x", "t")
    with pytest.raises(ConfigError, match="no context"):
        index.remove_context("notes/cooking")


def test_rename_and_remove_collection(index, notes):
    index.update()
    index.add_context("notes/cooking", "Recipes")
    before = snapshot(notes)
    index.rename_collection("notes", "kb")
    assert index.documents()["docno"].to_list()[0] == "kb/cooking/pasta.md"
    assert fts_docnos(index, "boil") == ["kb/cooking/pasta.md"]
    assert index.contexts_for("kb/cooking/pasta.md") == ["Recipes"]
    index.remove_collection("kb")
    assert index.documents().height == 0
    assert index.conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0
    assert snapshot(notes) == before
    with pytest.raises(ConfigError, match="unknown collection 'kb'"):
        index.update(["kb"])


def test_collection_errors(index, tmp_path):
    with pytest.raises(ConfigError, match="exists"):
        index.add_collection("notes", tmp_path)
    with pytest.raises(ConfigError, match="not a directory"):
        index.add_collection("x", tmp_path / "missing")
    with pytest.raises(ConfigError, match="--name"):
        index.add_collection("bad name/", tmp_path)


def test_malformed_config_names_the_file(tmp_path):
    d = tmp_path / "idx"
    d.mkdir()
    (d / "collections.yaml").write_text("collections: [\n  - {name: a\n")
    with pytest.raises(ConfigError, match=r"collections\.yaml:\d+: malformed YAML"):
        Index.open(str(d)).collections()


def test_not_an_index(tmp_path):
    d = tmp_path / "idx"
    d.mkdir()
    (d / "index.sqlite").write_bytes(b"this is not sqlite at all, definitely not" * 100)
    with pytest.raises(StoreError, match="not a usable qmdlab index"):
        Index.open(str(d))


def test_fts_triggers_match_a_rebuild(index):
    index.update()
    got = index.conn.execute("SELECT rowid, filepath, title FROM documents_fts ORDER BY rowid").fetchall()
    want = index.conn.execute(
        "SELECT id, collection || '/' || path, qmdlab_fts_text(title) FROM documents WHERE active = 1 ORDER BY id"
    ).fetchall()
    assert got == want
    assert fts_docnos(index, '"東 京"') == ["notes/jp.md"]  # CJK spaced in the FTS copy only
    assert "東京大学" in index.get("notes/jp.md").body


def test_default_index_location(qmdlab_home):
    with Index.open() as idx:
        assert idx.dir == qmdlab_home / "indexes" / "default"


def test_progress_bar_goes_to_stderr(index, capsys):
    index.update(progress=True)
    assert "update notes" in capsys.readouterr().err


def test_cache_writes_during_update_do_not_commit_it(index, notes, monkeypatch):
    """A cache write (e.g. from a query thread) while an update transaction is open must not
    commit that transaction: the cache has its own connection."""
    from qmdlab.store.cache import cache_key

    (notes / "x.md").write_text("# x\n")
    threads = []

    def cache_then_fail(c, h, text):
        import threading

        t = threading.Thread(target=index.cache.put, args=(cache_key("m", "expand", h), "expand", [1]))
        threads.append(t)
        t.start()
        t.join(0.2)  # blocks on the write lock held by update (busy_timeout), so it cannot commit it
        raise RuntimeError("crash after the cache write")

    monkeypatch.setattr(index_mod.Index, "_insert_chunks", staticmethod(cache_then_fail))
    with pytest.raises(RuntimeError):
        index.update()
    threads[0].join(30)
    assert index.conn.execute("SELECT count(*) FROM content").fetchone()[0] == 0  # nothing half-committed
    assert index.documents().height == 0
    assert fts_docnos(index, "x") == []
    assert index.cache.count("expand") == 1  # the cache write itself went through afterwards


def test_symlinked_folder_outside_root_is_skipped(tmp_path):
    root = write_notes(tmp_path / "r", {"in.md": "# in\n"})
    outside = write_notes(tmp_path / "elsewhere", {"secret.md": "# secret\n"})
    os.symlink(outside, root / "linked")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("r", root)
    rep = idx.update()
    assert idx.documents()["docno"].to_list() == ["r/in.md"]
    assert (rep.scanned, rep.skipped_symlink) == (1, 0)  # Path.glob("**") does not descend into dir links
    assert "secret" not in str(idx.documents().to_dicts())


def test_explicit_mask_through_a_folder_link_is_caught(tmp_path):
    root = write_notes(tmp_path / "r", {"in.md": "# in\n"})
    outside = write_notes(tmp_path / "elsewhere", {"secret.md": "# secret\n"})
    os.symlink(outside, root / "linked")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("r", root, mask="**/*.md, linked/*.md")
    rep = idx.update()
    assert (rep.scanned, rep.new, rep.skipped_symlink) == (2, 1, 1)
    assert rep.skipped_paths == (("r/linked/secret.md", "symlink"),)


def test_chunk_lines_are_recoverable_from_the_file(tmp_path):
    body = "---\ntitle: Long\n---\n# Intro\n\n" + "".join(
        f"## Part {i}\n\n" + ("line of words here\n" * 60) + "\n" for i in range(6)
    )
    root = write_notes(tmp_path / "l", {"long.md": body})
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("l", root)
    idx.update()
    ch = idx.chunks()
    assert ch.height >= 3
    assert ch["char_start"][0] == body.index("# Intro")  # front matter is not chunked
    file_lines = (root / "long.md").read_text().split("\n")
    for row in ch.iter_rows(named=True):
        shown = "\n".join(file_lines[row["line_start"] - 1 : row["line_end"]])
        assert row["text"].strip("\n") in shown
        assert row["heading_path"].startswith("Intro")  # the h1 of the body, not the front-matter title
    assert ch["heading_path"].to_list()[1].startswith("Intro > Part ")


def test_config_cache_sees_writes_from_another_handle(tmp_path, qmdlab_home):
    """The parsed collections.yaml is cached per file version; a second handle's write is seen."""
    a_root = write_notes(tmp_path / "a")
    b_root = write_notes(tmp_path / "b")
    first = Index.open(tmp_path / "idx")
    second = Index.open(tmp_path / "idx")
    try:
        first.add_collection("a", a_root)
        assert [c.name for c in second.collections()] == ["a"]
        second.add_collection("b", b_root)
        second.add_context("b", "the b notes")
        assert [c.name for c in first.collections()] == ["a", "b"]
        assert [(c.target, c.text) for c in first.contexts()] == [("b", "the b notes")]
        # callers may mutate what they get; the cache must not change with it
        first.collections().clear()
        assert [c.name for c in first.collections()] == ["a", "b"]
    finally:
        first.close()
        second.close()
