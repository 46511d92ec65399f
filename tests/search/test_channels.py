"""Extra keyword channels: verbatim phrase, substring LIKE leg, CJK
trigrams — closed-form rankings, a differential check against raw FTS5, and their lists in the
pipeline (off by default, and not in the trace-cache key while off)."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest

from qmdlab.models.base import ModelSet
from qmdlab.pipeline.config import OMITTED_AT_DEFAULT, PipelineConfig
from qmdlab.pipeline.lab import Lab
from qmdlab.search import SearchFilters, bm25_search
from qmdlab.search import channels as ch
from qmdlab.store import Index

DOCS = {
    "exact.md": "---\ntags: [db]\n---\n# Pooling\n\nWe run pgbouncer connection pooling in front of Postgres.\n",
    "reordered.md": "# Pools\n\nPooling of every connection: pgbouncer.\n",
    "infix.md": "# Proxy\n\nThe mypgbouncer wrapper restarts itself.\n",
    "tokyo.md": "# 東京\n\n東京大学の講義ノート。\n",
    "tokyo2.md": "# 大学\n\n東京の大学について。\n",
    "other/notes.md": "# Misc\n\nnothing here\n",
}


@pytest.fixture
def idx(tmp_path):
    root = tmp_path / "kb"
    for rel, body in DOCS.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body, encoding="utf-8")
    index = Index.open(str(tmp_path / "idx"))
    index.add_collection("kb", root)
    index.update()
    yield index
    index.close()


def test_phrase_channel_equals_a_raw_fts5_phrase_query(idx):
    hits = ch.phrase_search(idx, "pgbouncer connection pooling")
    assert [h.docno for h in hits] == ["kb/exact.md"]  # the reordered note has the words, not the phrase
    assert {h.docno for h in bm25_search(idx, "pgbouncer connection pooling")} >= {"kb/exact.md", "kb/reordered.md"}
    raw = idx.conn.execute(
        "SELECT d.collection || '/' || d.path, bm25(documents_fts, 1.5, 4.0, 1.0) AS s FROM documents_fts "
        "JOIN documents d ON d.id = documents_fts.rowid WHERE documents_fts MATCH ? ORDER BY s",
        ['"pgbouncer connection pooling"'],
    ).fetchall()
    assert [(h.docno, h.backend_score) for h in hits] == [(d, s) for d, s in raw]
    assert hits[0].score == pytest.approx(abs(raw[0][1]) / (1 + abs(raw[0][1])))
    assert ch.phrase_search(idx, "pgbouncer") == []  # one word: the BM25 list already is that


def test_like_channel_counts_contained_terms(idx):
    # 'bouncer' is inside 'pgbouncer'/'mypgbouncer' (no FTS5 token or prefix match); 'restarts' only in infix.md
    assert bm25_search(idx, "bouncer") == []
    hits = ch.like_search(idx, "bouncer restarts")
    assert [(h.docno, h.rank, h.backend_score, h.score) for h in hits] == [
        ("kb/infix.md", 1, 2.0, 1.0),
        ("kb/exact.md", 2, 1.0, 0.5),
        ("kb/reordered.md", 3, 1.0, 0.5),
    ]
    assert ch.like_search(idx, "bouncer", limit=1)[0].docno == "kb/exact.md"  # ties by docno
    tagged = ch.like_search(idx, "bouncer", filters=SearchFilters(tags=("db",)))
    assert [h.docno for h in tagged] == ["kb/exact.md"]
    assert ch.like_search(idx, "to of an") == []  # stopwords and short Latin terms are not units


def test_trigram_channel_tells_a_word_from_its_bigrams(idx):
    # both notes hold the bigrams 東京 and 大学; only one holds 東京大学 (trigrams 東京大, 京大学)
    assert ch.cjk_trigrams("東京大学") == ["東京大", "京大学"]
    assert [(h.docno, h.backend_score) for h in ch.trigram_search(idx, "東京大学")] == [("kb/tokyo.md", 2.0)]
    assert {h.docno for h in bm25_search(idx, "東京大学")} == {"kb/tokyo.md", "kb/tokyo2.md"}
    assert ch.trigram_search(idx, "東京") == []  # a two-character run has no trigram
    with pytest.raises(ValueError, match="unknown keyword channel 'fuzzy'"):
        ch.channel_search(idx, "fuzzy", "x")


def test_channel_search_runs_each_channel_by_name(idx):
    assert tuple(ch.CHANNEL_SEARCHES) == ch.CHANNELS
    tagged = SearchFilters(tags=("db",))
    for name, search in ch.CHANNEL_SEARCHES.items():
        for filters in (None, tagged):
            assert ch.channel_search(idx, name, "pgbouncer pooling 東京大学", limit=3, filters=filters) == search(
                idx, "pgbouncer pooling 東京大学", limit=3, filters=filters
            )
    weights = (1.0, 1.0, 1.0)
    assert ch.channel_search(idx, "phrase", "connection pooling", weights=weights) == ch.phrase_search(
        idx, "connection pooling", weights=weights
    )


def test_channels_in_the_pipeline_are_off_by_default_and_weighted_when_on(idx):
    lab = Lab(idx, ModelSet(None, None, None), PipelineConfig(rerank=False, expand=False))
    t = lab.query("bouncer restarts")
    assert set(t.lists["source"]) <= {"fts"}
    t = lab.query("bouncer restarts", weight_original_like=1.0, weight_original_phrase=0.5, fusion="rrf")
    like = t.lists.filter(t.lists["source"] == "like")
    assert like["docno"].to_list() == ["kb/infix.md", "kb/exact.md", "kb/reordered.md"]
    assert set(like["weight"]) == {1.0} and set(like["query_type"]) == {"original"}
    # plain RRF (ranks only) over the BM25 list ("restarts" matches infix.md) and the like leg
    fused = dict(zip(t.fused["docno"], t.fused["fused_score"]))
    bm = {h.docno: h.rank for h in bm25_search(idx, "bouncer restarts")}
    assert bm == {"kb/infix.md": 1}
    for docno, rank in zip(like["docno"], like["rank"]):
        want = 1.0 / (60 + rank) + (1.0 / (60 + bm[docno]) if docno in bm else 0.0)
        assert fused[docno] == pytest.approx(want)
    assert t.lists.filter(t.lists["source"] == "phrase").height == 0  # no note holds the phrase
    # qmd_rrf weights each list: the like leg's weight enters the fused score
    w = lab.query("bouncer restarts", weight_original_like=3.0)
    f = dict(zip(w.fused["docno"], w.fused["rrf_base"]))
    assert f["kb/exact.md"] == pytest.approx(3.0 / (60 + 2))


def test_heading_channel_counts_query_terms_in_section_headings(tmp_path):
    root = tmp_path / "h"
    notes = {
        "a.md": "# Restore\n\n## Postgres backup\n\nrestore body\n",  # both terms in headings
        "b.md": "# Postgres tuning\n\nhow to restore a backup\n",  # one term in a heading
        "c.md": "# Misc\n\nrestore postgres backup\n```\n# postgres restore\n```\n",  # body and fence only
        "d.md": "no headings: postgres restore\n",
    }
    for rel, body in notes.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body, encoding="utf-8")
    index = Index.open(str(tmp_path / "idx"))
    index.add_collection("h", root)
    index.update()
    hits = ch.heading_search(index, "how to restore postgres")
    assert [(h.docno, h.rank, h.backend_score, h.score) for h in hits] == [
        ("h/a.md", 1, 2.0, 1.0),
        ("h/b.md", 2, 1.0, 0.5),
    ]
    assert ch.heading_search(index, "restore", filters=SearchFilters(tags=("none",))) == []
    lab = Lab(index, ModelSet(None, None, None), PipelineConfig(rerank=False, expand=False))
    assert "heading" not in set(lab.query("restore postgres").lists["source"])
    t = lab.query("restore postgres", weight_original_heading=2.0)
    lists = t.lists.filter(t.lists["source"] == "heading")
    assert lists["docno"].to_list() == ["h/a.md", "h/b.md"] and set(lists["weight"]) == {2.0}
    assert "weight_original_heading" not in PipelineConfig().to_dict()
    index.close()


def test_new_options_stay_out_of_the_trace_cache_key_while_default():
    keys = set(PipelineConfig().to_dict())
    assert not keys & OMITTED_AT_DEFAULT and keys | OMITTED_AT_DEFAULT == set(PipelineConfig.field_names())
    on = PipelineConfig(weight_original_trigram=1.0)
    assert on.to_dict()["weight_original_trigram"] == 1.0 and PipelineConfig.from_dict(on.to_dict()) == on
    assert PipelineConfig.from_dict({"weight_original_like": 2}).weight_original_like == 2.0
    from qmdlab.errors import ConfigError

    with pytest.raises(ConfigError, match="'weight_original_like' must be a finite number >= 0"):
        PipelineConfig(weight_original_like=-1.0)
    # the default config's key payload as recorded before these options existed
    payload = json.dumps(PipelineConfig().to_dict(), sort_keys=True)
    assert hashlib.sha256(payload.encode()).hexdigest()[:16] == DEFAULT_KEY, (
        "PipelineConfig().to_dict() changed: every cached eval trace is invalidated. A new option must be "
        "left out of to_dict() while it holds its default (add it to OMITTED_AT_DEFAULT)."
    )


DEFAULT_KEY = "34c056a43ae878a1"


def test_the_mcp_query_tool_runs_the_configured_channels(idx):
    from qmdlab.mcp_server.backend import McpBackend

    off = McpBackend(idx, models=ModelSet(None, None, None))
    on = McpBackend(idx, models=ModelSet(None, None, None), config=PipelineConfig(weight_original_like=1.0))
    found_off = [r["docno"] for r in off.query("bouncer restarts", rerank=False)[1]["results"]]
    found_on = [r["docno"] for r in on.query("bouncer restarts", rerank=False)[1]["results"]]
    assert found_off == ["kb/infix.md"]  # BM25 alone: 'bouncer' is no token of any note
    assert found_on[0] == "kb/infix.md" and set(found_on) == {"kb/infix.md", "kb/exact.md", "kb/reordered.md"}


class _FailingConnection:
    """Stands in for the index connection at the phrase query: every statement fails with ``message``."""

    def __init__(self, real, message: str):
        self.real, self.message = real, message

    def execute(self, sql, params=()):
        if "documents_fts MATCH" in sql:
            raise sqlite3.OperationalError(self.message)
        return self.real.execute(sql, params)


@pytest.mark.parametrize(
    ("message", "raised"),
    [('fts5: syntax error near "x"', RuntimeError), ("database disk image is malformed", sqlite3.DatabaseError)],
)
def test_phrase_channel_tells_a_builder_bug_from_a_damaged_database(idx, monkeypatch, message, raised):
    # a damaged file must reach the CLI as the database's own error (which it turns into rebuild
    # instructions), not as a rejected phrase
    monkeypatch.setattr(idx, "conn", _FailingConnection(idx.conn, message))
    with pytest.raises(raised, match=message if raised is not RuntimeError else "FTS5 rejected") as caught:
        ch.phrase_search(idx, "connection pooling")
    assert (caught.type is RuntimeError) == (raised is RuntimeError)
