"""``qmdlab eval SUITE --frontier``: held-out quality against measured latency, the Pareto front and the pick."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from qmdlab.errors import ConfigError
from qmdlab.eval.frontier import Frontier, Point, _table, frontier
from qmdlab.eval.frontier_pick import parse_pick, pick
from qmdlab.eval.suites import get_suite
from qmdlab.models import load_models
from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander
from qmdlab.pipeline.config import FUSION_METHODS, PipelineConfig

# words of the fake embedder's vocabulary, so the vector leg finds something
DOCS = {
    "1": ("Git rebase", "rebase a git branch onto another commit"),
    "2": ("Git merge", "merge a branch with a merge commit"),
    "3": ("Docker network", "docker containers share a network"),
    "4": ("SQLite search", "full text search index in a sqlite database"),
    "5": ("Python test", "run python test files"),
    "6": ("Cache", "cache data in memory for performance"),
    "7": ("HTTP API", "a json api over an http server"),
    "8": ("Shell", "linux shell user password security"),
}
QUERIES = {
    "1": "git rebase branch",
    "2": "merge commit",
    "3": "docker network",
    "4": "sqlite search index",
    "5": "python test",
    "6": "memory cache performance",
    "7": "http json api",
    "8": "linux user security",
}
QRELS = [
    ("1", "1"),
    ("1", "2"),
    ("2", "2"),
    ("3", "3"),
    ("4", "4"),
    ("5", "5"),
    ("6", "6"),
    ("7", "7"),
    ("8", "8"),
    ("8", "3"),
]


def zoo(tmp_path: Path):
    d = tmp_path / "zoo"
    d.mkdir()
    (d / "Z.ALL").write_text("".join(f".I {i}\n.T\n{t}\n.W\n{w}\n" for i, (t, w) in DOCS.items()))
    (d / "Z.QRY").write_text("".join(f".I {q}\n.W\n{text}\n" for q, text in QUERIES.items()))
    (d / "Z.REL").write_text("".join(f"{q} {doc} 0 0.0\n" for q, doc in QRELS))
    return get_suite(d, "smart")


def loader(preset=None, **roles):
    fake = load_models("fake")
    expander = RuleExpander(lambda q: [("lex", f"{q} data"), ("vec", f"{q} note"), ("hyde", f"a file about {q}")])
    return ModelSet(
        fake.embedder,
        None if roles.get("expand") == "none" else expander,
        None if roles.get("rerank") == "none" else fake.reranker,
    )


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_frontier_rows_are_held_out_and_timed(tmp_path, qmdlab_home):
    suite = zoo(tmp_path)
    res = frontier(
        suite, "fake", llm_queries=4, folds=2, trials=10, learned=False, log=lambda m: None, load_models=loader
    )
    names = [p.name for p in res.points]
    assert (
        names[:2] == ["bm25", "vector"]
        and [f"hybrid {m}" for m in FUSION_METHODS] == names[2 : 2 + len(FUSION_METHODS)]
    )
    assert {"tuned", "+lex", "+lex+vec", "+lex+vec+hyde", "+rerank"} <= set(names)
    table = {r["config"]: r for r in res.table.iter_rows(named=True)}
    # the LLM rows stand on the first 4 queries, the rest on all 8
    assert table["+rerank"]["n"] == 4 and table["bm25"]["n"] == 8 and res.llm_queries == 4
    # every row is timed on this machine; the retrieval rows by the run they name
    assert all(r["s_per_query"] is not None and r["s_per_query"] > 0 for r in table.values())
    assert table["hybrid rrf"]["s_per_query"] == table["hybrid qmd_rrf"]["s_per_query"]
    # the tuned row is qmdlab tune's cross-validation: the same folds and held-out scores
    from qmdlab.eval.optimise import cross_validate
    from qmdlab.eval.record import record
    from qmdlab.eval.study import Study

    rec = record(
        suite, loader(expand="none", rerank="none"), PipelineConfig(expand=False, rerank=False), log=lambda m: None
    )
    study = Study.from_recording(rec, metrics=["ndcg@10"])
    direct = cross_validate(study, base=study.config, trials=10, folds=2, seed=0)
    tuned = res.point("tuned").per_query.sort("qid")
    assert tuned["ndcg@10"].to_list() == direct.held_out.sort("qid")["tuned"].to_list()
    assert table["tuned"]["held_out"] == "2-fold" and table["bm25"]["held_out"].startswith("all queries")
    # files: the table, per-query scores and the plot
    assert (res.out_dir / "frontier.png").stat().st_size > 1000
    assert pl.read_csv(res.out_dir / "frontier.csv").height == len(res.points)


def pt(name, secs, scores, qids=None, cfg=True):
    qids = qids or [str(i) for i in range(1, len(scores) + 1)]
    return Point(
        name,
        name,
        pl.DataFrame({"qid": qids, "ndcg@10": scores}),
        "all queries",
        PipelineConfig() if cfg else None,
        name,
        secs,
    )


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_best_cheaper_pvalues_front_and_pick_by_hand():
    from scipy.stats import ttest_rel

    a = pt("a", 0.01, [0.5, 0.5, 0.5, 0.5])
    b = pt("b", 0.02, [0.9, 0.5, 0.8, 0.6])  # mean 0.70
    c = pt("c", 0.03, [0.6, 0.7, 0.5, 0.6])  # mean 0.60: slower and worse than b
    d = pt("d", 0.05, [1.0, 0.6], qids=["1", "2"])  # on queries 1-2: 0.80 against b's 0.70
    v = pt("v", 0.005, [0.1, 0.1, 0.1, 0.1], cfg=False)  # fastest, not a query config
    points = [v, a, b, c, d]
    table = {r["config"]: r for r in _table(points, "ndcg@10").iter_rows(named=True)}
    assert [n for n, r in table.items() if r["pareto"]] == ["v", "a", "b", "d"]
    # best cheaper = the highest mean among faster rows, on the shared queries
    assert (table["c"]["vs_cheaper"], table["b"]["vs_cheaper"], table["d"]["vs_cheaper"]) == ("b", "a", "b")
    assert table["v"]["vs_cheaper"] is None and table["v"]["p_ttest"] is None
    assert table["c"]["delta"] == pytest.approx(-0.10)
    assert table["c"]["p_ttest"] == pytest.approx(ttest_rel([0.9, 0.5, 0.8, 0.6], [0.6, 0.7, 0.5, 0.6]).pvalue)
    assert table["d"]["delta"] == pytest.approx(0.10)  # (1.0 + 0.6)/2 - (0.9 + 0.5)/2
    res = Frontier("t", "ndcg@10", points, _table(points, "ndcg@10"), 0, 4)
    assert pick(res).name == "d"  # best, judged on its own two queries against b
    assert pick(res, "fastest-within", 0.10).name == "b"  # 0.10 below d: within
    assert pick(res, "fastest-within", 0.05).name == "d"  # b is 0.10 below: not within
    assert pick(res, "fastest-within", 0.40).name == "a"  # v is faster but no query config runs it


def test_pick_parsing_names_the_fix():
    assert parse_pick("fastest-within", ["0.005"]) == ("fastest-within", 0.005)
    with pytest.raises(ConfigError, match="--pick fastest-within needs"):
        parse_pick("fastest-within")
    with pytest.raises(ConfigError, match="use --pick best or --pick fastest-within DELTA"):
        parse_pick("cheapest")


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_cli_frontier_writes_the_pick_for_query(tmp_path, qmdlab_home):
    from qmdlab.cli import cli

    suite = zoo(tmp_path)
    out = tmp_path / "picked.yaml"
    res = CliRunner().invoke(
        cli,
        [
            "eval",
            str(suite.path),
            "--format",
            "smart",
            "--frontier",
            "--preset",
            "fake",
            "--no-progress",
            "--folds",
            "2",
            "--llm-queries",
            "3",
            "--write-config",
            str(out),
            "--pick",
            "fastest-within",
            "0.005",
            "--out",
            str(tmp_path / "f"),
        ],
    )
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "suite zoo: frontier, grades: gain (as coded)"
    assert lines[1].startswith("configuration") and any(ln.startswith("hybrid qmd_rrf") for ln in lines)
    assert "stand on the first 3 of 8 judged queries (--llm-queries), top 40 fused documents reranked" in res.stdout
    assert (tmp_path / "f" / "frontier.png").is_file()
    cfg = PipelineConfig.from_file(out)
    assert {"expand", "rerank"} <= cfg.given()  # the pick decides the stages, not the preset's default
    text = out.read_text()
    assert text.startswith("# qmdlab eval zoo --frontier --pick fastest-within 0.005: ")
    bad = CliRunner().invoke(cli, ["eval", str(suite.path), "--format", "smart", "--frontier", "--ablate"])
    assert bad.exit_code != 0 and "drop --ablate" in bad.output
    stray = CliRunner().invoke(cli, ["eval", str(suite.path), "--format", "smart", "0.005"])
    assert stray.exit_code != 0 and "unexpected extra argument" in stray.output


def fake_reranker_run(tmp_path, suite):
    """A finished `qmdlab train reranker` run directory of ``suite``: its recorded traces, held-out scores
    that put every relevant candidate first (an oracle), and the model reference (the overlap fake)."""
    import json

    from qmdlab.eval.runner import run_suite

    run = tmp_path / "rr-run"
    res = run_suite(
        suite,
        loader(expand="none", rerank="none"),
        PipelineConfig(expand=False, rerank=False),
        out=run / "recorded",
        progress=False,
        log=lambda m: None,
        check_ranx=False,
    )
    relevant = set(res.qrels.select("qid", "docno").iter_rows())
    chunk = res.trace.lists.sort("rank").unique(["qid", "docno"], keep="first").select("qid", "docno", "chunk_id")
    top = res.trace.fused.filter(pl.col("fused_rank") <= 5).join(chunk, on=["qid", "docno"], how="left")
    top.with_columns(
        pl.struct("qid", "docno")
        .map_elements(lambda r: float((r["qid"], r["docno"]) in relevant), return_dtype=pl.Float64)
        .alias("rerank_score")
    ).select("qid", "docno", "chunk_id", "rerank_score").write_parquet(run / "heldout_scores.parquet")
    (run / "config.yaml").write_text("candidates: 5\n")
    (run / "DONE").write_text(json.dumps({"suite": suite.name, "model": "fake:overlap"}))
    return run


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_trained_reranker_row_is_held_out_and_timed(tmp_path, qmdlab_home):
    from qmdlab.training.reranker_study import load_heldout_study

    suite = zoo(tmp_path)
    run = fake_reranker_run(tmp_path, suite)
    res = frontier(
        suite,
        "fake",
        llm_queries=0,
        folds=2,
        trials=5,
        learned=False,
        log=lambda m: None,
        load_models=loader,
        reranker_runs=[run],
    )
    p = res.point("trained reranker")
    held = load_heldout_study(run)
    assert p.per_query.sort("qid").equals(
        held.study.evaluate(held.start).per_query.select("qid", "ndcg@10").sort("qid")
    )
    assert p.seconds is not None and p.config is None and p.held_out == "k-fold (trained)"
    row = res.table.filter(pl.col("config") == "trained reranker").row(0, named=True)
    assert row["writable"] is False and row["vs_cheaper"] is not None  # paired against a faster row
    with pytest.raises(ConfigError, match="--reranker-run .*not a finished `qmdlab train reranker` run"):
        frontier(
            suite,
            "fake",
            llm_queries=0,
            folds=2,
            trials=5,
            learned=False,
            log=lambda m: None,
            load_models=loader,
            reranker_runs=[tmp_path / "nothing"],
        )


def test_recorded_seconds_price_cached_answers_at_the_measured_speed(qmdlab_home):
    from qmdlab.eval.frontier import recorded_seconds
    from qmdlab.pipeline import speed
    from qmdlab.pipeline.trace import SCHEMAS, Trace

    class Model:
        def __init__(self, name):
            self.fingerprint = name

    expander, reranker = Model("t:exp"), Model("t:rr")
    timings = pl.DataFrame(
        {
            "qid": ["1"] * 3 + ["2"] * 3,
            "stage": ["retrieve", "expand", "rerank"] * 2,
            "ms": [10.0, 2000.0, 3000.0, 10.0, 1.0, 1.0],
        },
        schema=SCHEMAS["timings"],
    )
    notes = pl.DataFrame(
        {
            "qid": ["1", "2"],
            "stage": ["expand", "expand"],
            "message": ["3 of 3 lines kept", "3 of 3 lines kept (from cache)"],
        },
        schema=SCHEMAS["notes"],
    )
    rerank = pl.DataFrame(
        {
            "qid": ["1", "1", "2", "2"],
            "docno": ["a", "b", "a", "b"],
            "chunk_id": [1, 2, 1, 2],
            "chunk_hash": [""] * 4,
            "rerank_score": [0.5] * 4,
            "cached": [False, False, True, True],
        },
        schema=SCHEMAS["rerank"],
    )
    trace = Trace(timings=timings, notes=notes, rerank=rerank)
    models = (None, expander, reranker)
    speed.reset()
    # query 1 was computed when recorded: its own stage times; query 2 came from the LLM cache: no measurement yet
    assert recorded_seconds(trace, "1", None, models) == pytest.approx(5.01)
    assert recorded_seconds(trace, "2", None, models) is None
    # earlier recordings' medians (expansion 3 s a query, rerank 0.5 s a document) stand in for no running mean
    assert recorded_seconds(trace, "2", None, models, ([2.0, 3.0, 9.0], [0.5])) == pytest.approx(0.011 + 3.0 + 1.0)
    speed.observe(expander, "expand", 4.0)
    speed.observe(reranker, "rerank", 3.0, 2)  # 1.5 s a pair
    # 10 ms retrieval + 1 ms (cache lookup) replaced by 4 s + 1 ms lookup + 2 pairs at 1.5 s
    assert recorded_seconds(trace, "2", None, models) == pytest.approx(0.010 + 4.0 + 0.001 + 3.0)
    assert recorded_seconds(trace, "2", ["retrieve", "expand"], models) == pytest.approx(4.010)
    speed.reset()


def test_timing_interleaves_the_runs_after_a_warm_up():
    from qmdlab.eval.frontier import time_interleaved

    calls = []

    class Lab:
        def __init__(self, name):
            self.name = name

        def query(self, text, **kw):
            calls.append((self.name, text))

    queries = pl.DataFrame({"qid": ["1", "2", "3"], "query": ["a", "b", "c"], "intent": [None] * 3})
    out = time_interleaved({"x": Lab("x"), "y": Lab("y")}, queries, warmup=1)
    assert calls == [
        ("x", "a"),
        ("y", "a"),  # warm-up, untimed
        ("x", "a"),
        ("y", "a"),
        ("y", "b"),
        ("x", "b"),
        ("x", "c"),
        ("y", "c"),
    ]
    assert {k: len(v) for k, v in out.items()} == {"x": 3, "y": 3}
