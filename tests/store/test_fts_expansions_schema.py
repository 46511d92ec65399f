"""The ``expansions`` column of ``documents_fts``: migration of a three-column index, and the
triggers that fill the column from ``doc_queries`` of the active generator."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from qmdlab.search import bm25_search
from qmdlab.store import Index, schema
from qmdlab.store import doc_expansions as dx
from qmdlab.terms import space_cjk

from .conftest import write_notes

# The documents_fts table and triggers as an index made before the expansions column has them.
OLD_FTS = f"""
CREATE VIRTUAL TABLE documents_fts USING fts5(filepath, title, body, tokenize = 'porter unicode61');
CREATE TRIGGER documents_ai AFTER INSERT ON documents WHEN new.active = 1 BEGIN
    INSERT INTO documents_fts(rowid, filepath, title, body)
    SELECT new.id, {schema.FTS_FUNCTION}(new.collection || '/' || new.path), {schema.FTS_FUNCTION}(new.title),
           {schema.FTS_FUNCTION}(c.body)
    FROM content c WHERE c.hash = new.hash;
END;
CREATE TRIGGER documents_ad AFTER DELETE ON documents BEGIN
    DELETE FROM documents_fts WHERE rowid = old.id;
END;
CREATE TRIGGER documents_au AFTER UPDATE OF collection, path, title, hash, active ON documents BEGIN
    DELETE FROM documents_fts WHERE rowid = old.id;
    INSERT INTO documents_fts(rowid, filepath, title, body)
    SELECT new.id, {schema.FTS_FUNCTION}(new.collection || '/' || new.path), {schema.FTS_FUNCTION}(new.title),
           {schema.FTS_FUNCTION}(c.body)
    FROM content c WHERE c.hash = new.hash AND new.active = 1;
END;
"""

NOTES = {
    "git.md": "# Rebasing\n\nUse git rebase -i to squash commits.\n",
    "pasta.md": "# Pasta\n\nBoil water, add salt, cook the pasta.\n",
    "soup.md": "Tomato soup without a heading, salt to taste.\n",
    "jp.md": "# 東京メモ\n\n東京大学の講義ノート。\n",
    "deploy.md": "# Deploying\n\nShip the release with git tags and a rollback plan.\n",
}
QUERIES = ["git rebase", "salt", "pasta water", "東京", "release rollback", "heading"]


def _downgrade(db: Path) -> None:
    """Turn the index file ``db`` into one made before the expansions column (its FTS rows as the
    old triggers wrote them)."""
    conn = sqlite3.connect(db)
    conn.create_function(schema.FTS_FUNCTION, 1, space_cjk, deterministic=True)
    conn.executescript(
        "BEGIN; DROP TRIGGER documents_ai; DROP TRIGGER documents_ad; DROP TRIGGER documents_au; "
        "DROP TABLE documents_fts; DROP TABLE doc_queries;"
        + OLD_FTS
        + "INSERT INTO documents_fts(rowid, filepath, title, body) SELECT d.id, "
        f"{schema.FTS_FUNCTION}(d.collection || '/' || d.path), {schema.FTS_FUNCTION}(d.title), "
        f"{schema.FTS_FUNCTION}(c.body) FROM documents d JOIN content c ON c.hash = d.hash WHERE d.active = 1; COMMIT;"
    )
    conn.close()


def _scores(idx: Index, weights) -> dict:
    return {q: [(h.docno, h.backend_score) for h in bm25_search(idx, q, limit=50, weights=weights)] for q in QUERIES}


def _rows(idx: Index) -> list:
    return idx.conn.execute("SELECT rowid, filepath, title, body FROM documents_fts ORDER BY rowid").fetchall()


def _old_index(tmp_path):
    root = write_notes(tmp_path / "notes", NOTES)
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", root)
    idx.update()
    idx.close()
    _downgrade(tmp_path / "idx" / "index.sqlite")
    return root, Index.open(str(tmp_path / "idx"))


def test_old_index_is_read_then_migrated_by_its_next_write(tmp_path):
    root, idx = _old_index(tmp_path)
    try:
        assert schema.fts_columns(idx.conn) == 3
        before, rows = _scores(idx, (1.5, 4.0, 1.0)), _rows(idx)
        assert all(before[q] for q in QUERIES)  # every query finds something: the comparison is not vacuous
        # a read with four weights works on three columns (the fourth is ignored), and writes nothing
        assert _scores(idx, (1.5, 4.0, 1.0, 3.0)) == before
        assert schema.fts_columns(idx.conn) == 3
        (root / "new.md").write_text("# New\n\nA fresh note about salt.\n", encoding="utf-8")
        idx.update()  # the next write migrates
        assert schema.fts_columns(idx.conn) == 4
        assert [c[1] for c in idx.conn.execute("PRAGMA table_info(documents_fts)")] == list(schema.FTS_COLUMNS)
        # old rows: filepath, title and body exactly as before; the new file written by the new trigger
        after_rows = _rows(idx)
        assert after_rows[: len(rows)] == rows and len(after_rows) == len(rows) + 1
        assert idx.conn.execute("SELECT count(*) FROM documents_fts WHERE expansions != ''").fetchone()[0] == 0
        (root / "new.md").unlink()
        idx.update()
        # every document searchable, identical scores at weight 0 (and at any weight: the column is empty)
        assert _rows(idx) == rows
        assert _scores(idx, (1.5, 4.0, 1.0)) == before
        assert _scores(idx, (1.5, 4.0, 1.0, 2.0)) == before
        n_docs = idx.conn.execute("SELECT count(*) FROM documents WHERE active = 1").fetchone()[0]
        assert len(rows) == n_docs
    finally:
        idx.close()


def test_migrated_triggers_keep_filepath_title_body(tmp_path):
    """The new triggers write the first three columns as the old ones did: an index built new
    and a migrated one hold the same rows after the same edits."""
    root, old = _old_index(tmp_path)
    fresh_root = write_notes(tmp_path / "fresh", NOTES)
    fresh = Index.open(str(tmp_path / "fresh-idx"))
    try:
        fresh.add_collection("n", fresh_root)
        fresh.update()
        for r in (root, fresh_root):
            (r / "pasta.md").write_text("# Pasta al dente\n\nSalt the water well.\n", encoding="utf-8")
            (r / "git.md").rename(r / "vcs-git.md")
        old.update()
        fresh.update()
        strip = lambda rows: sorted(r[1:] for r in rows)  # noqa: E731  (ids may differ; the text may not)
        assert strip(_rows(old)) == strip(_rows(fresh))
    finally:
        old.close()
        fresh.close()


def test_triggers_follow_content_hash(tmp_path):
    """A moved file keeps its expansions (same content); a changed one has none until generated again."""
    root = write_notes(tmp_path / "notes", NOTES)
    idx = Index.open(str(tmp_path / "idx"))
    try:
        idx.add_collection("n", root)
        idx.update()
        dx.ensure_table(idx)
        (h,) = idx.conn.execute("SELECT hash FROM documents WHERE path = 'git.md'").fetchone()
        dx.store_generated(idx, "gen#1", [dx.GeneratedQuery(h, 0, 0, " how to squash", "how to squash")])
        dx.store_verdicts(idx, "gen#1", [dx.FilterVerdict(h, 0, 0, True, 1)])
        assert dx.set_active_generator(idx, "gen#1") == 1
        col = lambda path: idx.conn.execute(  # noqa: E731
            "SELECT f.expansions FROM documents_fts f JOIN documents d ON d.id = f.rowid WHERE d.path = ?", (path,)
        ).fetchone()
        assert col("git.md") == ("how to squash",)
        (root / "git.md").rename(root / "moved.md")
        idx.update()
        assert col("moved.md") == ("how to squash",)
        (root / "moved.md").write_text("# Rebasing\n\nChanged text.\n", encoding="utf-8")
        idx.update()
        assert col("moved.md") == ("",)
        assert dx.status(idx).documents == 0  # the only expanded content is gone
        assert dx.status(idx).kept == 1  # its stored query stays (cleanup drops it)
    finally:
        idx.close()
