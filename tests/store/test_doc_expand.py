"""Document expansion (doc2query): generation with a deterministic generator, the round-trip
filter in closed form, resumability, and the expansions column it writes."""

from __future__ import annotations

import pytest

from qmdlab.models.doc_query_gen import TableDocQueryGenerator
from qmdlab.pipeline.doc_expand import clear_doc_expansions, expand_documents, round_trip
from qmdlab.search import bm25_search
from qmdlab.store import Index
from qmdlab.store import doc_expansions as dx

from .conftest import write_notes

# each note has two words no other note has
NOTES = {
    "alpha.md": "# Alpha\n\nThe zebra grazes near a quarry.\n",
    "beta.md": "# Beta\n\nA walrus sleeps beside the lighthouse.\n",
    "gamma.md": "# Gamma\n\nThe falcon circles the vineyard.\n",
    "delta.md": "# Delta\n\nMarmots whistle in the glacier valley.\n",
}
UNIQUE = {
    "alpha": "zebra quarry",
    "beta": "walrus lighthouse",
    "gamma": "falcon vineyard",
    "delta": "marmots glacier",
}
NEXT = {"alpha": "beta", "beta": "gamma", "gamma": "delta", "delta": "alpha"}


def _owner(passage: str) -> str:
    return next(k for k in UNIQUE if passage.lower().startswith(f"# {k}"))


def _own_then_other(passage: str, i: int) -> str:
    """Sample 0: the passage's own unique words; sample 1: the next note's; sample 2: an empty line
    (not a usable query); further samples: own words again."""
    k = _owner(passage)
    return [f" {UNIQUE[k]}\n", f" {UNIQUE[NEXT[k]]}\n", " \n"][i] if i < 3 else f" {UNIQUE[k]} notes\n"


@pytest.fixture
def notes_index(tmp_path):
    root = write_notes(tmp_path / "notes", NOTES)
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", root)
    idx.update()
    yield idx
    idx.close()


def _rows(idx):
    return idx.conn.execute(
        "SELECT d.path, q.n, q.query, q.kept, q.source_rank FROM doc_queries q JOIN documents d ON d.hash = q.hash "
        "ORDER BY d.path, q.n"
    ).fetchall()


def test_round_trip_keeps_own_words_and_drops_another_documents(notes_index):
    gen = TableDocQueryGenerator(_own_then_other)
    rep = expand_documents(notes_index, gen, per_chunk=3, top_k=20)
    assert (rep.chunks, rep.generated, rep.usable, rep.kept, rep.dropped) == (4, 12, 8, 4, 4)
    rows = _rows(notes_index)
    for path, n, query, kept, rank in rows:
        k = path.removesuffix(".md")
        if n == 0:  # the note's own unique words: its note is the only match
            assert (query, kept, rank) == (UNIQUE[k], 1, 1)
        elif n == 1:  # the next note's words: this note does not even match
            assert (query, kept, rank) == (UNIQUE[NEXT[k]], 0, None)
        else:  # an empty line: not a usable query, never judged
            assert (query, kept, rank) == (None, None, None)
    # the expansions column holds the kept queries, and only the active generator's
    col = dict(
        notes_index.conn.execute(
            "SELECT d.path, f.expansions FROM documents_fts f JOIN documents d ON d.id = f.rowid"
        ).fetchall()
    )
    assert col == {f"{k}.md": UNIQUE[k] for k in UNIQUE}
    assert dx.active_generator(notes_index) == gen.fingerprint
    assert dx.status(notes_index) == dx.DocExpansionStatus(gen.fingerprint, 12, 8, 4, 4)
    assert notes_index.status()["doc_expansions"] == {
        "generator": gen.fingerprint,
        "generated": 12,
        "kept": 4,
        "documents": 4,
    }


def test_round_trip_rank_and_depth(notes_index):
    """A query both notes' words match ranks the source second behind the one holding more: kept at
    depth 2, dropped at depth 1."""
    sources = {"n/alpha.md"}
    q = "zebra walrus lighthouse"
    hits = [h.docno for h in bm25_search(notes_index, q, weights=(1.5, 4.0, 1.0))]
    assert hits[:2] == ["n/beta.md", "n/alpha.md"]
    assert round_trip(notes_index, q, sources, top_k=2) == 2
    assert round_trip(notes_index, q, sources, top_k=1) is None


def test_no_filter_keeps_every_usable_query(notes_index):
    rep = expand_documents(notes_index, TableDocQueryGenerator(_own_then_other), per_chunk=3, filter=False)
    assert (rep.kept, rep.dropped) == (8, 0)
    # the other note's words are in this note's expansions now: at weight > 0 both notes match
    hits = bm25_search(notes_index, "walrus lighthouse", weights=(1.5, 4.0, 1.0, 1.0))
    assert {h.docno for h in hits} == {"n/alpha.md", "n/beta.md"}
    assert [h.docno for h in bm25_search(notes_index, "walrus lighthouse")] == ["n/beta.md"]


def test_resumable_second_run_generates_nothing(notes_index):
    gen = TableDocQueryGenerator(_own_then_other)
    first = expand_documents(notes_index, gen, per_chunk=3, max_chunks=1)
    assert (first.chunks, first.generated) == (1, 3)
    second = expand_documents(notes_index, gen, per_chunk=3)
    assert (second.chunks, second.generated) == (3, 9)  # only the chunks the first run left
    calls = gen.calls
    third = expand_documents(notes_index, gen, per_chunk=3)
    assert (third.chunks, third.generated, third.kept, third.dropped, third.documents) == (0, 0, 0, 0, 0)
    assert gen.calls == calls  # the generator was not called
    before = _rows(notes_index)
    more = expand_documents(notes_index, gen, per_chunk=4)  # one more sample per chunk, the others kept
    assert (more.chunks, more.generated, more.kept) == (4, 4, 4)
    after = _rows(notes_index)
    assert [r for r in after if r[1] < 3] == before
    assert {r[1] for r in after} == {0, 1, 2, 3}


def test_clear_and_switch_generator(notes_index):
    a = TableDocQueryGenerator(_own_then_other, "fake:a")
    b = TableDocQueryGenerator(lambda p, i: f" {UNIQUE[_owner(p)]} facts\n", "fake:b")
    expand_documents(notes_index, a, per_chunk=1)
    assert [h.docno for h in bm25_search(notes_index, "facts", weights=(1.5, 4.0, 1.0, 1.0))] == []
    expand_documents(notes_index, b, per_chunk=1)  # b becomes the active generator
    assert dx.active_generator(notes_index) == b.fingerprint
    assert len(bm25_search(notes_index, "facts", weights=(1.5, 4.0, 1.0, 1.0))) == 4
    assert clear_doc_expansions(notes_index) == 4
    assert notes_index.status()["doc_expansions"] is None
    assert bm25_search(notes_index, "facts", weights=(1.5, 4.0, 1.0, 1.0)) == []
    assert dx.active_generator(notes_index) is None
    rep = expand_documents(notes_index, b, per_chunk=1)  # stored samples are written back, none generated
    assert (rep.generated, rep.documents) == (0, 4)


def test_collection_scope(tmp_path):
    idx = Index.open(str(tmp_path / "idx"))
    try:
        idx.add_collection("n", write_notes(tmp_path / "notes", NOTES))
        idx.add_collection("m", write_notes(tmp_path / "more", {"eps.md": "# Epsilon\n\nOtters juggle pebbles.\n"}))
        idx.update()
        gen = TableDocQueryGenerator(lambda p, i: " otters juggle\n" if "Otters" in p else " zebra quarry\n")
        rep = expand_documents(idx, gen, per_chunk=1, collections=["m"])
        assert (rep.chunks, rep.kept) == (1, 1)
        assert {r[0] for r in idx.conn.execute("SELECT hash FROM doc_queries")} == {
            idx.conn.execute("SELECT hash FROM documents WHERE path = 'eps.md'").fetchone()[0]
        }
    finally:
        idx.close()
