"""What ``embed`` and ``query`` say is what happened (the second probe's item 9).

- ``embed`` said "embedded 371" when 150 of those vectors were dropped (their chunks were removed
  by an ``update`` + ``cleanup`` while it ran), and "nothing was changed" after it had committed 80
  vectors and then hit a full disk;
- about 1 query in 850 failed with "no document X" when one of its hits was renamed between the
  search and the snippets: the query must leave that hit out, with a note.

The interleavings are made deterministic by hooking the exact point (no sleeps, no threads).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.store import Index
from qmdlab.store.cleanup import cleanup
from qmdlab.store.vectors import VectorsMixin

from .conftest import cli_env, make_corpus


def _setup(tmp_path: Path, monkeypatch, n: int = 40) -> tuple[Path, Path]:
    for k, v in cli_env(tmp_path / "home").items():
        monkeypatch.setenv(k, v)
    (root,) = make_corpus(tmp_path / "kb", n, seed=9)
    index = tmp_path / "idx"
    with Index.open(str(index)) as idx:
        idx.add_collection("c0", root)
        idx.update()
    return root, index


def _vectors(index: Path) -> int:
    conn = sqlite3.connect(index / "index.sqlite")
    try:
        return conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    finally:
        conn.close()


def _embed(index: Path):
    return CliRunner().invoke(
        cli, ["--index", str(index), "embed", "--preset", "fake", "--batch-size", "8", "--no-progress"]
    )


def test_embed_counts_only_the_vectors_it_stored(tmp_path, monkeypatch):
    root, index = _setup(tmp_path, monkeypatch)
    real = VectorsMixin.store_vectors
    calls, inserted = [], []

    def store_after_a_cleanup(self, chunk_ids, matrix, fingerprint):
        calls.append(len(chunk_ids))
        if len(calls) == 2:  # between two batches, another process removes notes and cleans up
            for p in sorted(root.rglob("*.md"))[:25]:
                p.unlink()
            with Index.open(str(index)) as other:
                other.update(allow_vanish=True)
                cleanup(other, vacuum=False)
        before = _vectors(index)
        out = real(self, chunk_ids, matrix, fingerprint)
        inserted.append(_vectors(index) - before)  # rows that really went in
        return out

    monkeypatch.setattr(VectorsMixin, "store_vectors", store_after_a_cleanup)
    res = _embed(index)
    assert res.exit_code == 0, (res.output, res.exception)
    stored, computed = sum(inserted), sum(calls)
    assert 0 < stored < computed  # the precondition: some computed vectors had no chunk to go to
    assert f"embedded {stored} chunks" in res.output, res.output
    assert f"{computed - stored} computed vector(s) not stored" in res.output, res.output


def test_a_failure_after_committed_batches_does_not_say_nothing_was_changed(tmp_path, monkeypatch):
    _, index = _setup(tmp_path, monkeypatch)
    real = VectorsMixin.store_vectors
    calls = []

    def full_on_the_third(self, chunk_ids, matrix, fingerprint):
        calls.append(1)
        if len(calls) == 3:
            with self.transaction():  # the write fails inside its transaction, as ENOSPC does
                raise sqlite3.OperationalError("database or disk is full")
        return real(self, chunk_ids, matrix, fingerprint)

    monkeypatch.setattr(VectorsMixin, "store_vectors", full_on_the_third)
    res = _embed(index)
    stored = _vectors(index)
    assert stored == 16  # two batches of 8 were committed before the failure
    assert res.exit_code == 1 and res.stderr.count("\n") == 1, (res.output, res.exception)
    assert "the disk is full" in res.stderr and "nothing was changed" not in res.stderr, res.stderr
    assert f"the {stored} vector(s) stored by this run before it are kept" in res.stderr, res.stderr
    # and with nothing committed yet, "nothing was changed" is still the truth
    calls.clear()
    calls.extend([1, 1])
    monkeypatch.setattr(VectorsMixin, "store_vectors", full_on_the_third)
    res = CliRunner().invoke(cli, ["--index", str(index), "embed", "--preset", "fake", "-f", "--no-progress"])
    assert res.exit_code == 1 and "nothing was changed" in res.stderr and _vectors(index) == stored, res.stderr


def test_a_hit_renamed_mid_query_is_left_out_with_a_note(tmp_path, monkeypatch):
    from qmdlab.models import load_models
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.pipeline.lab import Lab
    from qmdlab.store.documents import DocumentsMixin

    root, index = _setup(tmp_path, monkeypatch)
    with Index.open(str(index)) as idx:
        lab = Lab(idx, load_models("fake"), PipelineConfig(expand=False, rerank=False))
        first = lab.query("alpha beta gamma", limit=5).result_rows()
        assert len(first) == 5
        victim = first[1].docno
        real = DocumentsMixin.get_many
        renamed = []

        def rename_then_get_many(self, docnos):
            docnos = list(docnos)
            if not renamed:  # between the search and the snippets, another process renames a hit
                old = root / victim.partition("/")[2]
                old.rename(old.with_name("renamed-" + old.name))
                with Index.open(str(index)) as other:
                    other.update()
                renamed.append(victim)
            return real(self, docnos)

        monkeypatch.setattr(DocumentsMixin, "get_many", rename_then_get_many)
        trace = lab.query("alpha beta gamma", limit=5)
        rows = trace.result_rows()
        assert renamed == [victim]
        assert victim not in [r.docno for r in rows] and len(rows) == 4
        assert [r.docno for r in rows] == [r.docno for r in first if r.docno != victim]
        notes = " ".join(trace.notes_for("finish"))
        assert f"{victim}: renamed or removed from the index while the query ran" in notes, notes
        ranks = list(trace.column("results", "final_rank"))
        assert ranks == sorted(ranks) and len(ranks) == 4
