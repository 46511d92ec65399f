"""One query's trace builds a polars frame only for the tables a caller reads (``Trace`` holds the
stages' plain columns until then), and the tables it builds are those of the polars reference
stages (``tests/pipeline/reference_stages.py``) run on its lists and rerank rows: same schemas,
same values, whatever is read first."""

from __future__ import annotations

import copy
import dataclasses

import polars as pl
import pytest

from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander, TableReranker
from qmdlab.pipeline import trace as trace_mod
from qmdlab.pipeline.config import FUSION_METHODS, PipelineConfig
from qmdlab.pipeline.lab import Lab
from qmdlab.pipeline.trace import SCHEMAS, TABLES, Columns, Trace
from tests.pipeline import reference_stages as ref

RULES = {"git rebase": [("lex", "rebase squash"), ("vec", "rebase branch"), ("hyde", "git rebase replays commit")]}


def pasta_lover(query: str, text: str) -> float:
    return 0.9 if "pasta" in text.lower() else 0.1


def full_lab(small_index, **cfg) -> Lab:
    idx, emb = small_index
    models = ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=pasta_lover))
    return Lab(idx, models, PipelineConfig(**cfg))


def built_counts() -> dict[str, int]:
    return dict(trace_mod.BUILT)


@pytest.mark.parametrize("table", ["final", "results"])
def test_reading_one_table_builds_only_that_frame(small_index, table):
    lab = full_lab(small_index)
    lab.query("git rebase")  # fill the caches: the repeated query is the one that matters
    before = built_counts()
    t = lab.query("git rebase")
    assert t.built() == []  # nothing built yet
    df = getattr(t, table)
    assert df.height > 0 and df.schema == pl.Schema(SCHEMAS[table])
    assert t.built() == [table]
    after = built_counts()
    assert {n: after[n] - before[n] for n in TABLES} == {n: int(n == table) for n in TABLES}
    assert getattr(t, table) is df  # built once, then kept
    assert t.built() == [table]


def test_views_that_need_one_column_build_nothing(small_index):
    t = full_lab(small_index).query("git rebase")
    assert t.qids == ["q"]
    assert t.notes_for("expand") and repr(t).startswith("Trace(queries=1, expansions=3, lists=")
    rows = t.result_rows()  # what the CLI prints
    assert t.built() == [] and len(rows) == t.height("results") > 0
    framed = Trace(results=t.results)  # the same rows read from a frame
    assert framed.result_rows() == rows
    assert t.height("lists") == t.lists.height > 0 and t.built() == ["lists", "results"]


def test_the_stage_line_of_a_front_end_builds_nothing(small_index):
    from qmdlab.pipeline.stages import plan_stages

    cfg, plan = plan_stages(PipelineConfig(), "qmd")
    idx, emb = small_index
    lab = Lab(idx, ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=pasta_lover)), cfg, plan=plan)
    t = lab.query("git rebase")
    assert t.notes_for("stages")[0].startswith("stages: expansion+bm25+vector+fusion+rerank+blend")
    assert t.built() == []


@pytest.mark.parametrize("fusion", FUSION_METHODS)
@pytest.mark.parametrize("query", ["git rebase", "pasta network", "branch"])
def test_lazy_tables_equal_the_reference_stages(small_index, fusion, query):
    lab = full_lab(small_index, fusion=fusion, min_score_fallback=0.0, limit=3)
    lab.query(query)
    lazy, other = lab.query(query), lab.query(query)
    for name in reversed(TABLES):  # the other trace builds its frames in the other order
        getattr(other, name)
    cfg = lab.config
    fused = ref.fuse(lazy.lists, cfg)
    want = {"fused": fused, "final": ref.blend_finish(ref.candidates(fused, cfg.candidate_limit), lazy.rerank, cfg)}
    for name in TABLES:
        if name == "timings":  # milliseconds differ run to run; the stages timed do not
            assert lazy.timings["stage"].to_list() == other.timings["stage"].to_list()
            continue
        got = getattr(lazy, name)
        assert got.schema == pl.Schema(SCHEMAS[name]), name
        assert got.equals(getattr(other, name)), name
        if name in want:
            assert got.equals(want[name]), (name, got, want[name])


def test_content_duplicates_and_fallback_notes_match_the_reference(tmp_path):
    from tests.pipeline.conftest import build_index

    idx, emb = build_index(tmp_path)
    try:
        notes_dir = tmp_path / "notes"  # build_index's collection
        (notes_dir / "copy.md").write_text((notes_dir / "git-rebase.md").read_text(encoding="utf-8"), encoding="utf-8")
        idx.update()
        todo = idx.chunks_needing_vectors(emb.fingerprint)
        idx.store_vectors(
            todo["chunk_id"].to_list(),
            emb.embed_documents(list(zip(todo["title"].to_list(), todo["text"].to_list()))),
            emb.fingerprint,
        )
        cfg = PipelineConfig(min_score=2.0, min_score_fallback=1.5)
        lab = Lab(idx, ModelSet(emb, None, None), cfg)
        t = lab.query("git rebase")
        assert any("same content as" in m for m in t.notes_for("finish"))
        assert any("fallback probe" in m for m in t.notes_for("finish"))
        blended = ref.blend(ref.candidates(ref.fuse(t.lists, cfg), cfg.candidate_limit), None, cfg)
        doc_tags = idx.documents().select("docno", "tags", "hash")
        assert t.final.equals(ref.finish(blended, cfg, doc_tags=doc_tags))
        dups = ref.content_duplicates(blended, doc_tags)
        shown = set(t.final["docno"].to_list())
        noted = [f"{d}: same content as {k} (shown once)" for _, d, k in dups.rows() if k in shown]
        assert [m for m in t.notes_for("finish") if "same content" in m] == noted and noted
    finally:
        idx.close()


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_front_ends_read_the_same_tables(small_index, tmp_path):
    lab = full_lab(small_index)
    lab.query("git rebase"), lab.query("pasta")  # cached from here on: the same `cached` column each run
    a, b = lab.query("git rebase", qid="a"), lab.query("pasta", qid="b")
    frames = [Trace(**{n: getattr(t, n) for n in TABLES}, config=t.config) for t in (a, b)]
    lazy = [lab.query("git rebase", qid="a"), lab.query("pasta", qid="b")]
    both = Trace.concat(lazy)  # the parts still in columns: one frame per table from the joined lists
    ref = Trace.concat(frames)
    for n in TABLES:
        assert getattr(both, n).schema == pl.Schema(SCHEMAS[n])
        if n != "timings":
            assert getattr(both, n).equals(getattr(ref, n)), n
    assert both.for_qid("b").final.equals(b.final)
    mixed = Trace.concat([frames[0], lazy[1]])  # a frame and columns of one table
    assert mixed.final.equals(ref.final)
    back = Trace.from_parquet(both.to_parquet(tmp_path / "t"))
    assert back == both
    assert both.to_ranx_run().run == ref.to_ranx_run().run


def test_copies_and_replace_keep_tables_apart(small_index):
    t = full_lab(small_index).query("git rebase")
    c = copy.copy(t)
    c.notes = pl.DataFrame({"qid": ["q"], "stage": ["x"], "message": ["m"]})
    assert t.notes.height > 1 and c.notes.height == 1
    r = dataclasses.replace(t, final=t.final.head(1))
    assert r.final.height == 1 and t.final.height > 1 and r.lists.equals(t.lists)


def test_columns_must_name_the_tables_columns():
    with pytest.raises(ValueError, match="timings columns"):
        Trace(timings=Columns({"qid": ["q"], "ms": [1.0]}))
    with pytest.raises(ValueError, match="lacks columns"):
        Trace(final=pl.DataFrame({"qid": ["q"]}))
    t = Trace(
        final=pl.DataFrame({"qid": ["q"], "docno": ["d"], "extra": [1]}).with_columns(
            fused_rank=1, position_score=1.0, blend_weight=1.0, rerank_score=None, final_score=1.0, final_rank=1
        )
    )
    assert t.final.columns == list(SCHEMAS["final"])  # a frame is conformed when given


def test_chunk_selection_orders_chunks_as_polars_does():
    """select_chunk_columns sorts the chunk rows in Python: the same order as polars' sort by
    (docno, seq), non-ASCII docnos and rows given shuffled included."""
    import random

    from qmdlab.pipeline.select import select_chunk_columns

    rng = random.Random(3)
    docs = ["n/b.md", "n/a.md", "n/é.md", "n/東京.md", "n/z.md", "n/Z.md"]
    rows = [
        (i, d, seq, f"alpha {'beta ' * rng.randint(0, 2)}{d}")
        for i, (d, seq) in enumerate((d, s) for d in docs for s in range(3))
    ]
    for _ in range(20):
        rng.shuffle(rows)
        chunks = pl.DataFrame(rows, schema=["chunk_id", "docno", "seq", "text"], orient="row")
        want_order = chunks.sort(["docno", "seq"])["chunk_id"].to_list()
        got = select_chunk_columns(chunks, docs, "beta", None, PipelineConfig())
        # the best chunk of each doc: the most hits, ties to the first chunk in (docno, seq) order
        for d, cid, hits in zip(got["docno"], got["chunk_id"], got["hits"]):
            mine = [c for c in want_order if chunks.filter(pl.col("chunk_id") == c)["docno"][0] == d]
            scores = {c: float("beta" in chunks.filter(pl.col("chunk_id") == c)["text"][0]) for c in mine}
            assert cid == next(c for c in mine if scores[c] == max(scores.values())) and hits == max(scores.values())
        assert got["docno"] == docs
