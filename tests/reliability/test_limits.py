"""Capacity limits (:mod:`qmdlab.store.limits`): a warning at 80 %, graceful degradation past
the limit, recorded in ``UpdateReport.warnings`` / the CLI and in the pipeline's ``trace.notes``.

The limits are lowered through their environment variables so small corpora reach them.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.models.fakes import KeywordEmbedder, TableReranker
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.lab import Lab
from qmdlab.store import Index, limits

VOCAB = ["pasta", "git", "rebase", "note"]


def _corpus(root, n):
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"n{i:02d}.md").write_text(f"# Note {i}\n\npasta note {i}\n", encoding="utf-8")
    return root


@pytest.fixture
def clean_env(monkeypatch):
    for var in limits.ENV.values():
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_documented_defaults_and_thresholds(clean_env):
    assert (limits.limit("documents"), limits.limit("chunks")) == (250_000, 2_000_000)
    assert limits.limit("vector_bytes") == 4 * 1024**3 and limits.limit("query_ms") == 30_000.0
    levels = [limits.check("chunks", v, 100).level for v in (0, 79, 80, 99, 100, 101)]
    assert levels == ["ok", "ok", "warn", "warn", "warn", "over"]
    clean_env.setenv("QMDLAB_MAX_CHUNKS", "10")
    assert limits.check("chunks", 8).level == "warn" and "QMDLAB_MAX_CHUNKS" in limits.check("chunks", 8).message


def test_documents_warn_at_80_percent_then_stop_growing(tmp_path, clean_env):
    clean_env.setenv("QMDLAB_MAX_DOCUMENTS", "10")
    root = _corpus(tmp_path / "c", 8)
    with Index(tmp_path / "idx") as idx:
        idx.add_collection("c", root)
        rep = idx.update()
        assert rep.new == 8 and rep.skipped == 0
        assert rep.warnings == (
            "documents at 80% of the capacity limit (8 of 10 documents); raise "
            "$QMDLAB_MAX_DOCUMENTS if the machine allows",
        )
        _corpus(root, 13)  # five more files: two fit, three do not
        (root / "n00.md").write_text("# Note 0\n\nchanged pasta\n", encoding="utf-8")
        rep = idx.update()
        assert (rep.new, rep.changed, rep.skipped_capacity) == (2, 1, 3)
        assert [p for p, r in rep.skipped_paths if r == "capacity"] == ["c/n10.md", "c/n11.md", "c/n12.md"]
        assert any("3 file(s) not indexed" in w for w in rep.warnings)
        assert idx.documents().height == 10 and "changed pasta" in idx.get("c/n00.md").body
        # nothing vanished, and a later update still honours the limit
        rep = idx.update()
        assert rep.vanished == 0 and rep.skipped_capacity == 3 and idx.documents().height == 10


def test_chunk_limit_keeps_the_indexed_version_of_a_changed_file(tmp_path, clean_env):
    root = _corpus(tmp_path / "c", 3)
    with Index(tmp_path / "idx") as idx:
        idx.add_collection("c", root)
        idx.update()
        clean_env.setenv("QMDLAB_MAX_CHUNKS", "3")
        (root / "n01.md").write_text("# Note 1\n\n" + "long pasta text\n\n" * 600, encoding="utf-8")  # > 1 chunk
        rep = idx.update()
        assert rep.skipped_capacity == 1 and rep.changed == 0 and rep.vanished == 0
        assert idx.get("c/n01.md").body == "# Note 1\n\npasta note 1\n"  # still searchable, old version
        clean_env.delenv("QMDLAB_MAX_CHUNKS")
        assert idx.update().changed == 1


def test_update_cli_prints_capacity_warnings(tmp_path, clean_env):
    clean_env.setenv("QMDLAB_HOME", str(tmp_path / "home"))
    clean_env.setenv("QMDLAB_MAX_DOCUMENTS", "4")
    root = _corpus(tmp_path / "c", 5)
    res = CliRunner().invoke(cli, ["--index", str(tmp_path / "idx"), "collection", "add", str(root), "--name", "c"])
    assert res.exit_code == 0, res.output
    assert "skipped by reason: capacity 1" in res.stdout
    assert [ln for ln in res.stderr.splitlines() if ln.startswith("warning")] == [
        "warning: documents at 100% of the capacity limit (4 of 4 documents); raise $QMDLAB_MAX_DOCUMENTS if the "
        "machine allows",
        "warning: 1 file(s) not indexed: the capacity limit was reached (see `qmdlab update` skip reasons)",
    ]


def _embedded(tmp_path, n=5):
    root = _corpus(tmp_path / "c", n)
    idx = Index(tmp_path / "idx")
    idx.add_collection("c", root)
    idx.update()
    emb = KeywordEmbedder(VOCAB)
    todo = idx.chunks_needing_vectors(emb.fingerprint)
    idx.store_vectors(
        todo["chunk_id"].to_list(), emb.embed_documents(list(zip(todo["title"], todo["text"]))), emb.fingerprint
    )
    return idx, emb


def test_vector_matrix_over_its_byte_limit_degrades_the_vector_stage(tmp_path, clean_env):
    idx, emb = _embedded(tmp_path)  # 5 chunks x 4 dims x 4 bytes = 80 bytes
    try:
        lab = Lab(idx, (emb, None, None), PipelineConfig(rerank=False))
        clean_env.setenv("QMDLAB_MAX_VECTOR_BYTES", "90")  # 89 %: warning, still searched
        t = lab.query("pasta")
        assert t.lists.filter(t.lists["source"] == "vec").height == 5
        assert (
            "capacity",
            "vector_bytes at 89% of the capacity limit (80 of 90 bytes); raise "
            "$QMDLAB_MAX_VECTOR_BYTES if the machine allows",
        ) in t.notes.select("stage", "message").rows()
        clean_env.setenv("QMDLAB_MAX_VECTOR_BYTES", "79")  # over: vector lists dropped, BM25 still answers
        idx._vectors.clear()
        t = lab.query("pasta")
        assert t.lists.filter(t.lists["source"] == "vec").height == 0 and t.final.height == 5
        msgs = t.notes["message"].to_list()
        assert any(m.startswith("vector_bytes over 101%") for m in msgs)
        assert any("vectors unusable" in m and "over the capacity limit of 79" in m for m in msgs)
        with pytest.raises(limits.CapacityError, match="QMDLAB_MAX_VECTOR_BYTES"):
            from qmdlab.search import vector_search

            vector_search(idx, np.ones(4), fingerprint=emb.fingerprint)
    finally:
        idx.close()


def test_query_time_budget_skips_rerank_and_keeps_fusion_order(tmp_path, clean_env):
    idx, emb = _embedded(tmp_path)
    try:

        def by_number(query, text):  # prefers the highest-numbered note: reverses the fused (docno) order
            return int(text.split("Note ")[1][0]) / 10

        lab = Lab(idx, (emb, None, TableReranker({}, default=by_number)), PipelineConfig(blend="rerank_only"))
        t = lab.query("pasta note")
        assert t.rerank.height == 5 and not t.notes.filter(t.notes["stage"] == "capacity").height
        assert t.final["docno"][0] == "c/n04.md"  # the reranker moved it up
        clean_env.setenv("QMDLAB_QUERY_BUDGET_MS", "0")  # any elapsed time is over budget
        t2 = lab.query("pasta note")
        assert t2.rerank.height == 0
        assert t2.final["docno"].to_list() == t2.fused.sort("fused_rank")["docno"].head(t2.final.height).to_list()
        assert t2.final["docno"].to_list() != t.final["docno"].to_list()
        notes = t2.notes.select("stage", "message").rows()
        assert ("rerank", "query time budget used up before rerank: rerank skipped, fusion order kept") in notes
        assert any(s == "capacity" and m.startswith("query_ms over") for s, m in notes)
    finally:
        idx.close()
