"""The cross-encoder trained on synthetic queries (``qmdlab train reranker --synthetic``): end to end on
a tiny random BERT, the held-out split kept out of training and of every choice, and a generated
query equal to a held-out query refused."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import polars as pl
import pytest

from tests.training.test_reranker import TOPICS, build_tiny_bert, small_cfg, write_suite

pytestmark = pytest.mark.extra("train", "sentence_transformers")


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    os.environ["HF_HUB_OFFLINE"] = "1"
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def _topic_query(passage: str, i: int) -> str:
    """The passage's first topic word and its kind: ``apple guide care`` for the main document
    (kept: it ranks first), ``bread memo mention`` for a distractor (kept or dropped by the round trip)."""
    words = re.findall(r"[a-z]+", passage.lower())
    topic = next(w for w in words if w in TOPICS)
    return f" {topic} guide care\n" if "guide" in words[:4] else f" {topic} memo mention\n"


def _expanded_suite(tmp_path: Path, tiny_bert: Path, generate=_topic_query):
    """A suite whose index holds kept generated queries, and a generator run directory with a split."""
    from qmdlab.models.doc_query_gen import TableDocQueryGenerator
    from qmdlab.pipeline.doc_expand import expand_documents
    from qmdlab.training.reranker_data import record_candidates
    from qmdlab.training.splits import QuerySplit, save_splits

    suite = write_suite(tmp_path / "suite")
    rec = record_candidates(small_cfg(suite, tmp_path / "probe", tiny_bert), log=lambda m: None)
    rep = expand_documents(rec.index, TableDocQueryGenerator(generate), per_chunk=1, top_k=3)
    assert rep.kept > len(TOPICS)  # every main document's query, and some distractors'
    qids = [f"q{i:02d}" for i in range(len(TOPICS))]
    run = tmp_path / "d2q"
    run.mkdir()
    save_splits([QuerySplit(rec.suite.name, tuple(qids[::2]), tuple(qids[1::2]), 0, 0.5)], run / "splits.json")
    return suite, run, qids


def _cfg(suite, out, tiny_bert, run, **kw):
    return small_cfg(
        suite,
        out,
        tiny_bert,
        synthetic=str(run),
        synthetic_hard_negatives=1,
        synthetic_batch_size=8,
        synthetic_epochs=1.0,
        synthetic_head_learning_rate=1e-2,
        **kw,
    )


@pytest.mark.slow
def test_end_to_end_on_synthetic_pairs(tmp_path, qmdlab_home, tiny_bert, monkeypatch):
    from qmdlab.training import reranker_eval, reranker_fit, reranker_synthetic
    from qmdlab.training.reranker import run_reranker

    suite, run, qids = _expanded_suite(tmp_path, tiny_bert)
    heldout = set(qids[1::2])
    seen_rows: list[dict] = []
    real_fit = reranker_fit.fit

    def spy_fit(model, rows, loss, run_dir, **kw):
        seen_rows.extend(rows)
        return real_fit(model, rows, loss, run_dir, **kw)

    scored: dict[str, set[str]] = {}
    real_score = reranker_eval.score_table

    def spy_score(model_dir, table, q, **kw):
        scored.setdefault(Path(model_dir).name + ":" + Path(model_dir).parent.name, set()).update(q)
        return real_score(model_dir, table, q, **kw)

    monkeypatch.setattr(reranker_fit, "fit", spy_fit)
    monkeypatch.setattr(reranker_eval, "score_table", spy_score)
    tuned: list[set[str]] = []
    real_tune = reranker_synthetic.tune_fusion

    def spy_tune(study, config, metric="ndcg@10"):
        tuned.append(set(study.qrels["qid"].unique().to_list()))
        return real_tune(study, config, metric)

    monkeypatch.setattr(reranker_synthetic, "tune_fusion", spy_tune)
    out = tmp_path / "run"
    res = run_reranker(_cfg(suite, out, tiny_bert, run), log=lambda m: None)

    # training read generated queries only: no labelled query text reaches the trainer
    texts = {json.loads(ln)["query"] for ln in (suite / "queries.jsonl").read_text().splitlines()}
    synth = [r for r in seen_rows if "negative_1" in r and r["anchor"].endswith(("care", "mention"))]
    assert synth and not ({r["anchor"] for r in seen_rows} & texts)
    # the fusion was tuned, and the calibration/blend chosen, on train queries only
    assert tuned == [set(qids[::2])]
    synthetic_model = next(k for k in scored if k.endswith(":synthetic"))
    assert scored[synthetic_model] == set(qids)  # train queries for the choices, held-out for the report
    assert res["split"] == {"train": 8, "heldout": 8, "seed": 0}
    table = pl.read_csv(out / "heldout.csv")
    assert table["run"].to_list()[:2] == ["fused", "fused-tuned"]
    assert {"rerank-position", "rerank-tuned"} <= set(table["run"])
    vs = pl.read_csv(out / "heldout_vs_tuned.csv")
    assert vs["run"].to_list()[0] == "fused-tuned" and vs["p_ttest"][0] == 1.0
    # every held-out row is over the held-out queries and nothing else
    lines = (out / "fused-heldout.trec").read_text().splitlines()
    assert {ln.split()[0] for ln in lines} == heldout
    assert res["pairs"] >= len(TOPICS) and res["auc"]["rerank_pooled"] is not None
    from qmdlab.models.cross_encoder import META_FILE

    meta = json.loads((out / "model" / META_FILE).read_text())
    assert meta["labels_used"] is False and meta["stage"] == "synthetic"
    from qmdlab.models.registry import build_model

    rr = build_model("rerank", res["model"], n_threads=1)
    s = rr.score("apple guide care", ["apple guide apple apple", "dance memo"])
    assert len(s) == 2 and all(0.0 <= x <= 1.0 for x in s)
    # resumable: a finished run returns its stored result
    assert run_reranker(_cfg(suite, out, tiny_bert, run), log=lambda m: None)["seconds"] == res["seconds"]


@pytest.mark.slow
def test_a_generated_heldout_query_stops_the_run(tmp_path, qmdlab_home, tiny_bert):
    from qmdlab.training.leakage import LeakError
    from qmdlab.training.reranker import run_reranker

    def leaky(passage: str, i: int) -> str:
        topic = _topic_query(passage, i).split()[0]
        n = TOPICS.index(topic)
        return f" how to care for {topic} number {n}\n"  # the labelled query's own text

    suite, run, _ = _expanded_suite(tmp_path, tiny_bert, generate=leaky)
    with pytest.raises(LeakError, match="reranker pairs: query .* is the held-out query"):
        run_reranker(_cfg(suite, tmp_path / "run", tiny_bert, run, weak=False), log=lambda m: None)
    assert not (tmp_path / "run" / "synthetic").exists()  # refused before any training


def test_train_and_heldout_refuses_a_query_on_both_sides():
    from qmdlab.errors import ConfigError
    from qmdlab.training.reranker_synthetic import train_and_heldout
    from qmdlab.training.splits import QuerySplit

    assert train_and_heldout(["a", "b", "c"], QuerySplit("s", ("a", "x"), ("b",), 0, 0.5)) == (["a"], ["b"])
    with pytest.raises(ConfigError, match="as both"):
        train_and_heldout(["a", "b"], QuerySplit("s", ("a", "b"), ("b",), 0, 0.5))
