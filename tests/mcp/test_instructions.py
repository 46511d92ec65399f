"""Server instructions are written from the index: counts, collections, contexts, embedding gaps."""

from __future__ import annotations

from qmdlab.mcp_server.backend import McpBackend
from qmdlab.mcp_server.instructions import build_instructions, index_summary
from qmdlab.store import Index


def test_instructions_follow_the_index(qmdlab_home, tmp_path):
    idx = Index.open(str(tmp_path / "idx"))
    backend = McpBackend(idx, preset="fake")
    assert "The index is empty" in build_instructions(backend)

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\ngit rebase\n", encoding="utf-8")
    (notes / "b.md").write_text("# B\n\ndocker network\n", encoding="utf-8")
    idx.add_collection("work", notes)
    idx.add_context("work", "Team runbooks")
    idx.update()
    text = build_instructions(backend)
    assert "over 2 markdown document(s) in 1 collection(s)" in text
    assert "- collection 'work': 2 document(s) (resources qmd://work/<path>)" in text
    assert "- context for work: Team runbooks" in text
    assert "Note: 2 chunk(s) have no embedding yet" in text and "The index is empty" not in text

    emb = backend.models.embedder
    todo = idx.chunks_needing_vectors(emb.fingerprint)
    idx.store_vectors(
        todo["chunk_id"].to_list(), emb.embed_documents(list(zip(todo["title"], todo["text"]))), emb.fingerprint
    )
    summary = index_summary(backend)
    assert summary["chunks_without_vectors"] == 0 and summary["documents"] == 2 and summary["chunks"] == 2
    assert summary["models"] == {
        "embedder": emb.model_id,
        "expander": backend.models.expander.model_id,
        "reranker": backend.models.reranker.model_id,
    }
    assert "no embedding yet" not in build_instructions(backend)
    idx.close()
