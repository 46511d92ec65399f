"""The small stages: strong signal, expansion filter, routing, chunk selection, finish, trace."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.pipeline.coded import CodedLists
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.expand import filter_expansions, parse_query_document, query_terms, shares_term
from qmdlab.pipeline.finish import finish
from qmdlab.pipeline.probe import strong_signal
from qmdlab.pipeline.retrieve import ablate, reweight, route
from qmdlab.pipeline.select import select_chunks
from qmdlab.pipeline.trace import SCHEMAS, Trace, empty


# -- probe --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "scores, skip",
    [
        ([0.9, 0.75], True),  # top >= 0.85, gap 0.15
        ([0.85, 0.6], True),  # exactly at the threshold
        ([0.84, 0.1], False),  # top too low
        ([0.95, 0.81], False),  # gap 0.14
        ([0.9], True),  # second counts as 0
        ([], False),
    ],
)
def test_strong_signal(scores, skip):
    assert strong_signal(scores, min_score=0.85, min_gap=0.15).skip is skip


def test_strong_signal_disabled_by_intent():
    d = strong_signal([0.99, 0.1], min_score=0.85, min_gap=0.15, intent="for my thesis")
    assert not d.skip and "intent" in d.message


# -- expansion -----------------------------------------------------------------------------
def test_query_terms_cjk_bigrams_and_stopwords():
    assert query_terms("東京の天気") == ["東京", "京の", "の天", "天気"]
    assert query_terms("what is rrf") == ["rrf"]
    assert query_terms("猫") == ["猫"]


def test_filter_drops_equal_and_unrelated_lines():
    cfg = PipelineConfig()
    got = filter_expansions(
        "東京 天気", [("lex", "東京 天気"), ("vec", "東京の明日の天気予報"), ("lex", "大阪の観光")], cfg
    )
    assert [(e.kept, e.reason_dropped) for e in got] == [
        (False, "equals the query"),
        (True, None),
        (False, "shares no query term"),
    ]


def test_filter_respects_stage_switches_and_user_lines():
    got = filter_expansions(
        "git", [("vec", "pasta"), ("hyde", "git")], PipelineConfig(vector=False), origin="user", check_terms=False
    )
    assert [e.reason_dropped for e in got] == ["vector search disabled", "vector search disabled"]
    assert all(e.origin == "user" for e in got)
    assert shares_term("Git Rebase", "rebasing? no: REBASE") is True


def test_parse_query_document():
    doc = "intent: release notes\nlex: changelog\nvec: what changed in v2\nhyde: Version 2 adds...\nplain words"
    assert parse_query_document(doc) == (
        "plain words",
        "release notes",
        [("lex", "changelog"), ("vec", "what changed in v2"), ("hyde", "Version 2 adds...")],
    )


# -- routing ---------------------------------------------------------------------------------
def test_route_types_and_switches():
    lines = [("lex", "a b"), ("vec", "c d"), ("hyde", "e f"), ("lex", "A  B")]
    r = route("q", lines, PipelineConfig())
    assert [(x.source, x.query_type) for x in r] == [
        ("fts", "original"),
        ("vec", "original"),
        ("fts", "lex"),
        ("vec", "vec"),
        ("vec", "hyde"),
    ]
    assert [(x.source, x.query_type) for x in route("q", lines, PipelineConfig(hyde=False))][-1] == ("vec", "vec")
    assert [x.source for x in route("", [("lex", "a")], PipelineConfig())] == ["fts"]


def test_reweight_and_ablate():
    n = 5
    df = pl.DataFrame(
        {
            "qid": ["q"] * n,
            "list_id": list(range(n)),
            "source": ["fts", "vec", "fts", "vec", "vec"],
            "query_type": ["original", "original", "lex", "vec", "hyde"],
            "subquery": ["s"] * n,
            "docno": [f"d{i}" for i in range(n)],
            "chunk_id": [None] * n,
            "rank": [1, 1, 1, 1, 25],
            "backend_score": [1.0] * n,
            "score": [1.0] * n,
            "weight": [0.0] * n,
        },
        schema=SCHEMAS["lists"],
    )
    c = CodedLists(df)
    cfg = PipelineConfig(weight_original_vec=3.0, weight_hyde=0.5)
    assert c.in_input_order(c.weights(cfg)).tolist() == [2.0, 3.0, 1.0, 1.0, 0.5]
    assert reweight(df, cfg)["weight"].to_list() == [2.0, 3.0, 1.0, 1.0, 0.5]

    def kept(cfg: PipelineConfig, col: str) -> list:
        out = df.filter(pl.Series(c.in_input_order(c.active(cfg))))
        assert out.equals(ablate(df, cfg))  # the frame function keeps the same rows
        return out[col].to_list()

    assert len(kept(PipelineConfig(list_limit=20), "source")) == 4
    assert kept(PipelineConfig(vector=False), "source") == ["fts", "fts"]
    assert kept(PipelineConfig(expand=False), "query_type") == ["original", "original"]


# -- chunk selection ------------------------------------------------------------------------
def chunks(rows):
    return pl.DataFrame(
        {
            "chunk_id": [r[0] for r in rows],
            "docno": [r[1] for r in rows],
            "seq": [r[2] for r in rows],
            "text": [r[3] for r in rows],
        }
    )


def test_select_most_hits_ties_first_and_intent_bonus():
    c = chunks(
        [
            (1, "a", 0, "git intro"),
            (2, "a", 1, "git rebase details"),
            (3, "a", 2, "rebase git again"),
            (4, "b", 0, "rebase"),
            (5, "b", 1, "history of git"),
        ]
    )
    out = select_chunks(c, ["b", "a"], "git rebase", None, PipelineConfig())
    assert out.select("docno", "chunk_id", "hits").rows() == [("b", 4, 1.0), ("a", 2, 2.0)]
    out = select_chunks(c, ["b"], "git rebase", "rewrite history", PipelineConfig())
    assert out.select("chunk_id", "hits").rows() == [(5, 1.5)]  # 1 query term + 0.5 for "history"
    out = select_chunks(c, ["b"], "git rebase", "rewrite history", PipelineConfig(intent_term_bonus=0.0))
    assert out["chunk_id"].to_list() == [4]  # tie at 1 hit -> first chunk


def test_select_df_filter_ignores_common_terms():
    c = chunks(
        [(1, "a", 0, "git log"), (2, "a", 1, "git rebase"), (3, "b", 0, "git"), (4, "c", 0, "git"), (5, "d", 0, "git")]
    )
    plain = select_chunks(c, ["a", "b", "c", "d"], "git log rebase", None, PipelineConfig())
    filt = select_chunks(c, ["a", "b", "c", "d"], "git log rebase", None, PipelineConfig(df_filter=True))
    assert plain.filter(pl.col("docno") == "a")["hits"].to_list() == [2.0]
    assert filt.filter(pl.col("docno") == "a")["hits"].to_list() == [1.0]  # "git" is in 4 of 4 docs


# -- finish ----------------------------------------------------------------------------------
def final(n=5, qid="q"):
    return pl.DataFrame(
        {
            "qid": [qid] * n,
            "docno": [f"d{i}" for i in range(1, n + 1)],
            "final_score": [1.0 - 0.1 * i for i in range(n)],
            "final_rank": list(range(1, n + 1)),
        }
    )


def test_finish_min_score_and_limit():
    out = finish(final(), PipelineConfig(min_score=0.65, limit=10))
    assert out["docno"].to_list() == ["d1", "d2", "d3", "d4"]
    out = finish(pl.concat([final(5, "a"), final(2, "b")]), PipelineConfig(limit=3))
    assert out.group_by("qid", maintain_order=True).len().rows() == [("a", 3), ("b", 2)]


def test_tag_lift_is_bounded():
    tags = pl.DataFrame({"docno": ["d5", "d2"], "tags": [["Git"], ["git"]]})
    out = finish(final(), PipelineConfig(tags=("git",), tag_lift=1, limit=10), doc_tags=tags)
    assert out["docno"].to_list() == ["d2", "d1", "d3", "d5", "d4"]
    assert out["final_rank"].to_list() == [1, 2, 3, 4, 5]
    unlifted = finish(final(), PipelineConfig(tags=("git",), tag_lift=0, limit=10), doc_tags=tags)
    assert unlifted["docno"].to_list() == ["d1", "d2", "d3", "d4", "d5"]


# -- trace ------------------------------------------------------------------------------------
def test_trace_parquet_roundtrip_and_concat(tmp_path):
    t = Trace(
        final=pl.DataFrame(
            {
                "qid": ["q"],
                "docno": ["d"],
                "fused_rank": [1],
                "position_score": [1.0],
                "blend_weight": [1.0],
                "rerank_score": [None],
                "final_score": [1.0],
                "final_rank": [1],
            }
        ),
        config={"rrf_k": 60},
    )
    both = Trace.concat([t, t])
    assert both.final.height == 2 and both.lists.columns == empty("lists").columns
    back = Trace.from_parquet(t.to_parquet(tmp_path / "t"))
    assert back == t and back.config == {"rrf_k": 60}
