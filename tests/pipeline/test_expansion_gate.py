"""The expansion gates and the expansion types fused (``expand_gate``, ``expand_types``): closed-form
cases on hand-made lists, the config options, and the differential check that a fresh
``Lab.query``, ``retune`` of a trace recorded without them and a tuning ``Study`` agree."""

from __future__ import annotations

import polars as pl
import pytest

from qmdlab.errors import ConfigError
from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander, TableReranker, term_overlap
from qmdlab.pipeline.coded import CodedLists
from qmdlab.pipeline.config import FUSION_METHODS, PipelineConfig
from qmdlab.pipeline.fuse import contributions, fuse, select_lists, selection_notes
from qmdlab.pipeline.lab import Lab
from qmdlab.pipeline.retune import retune
from qmdlab.pipeline.trace import Trace

BASE = PipelineConfig(rerank=False)
GATE = BASE.replace(expand_gate="overlap", expand_gate_min_overlap=0.3, expand_gate_k=10)


def _lists(spec: dict[str, list[tuple[str, str, list[str]]]]) -> pl.DataFrame:
    """``{qid: [(source, query_type, docnos ranked)]}`` as a ``lists`` table (scores fall with rank)."""
    rows = []
    for qid, lists in spec.items():
        for list_id, (source, query_type, docs) in enumerate(lists):
            for rank, d in enumerate(docs, 1):
                rows.append(
                    {
                        "qid": qid,
                        "list_id": list_id,
                        "source": source,
                        "query_type": query_type,
                        "subquery": f"{query_type} {list_id}",
                        "docno": d,
                        "chunk_id": rank,
                        "rank": rank,
                        "backend_score": 1.0 / rank,
                        "score": 1.0 - rank / 100.0,
                        "weight": BASE.list_weight(source, query_type),
                    }
                )
    return Trace(lists=pl.DataFrame(rows)).lists


ORIGINAL = [("fts", "original", ["a", "b", "c", "d"]), ("vec", "original", ["b", "a", "e", "f"])]
DISJOINT = {"q": ORIGINAL + [("fts", "lex", ["x", "y", "z"]), ("vec", "hyde", ["y", "w"])]}
SAME = {"q": ORIGINAL + [("fts", "lex", ["f", "e", "d", "c"]), ("vec", "vec", ["a", "b"])]}


def _fused(lists: pl.DataFrame, config: PipelineConfig) -> pl.DataFrame:
    return retune(Trace(lists=lists), config).fused


def test_expansion_lists_disjoint_from_the_originals_are_gated_to_the_no_expansion_ranking():
    lists = _lists(DISJOINT)
    gated = retune(Trace(lists=lists), GATE)
    assert gated.fused.equals(_fused(lists, BASE.replace(expand=False)))  # exactly: every column
    assert gated.final.equals(retune(Trace(lists=lists), BASE.replace(expand=False)).final)
    assert not gated.fused.equals(_fused(lists, BASE))  # the expansions do change the ungated ranking
    assert gated.notes_for("fuse") == [
        "expansion gated: overlap 0.00 < 0.30 (the expansion lists' top 10 hold 0 of the original lists' "
        "top 6): original lists only"
    ]
    assert gated.lists.equals(retune(Trace(lists=lists), BASE).lists)  # the lists stay recorded
    assert fuse(lists, GATE).equals(gated.fused)  # the frame path gates alike


@pytest.mark.parametrize("method", FUSION_METHODS)
def test_the_gate_gives_the_no_expansion_ranking_under_every_fusion_method(method):
    lists = _lists(DISJOINT)
    assert _fused(lists, GATE.replace(fusion=method)).equals(_fused(lists, BASE.replace(fusion=method, expand=False)))


def test_expansion_lists_that_find_the_originals_top_documents_are_not_gated():
    lists = _lists(SAME)
    out = retune(Trace(lists=lists), GATE.replace(expand_gate_min_overlap=1.0))
    assert out.fused.equals(_fused(lists, BASE))  # full overlap: the gate changes nothing
    assert out.notes_for("fuse") == [
        "expansion kept: overlap 1.00 >= 1.00 (the expansion lists' top 10 hold 6 of the original lists' top 6)"
    ]


def test_the_overlap_is_the_share_of_the_original_top_k_and_the_threshold_is_strict():
    # originals' top 2 (fused alone): a, b; the expansion's top 2: a, z -> overlap 1/2
    lists = _lists({"q": ORIGINAL + [("fts", "lex", ["a", "z", "b"])]})
    coded = CodedLists(lists)
    at = select_lists(coded, GATE.replace(expand_gate_k=2, expand_gate_min_overlap=0.5))
    assert at.gate is not None and at.gate.overlap.tolist() == [0.5] and at.gate.gated.tolist() == [False]
    above = select_lists(coded, GATE.replace(expand_gate_k=2, expand_gate_min_overlap=0.51))
    assert above.gate.gated.tolist() == [True]  # type: ignore[union-attr]
    assert select_lists(coded, GATE.replace(expand_gate_k=3, expand_gate_min_overlap=0.0)).gate.gated.tolist() == [  # type: ignore[union-attr]
        False
    ]  # 0 never gates
    assert select_lists(coded, BASE).gate is None  # off: nothing measured


def test_the_gate_decides_per_query_and_leaves_queries_without_both_sides_alone():
    lists = _lists(
        {
            "gated": DISJOINT["q"],
            "kept": SAME["q"],
            "no-expansion": ORIGINAL,
            "typed-only": [("fts", "lex", ["x", "y"])],  # user-typed searches, no original lists
        }
    )
    out = retune(Trace(lists=lists), GATE)
    notes = dict(zip(out.notes["qid"].to_list(), out.notes["message"].to_list()))
    assert sorted(notes) == ["gated", "kept"]
    assert notes["gated"].startswith("expansion gated: overlap 0.00 < 0.30")
    assert notes["kept"].startswith("expansion kept: overlap 1.00 >= 0.30")
    off = retune(Trace(lists=lists), BASE.replace(expand=False)).final
    on = retune(Trace(lists=lists), BASE).final

    def of(frame, qid):
        return frame.filter(pl.col("qid") == qid)

    assert of(out.final, "gated").equals(of(off, "gated"))
    assert of(out.final, "kept").equals(of(on, "kept"))
    assert of(out.final, "typed-only").equals(of(on, "typed-only"))  # never gated: nothing else to rank by


def test_a_gated_querys_expansion_entries_contribute_nothing():
    lists = _lists(DISJOINT)
    c = contributions(lists, GATE)
    expansion = c.filter(pl.col("query_type") != "original")
    assert expansion.height and (expansion["contribution"] == 0.0).all()
    assert (c.filter(pl.col("query_type") == "original")["contribution"] > 0).all()


def test_lex_only_fuses_the_original_and_lex_lists_only():
    lists = _lists({"q": ORIGINAL + [("fts", "lex", ["d", "c"]), ("vec", "vec", ["f", "e"]), ("vec", "hyde", ["e"])]})
    lex_only = retune(Trace(lists=lists), BASE.replace(expand_types="lex"))
    kept = lists.filter(pl.col("query_type").is_in(["original", "lex"]))
    assert lex_only.fused.equals(_fused(kept, BASE))
    assert lex_only.notes_for("fuse") == ["expand_types lex: 2 expansion lists of other types not fused"]
    assert lex_only.lists.height == lists.height  # recorded lists are kept (another config may fuse them)
    # a weight of 0 is not the same: under qmd_rrf a 0-weighted list still gives its rank-1 document the
    # top-rank bonus and counts in n_lists
    zero = _fused(lists, BASE.replace(weight_vec=0.0, weight_hyde=0.0))
    assert not zero.equals(lex_only.fused)
    assert zero.filter(pl.col("docno") == "e")["n_lists"].item() == 3


def test_selection_notes_name_each_decision():
    lists = _lists(DISJOINT)
    coded = CodedLists(lists)
    cfg = GATE.replace(expand_types="lex")
    notes = selection_notes(select_lists(coded, cfg), coded.qids.list, cfg)
    assert [m.split(":")[0] for _, m in notes] == ["expand_types lex", "expansion gated"]


# -- expand_gate: rerank -----------------------------------------------------------------------
RERANK = BASE.replace(expand_gate="rerank", expand_gate_k=10)


def test_rerank_fuses_exactly_the_expansion_entries_of_documents_in_the_original_top_k():
    # the originals (fused alone) rank a, b, c, d, e, f; the lex list names f, x, a and the vec list y, b
    spec = {"q": ORIGINAL + [("fts", "lex", ["f", "x", "a"]), ("vec", "vec", ["y", "b"])]}
    lists = _lists(spec)
    out = retune(Trace(lists=lists), RERANK)
    by_hand = lists.filter(~pl.col("docno").is_in(["x", "y"]))  # the same entries, ranks as recorded
    assert out.fused.equals(_fused(by_hand, BASE))
    assert set(out.fused["docno"]) == set("abcdef")  # nothing the query did not find
    assert not out.fused.equals(_fused(lists, BASE.replace(expand=False)))  # and f, a, b were lifted
    assert out.notes_for("fuse") == [
        "expansion re-ranks the original lists' top 10: 2 of 5 expansion entries name other documents, not fused"
    ]
    # k = 2: only the originals' top 2 (a, b) may be lifted
    top2 = retune(Trace(lists=lists), RERANK.replace(expand_gate_k=2))
    assert top2.fused.equals(
        _fused(
            lists.filter(
                pl.col("docno").is_in(list("abcdef"))
                & ~((pl.col("query_type") != "original") & pl.col("docno").is_in(["f"]))
            ),
            BASE,
        )
    )
    assert fuse(lists, RERANK).equals(out.fused)  # the frame path alike


@pytest.mark.parametrize("method", FUSION_METHODS)
def test_rerank_of_disjoint_expansions_is_the_no_expansion_ranking_under_every_fusion_method(method):
    lists = _lists(DISJOINT)
    assert _fused(lists, RERANK.replace(fusion=method)).equals(_fused(lists, BASE.replace(fusion=method, expand=False)))


def test_rerank_leaves_a_query_without_original_lists_whole_and_drops_contributions_outside():
    lists = _lists({"typed-only": [("fts", "lex", ["x", "y"])], "q": DISJOINT["q"]})
    out = retune(Trace(lists=lists), RERANK)
    on = retune(Trace(lists=lists), BASE)
    assert out.final.filter(pl.col("qid") == "typed-only").equals(on.final.filter(pl.col("qid") == "typed-only"))
    assert [q for q, _ in _fuse_notes(out)] == ["q"]
    c = contributions(_lists(DISJOINT), RERANK)
    assert (c.filter(pl.col("query_type") != "original")["contribution"] == 0.0).all()


# -- config ------------------------------------------------------------------------------------
def test_the_options_default_off_and_keep_old_cache_keys():
    c = PipelineConfig()
    assert (c.expand_gate, c.expand_gate_min_overlap, c.expand_gate_k, c.expand_types) == (
        "off",
        0.3,
        10,
        "lex,vec,hyde",
    )
    assert not {"expand_gate", "expand_gate_min_overlap", "expand_gate_k", "expand_types"} & set(c.to_dict())
    changed = c.replace(expand_gate="overlap", expand_types="lex", expand_gate_min_overlap=0.5, expand_gate_k=5)
    assert changed.recorded_dict() == c.recorded_dict()  # re-run on recorded lists, never re-recorded
    assert not {"expand_gate", "expand_types"} & PipelineConfig.recorded_fields()


def test_the_options_round_trip_through_dict_and_yaml(tmp_path):
    from qmdlab.eval.optimise import write_config

    c = PipelineConfig(expand_gate="overlap", expand_gate_min_overlap=0.25, expand_gate_k=5, expand_types="hyde,lex")
    assert c.expand_types == "lex,hyde"  # one spelling
    assert PipelineConfig.from_dict(c.to_dict()) == c
    write_config(c, tmp_path / "c.yaml")
    assert PipelineConfig.from_yaml(tmp_path / "c.yaml") == c
    (tmp_path / "l.yaml").write_text("pipeline:\n  expand_types: [lex]\n  expand_gate: overlap\n")
    assert PipelineConfig.from_yaml(tmp_path / "l.yaml").expand_types == "lex"
    (tmp_path / "t.toml").write_text('expand_types = "vec"\nexpand_gate_min_overlap = 1\n')
    t = PipelineConfig.from_toml(tmp_path / "t.toml")
    assert (t.expand_types, t.expand_gate_min_overlap) == ("vec", 1.0)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"expand_gate": "jaccard"}, "unknown expand_gate"),
        ({"expand_gate_min_overlap": 1.5}, "expand_gate_min_overlap"),
        ({"expand_gate_min_overlap": float("nan")}, "expand_gate_min_overlap"),
        ({"expand_gate_k": 0}, "expand_gate_k"),
        ({"expand_types": "lex,query"}, "unknown type 'query'"),
        ({"expand_types": ""}, "names no type"),
        ({"expand_gate": "overlap", "fusion": "learned", "learned_model": "m.txt"}, "formula fusion"),
    ],
)
def test_bad_values_are_refused(options, message):
    with pytest.raises(ConfigError, match=message):
        PipelineConfig.from_dict(options)


# -- Lab.query, retune and the Study agree ------------------------------------------------------
RULES = {
    # each expansion line shares a term with its query (the expander filter keeps it)
    "git rebase": [("lex", "rebase pasta boil salt water"), ("vec", "cooking pasta rebase"), ("hyde", "pasta git")],
    "sqlite search": [("lex", "sqlite full text search"), ("vec", "search bm25 sqlite"), ("hyde", "sqlite search")],
    "docker network": [("lex", "docker bridge network containers"), ("vec", "network pasta")],
}
CONFIGS = [
    {"expand_gate": "overlap", "expand_gate_k": 2, "expand_gate_min_overlap": 0.5},
    {"expand_gate": "overlap", "expand_gate_k": 3, "expand_gate_min_overlap": 0.9, "fusion": "rrf"},
    {"expand_types": "lex"},
    {"expand_types": "vec,hyde", "expand_gate": "overlap", "expand_gate_k": 1, "expand_gate_min_overlap": 1.0},
    {"expand_gate": "overlap", "expand_gate_k": 2, "expand_gate_min_overlap": 0.6, "fusion": "norm_sum"},
    {"expand_gate": "rerank", "expand_gate_k": 2},
    {"expand_gate": "rerank", "expand_gate_k": 5, "expand_types": "lex,vec", "fusion": "combmnz"},
]


@pytest.fixture
def lab(small_index):
    idx, emb = small_index
    lab = Lab(idx, ModelSet(emb, RuleExpander(RULES), TableReranker({}, default=term_overlap)))
    lab.config = lab.config.replace(strong_signal=False)
    return lab


def _fuse_notes(trace: Trace) -> list[tuple[str, str]]:
    n = trace.notes.filter(pl.col("stage") == "fuse")
    return list(zip(n["qid"].to_list(), n["message"].to_list()))


@pytest.mark.parametrize("options", CONFIGS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_retune_and_the_study_equal_a_fresh_query(lab, options):
    from qmdlab.eval.study import Study

    recorded = Trace.concat(lab.query(q, qid=str(i)) for i, q in enumerate(RULES))
    fresh = Trace.concat(lab.query(q, qid=str(i), **options) for i, q in enumerate(RULES))
    cfg = lab.config.replace(**options)
    again = retune(recorded, cfg)
    assert again.fused.equals(fresh.fused)
    assert again.final.equals(fresh.final)
    assert _fuse_notes(again) == _fuse_notes(fresh)
    qrels = pl.DataFrame(
        {"qid": ["0", "1", "2"], "docno": ["notes/git-rebase.md", "notes/sqlite.md", "notes/docker.md"]}
    )
    study = Study(recorded, qrels.with_columns(grade=pl.lit(1)), config=lab.config)
    assert study.final(cfg).equals(fresh.final)
    study.fast = False  # the frame functions (coded anew each call) too
    assert study.final(cfg).equals(fresh.final)


def test_the_fresh_query_notes_the_gate(lab):
    trace = lab.query("git rebase", **CONFIGS[0])  # 1 of the top 2: overlap 0.5, not below 0.5
    assert trace.notes_for("fuse") == [
        "expansion kept: overlap 0.50 >= 0.50 (the expansion lists' top 2 hold 1 of the original lists' top 2)"
    ]
    closed = lab.query("git rebase", expand_gate="overlap", expand_gate_k=2, expand_gate_min_overlap=0.6)
    assert closed.notes_for("fuse") == [
        "expansion gated: overlap 0.50 < 0.60 (the expansion lists' top 2 hold 1 of the original lists' top 2): "
        "original lists only"
    ]
    plain = lab.query("git rebase", expand=False)
    assert closed.final.equals(plain.final) and closed.fused.equals(plain.fused)
    assert closed.lists.height > plain.lists.height  # the expansion lists were retrieved and stay in the trace
