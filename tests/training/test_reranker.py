"""The cross-encoder reranker trainer: end to end on a tiny random BERT, determinism, leakage, bad input.

The tiny model (hidden 32, 2 layers) and its WordPiece vocabulary are built here from the test
suite's own words: no hub, no packaged weights, a few seconds of CPU.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest

pytestmark = pytest.mark.extra("train", "sentence_transformers")

TOPICS = [
    "apple",
    "bread",
    "cloud",
    "dance",
    "eagle",
    "flute",
    "grape",
    "honey",
    "igloo",
    "jelly",
    "koala",
    "lemon",
    "mango",
    "nurse",
    "ocean",
    "piano",
]
FILLER = "the a of and notes about with for in on this that some more is".split()


def write_suite(root: Path, *, qrels: bool = True, positives: bool = True) -> Path:
    """16 topics, 3 documents each (one about the topic, two distractors sharing one query word),
    one query per topic whose text is unique (so a leaked query is detectable by text)."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    docs, queries = [], []
    for i, t in enumerate(TOPICS):
        other = TOPICS[(i + 1) % len(TOPICS)]
        body = " ".join([t] * 3 + list(rng.choice(FILLER, 25)))
        docs.append({"id": f"{t}-main", "title": f"{t} guide", "text": f"{t} guide\n\n{body} {t} care and use."})
        for k in range(2):
            filler = " ".join(rng.choice(FILLER, 25))
            docs.append(
                {
                    "id": f"{t}-x{k}",
                    "title": f"{other} memo {k}",
                    "text": f"{other} memo {k}\n\n{other} {filler} {t} mention {k}.",
                }
            )
        q = {"qid": f"q{i:02d}", "query": f"how to care for {t} number {i}"}
        if qrels:
            q["qrels"] = {f"{t}-main": 2 if positives else 0, f"{t}-x0": 0}
        queries.append(q)
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    return root


def build_tiny_bert(out: Path) -> Path:
    """A random BertForSequenceClassification-ready encoder (hidden 32) + a WordPiece vocab."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    words = sorted(
        set(TOPICS + FILLER + "how to care for number guide memo mention use x0 x1 0 1 2 3 4 5 6 7 8 9 .".split())
    )
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    (out / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tok = BertTokenizerFast(vocab_file=str(out / "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(str(out))
    import torch

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(cfg).save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    os.environ["HF_HUB_OFFLINE"] = "1"
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


def small_cfg(suite: Path, out: Path, base: Path, **kw):
    from qmdlab.training.reranker import RerankerRunConfig

    opts = dict(
        suite=str(suite),
        format="jsonl",
        out=str(out),
        base=str(base),
        preset="fake",
        folds=2,
        seed=3,
        max_length=48,
        weak_max_pairs=24,
        weak_batch_size=8,
        weak_in_batch_negatives=1,
        epochs=1.0,
        list_size=4,
        max_positives=1,
        lists_per_query=1,
        batch_size=4,
        tune_fraction=0.25,
        progress=False,
        logging_steps=1,
        save_steps=1000,
        n_threads=1,
        head_learning_rate=1e-2,
        weak_head_learning_rate=1e-2,
    )
    opts.update(kw)
    return RerankerRunConfig(**opts)


@pytest.mark.slow
def test_end_to_end_tiny_model(tmp_path, qmdlab_home, tiny_bert):
    from qmdlab.models.registry import build_model, load_models
    from qmdlab.training.reranker import run_reranker

    suite = write_suite(tmp_path / "suite")
    res = run_reranker(small_cfg(suite, tmp_path / "run", tiny_bert), log=lambda m: None)
    out = tmp_path / "run"
    # held-out files: fused + one per blend, collection ids, every judged query once
    for name in (
        "fused-heldout.trec",
        "rerank-position-heldout.trec",
        "rerank-rerank_only-heldout.trec",
        "rerank-tuned-heldout.trec",
        "qrels.txt",
        "heldout.csv",
        "README.md",
        "blend.yaml",
    ):
        assert (out / name).is_file(), name
    lines = (out / "fused-heldout.trec").read_text().splitlines()
    assert {ln.split()[0] for ln in lines} == {f"q{i:02d}" for i in range(len(TOPICS))}
    assert all(not ln.split()[2].startswith("suite/") and not ln.split()[2].endswith(".md") for ln in lines)
    table = pl.read_csv(out / "heldout.csv")
    assert table["run"].to_list()[0] == "fused" and table["p_ttest"][0] == 1.0
    assert {"rerank-position", "rerank-rerank_only", "rerank-tuned", "weak-position"} <= set(table["run"])
    assert res["auc"]["rerank_pooled"] is not None and 0.0 <= res["auc"]["rerank_pooled"] <= 1.0
    # the trainer's curve is in metrics.jsonl (one stage per fold)
    stages = {json.loads(ln)["stage"] for ln in (out / "metrics.jsonl").read_text().splitlines()}
    assert {"weak", "fold-0", "fold-1", "final"} <= stages
    # the served model: a rerank role through the registry, scores in [0, 1]
    rr = build_model("rerank", res["model"], n_threads=1)
    s = rr.score("how to care for apple", ["apple guide apple apple", "dance memo"])
    assert len(s) == 2 and all(0.0 <= x <= 1.0 for x in s)
    assert load_models("fake", rerank=res["model"]).reranker.fingerprint == rr.fingerprint
    # resumable: a finished run returns its stored result without training again
    assert run_reranker(small_cfg(suite, out, tiny_bert), log=lambda m: None)["seconds"] == res["seconds"]


@pytest.mark.slow
def test_same_seed_same_scores(tmp_path, qmdlab_home, tiny_bert):
    from qmdlab.training.reranker import run_reranker

    suite = write_suite(tmp_path / "suite")
    a = run_reranker(small_cfg(suite, tmp_path / "a", tiny_bert, weak=False, final=False), log=lambda m: None)
    b = run_reranker(small_cfg(suite, tmp_path / "b", tiny_bert, weak=False, final=False), log=lambda m: None)
    sa = pl.read_parquet(tmp_path / "a" / "heldout_scores.parquet").sort(["qid", "docno"])
    sb = pl.read_parquet(tmp_path / "b" / "heldout_scores.parquet").sort(["qid", "docno"])
    assert sa.height > 0
    np.testing.assert_allclose(sa["logit"].to_numpy(), sb["logit"].to_numpy(), rtol=0, atol=1e-6)
    assert a["heldout"] == b["heldout"]


@pytest.mark.slow
def test_no_heldout_query_reaches_training(tmp_path, qmdlab_home, tiny_bert, monkeypatch):
    """Capture every dataset the trainer is given; no held-out query (by text) may be in it.

    The suite's query texts are unique per query, so a leak would be visible; the same check is
    run against a deliberately leaking split, which must be caught."""
    import qmdlab.training.reranker as tr
    from qmdlab.training import reranker_fit

    seen: list[tuple[str, set[str]]] = []
    real_fit = tr.fit

    def spy(model, rows, loss, run_dir, **kw):
        texts = {r.get("query") or r.get("anchor") for r in rows}
        seen.append((Path(run_dir).name, texts))
        return real_fit(model, rows, loss, run_dir, **kw)

    monkeypatch.setattr(tr, "fit", spy)
    monkeypatch.setattr(reranker_fit, "fit", spy)  # the in-collection pretraining fits there
    suite = write_suite(tmp_path / "suite")
    cfg = small_cfg(suite, tmp_path / "run", tiny_bert, final=False, folds=3)
    tr.run_reranker(cfg, log=lambda m: None)
    queries = {
        json.loads(ln)["qid"]: json.loads(ln)["query"] for ln in (suite / "queries.jsonl").read_text().splitlines()
    }
    folds = tr.splits(sorted(queries), 3, cfg.tune_fraction, cfg.seed)
    by_run = dict(seen)
    assert "weak" in by_run and not (by_run["weak"] & set(queries.values()))  # label-free: no query at all
    for sp in folds:
        trained = by_run[f"fold-{sp.fold}"]
        assert trained, "the fold trained on nothing"
        assert not trained & {queries[q] for q in sp.test}, f"fold {sp.fold}: held-out query in training"
        assert not trained & {queries[q] for q in sp.tune}, f"fold {sp.fold}: tuning query in training"
        assert json.loads((tmp_path / "run" / f"fold-{sp.fold}" / "train_qids.json").read_text()) == sorted(set(sp.fit))

    # a split that leaks (a held-out query also in fit) is refused before any training
    def leaky(qids, folds, tune_fraction, seed, official=None, texts=None):
        out = []
        for sp in real_splits(qids, folds, tune_fraction, seed, official, texts):
            out.append(sp._replace(fit=sp.fit + sp.test[:1]))
        return out

    real_splits = tr.splits
    monkeypatch.setattr(tr, "splits", leaky)
    from qmdlab.training.leakage import LeakError

    with pytest.raises(LeakError, match="is the held-out query"):
        tr.run_reranker(
            small_cfg(suite, tmp_path / "leak", tiny_bert, final=False, folds=4, weak=False), log=lambda m: None
        )


def beir_suite(root: Path, test_topics: int = 4) -> Path:
    """:func:`write_suite`'s topics as a BEIR folder with an official split: the last ``test_topics``
    queries are the test side."""
    jsonl = write_suite(root / "jsonl")
    docs = [json.loads(ln) for ln in (jsonl / "docs.jsonl").read_text().splitlines()]
    queries = [json.loads(ln) for ln in (jsonl / "queries.jsonl").read_text().splitlines()]
    d = root / "beir"
    (d / "qrels").mkdir(parents=True)
    (d / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": x["id"], "title": x["title"], "text": x["text"]}) + "\n" for x in docs)
    )
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": q["qid"], "text": q["query"]}) + "\n" for q in queries))
    head = "query-id\tcorpus-id\tscore\n"
    rows = [(q["qid"], "".join(f"{q['qid']}\t{doc}\t{g}\n" for doc, g in q["qrels"].items())) for q in queries]
    (d / "qrels" / "train.tsv").write_text(head + "".join(r for _, r in rows[:-test_topics]))
    (d / "qrels" / "test.tsv").write_text(head + "".join(r for _, r in rows[-test_topics:]))
    return d


@pytest.mark.slow
def test_official_split_trains_on_train_and_scores_test_only(tmp_path, qmdlab_home, tiny_bert, monkeypatch):
    """A suite with an official split is one fold: every dataset the trainer fits holds training
    queries only, the held-out runs hold exactly the test queries, and the served model is that fold's."""
    import qmdlab.training.reranker as tr
    from qmdlab.training import reranker_fit

    seen: list[tuple[str, set[str]]] = []
    real_fit = tr.fit

    def spy(model, rows, loss, run_dir, **kw):
        seen.append((Path(run_dir).name, {r.get("query") or r.get("anchor") for r in rows}))
        return real_fit(model, rows, loss, run_dir, **kw)

    monkeypatch.setattr(tr, "fit", spy)
    monkeypatch.setattr(reranker_fit, "fit", spy)  # the in-collection pretraining fits there
    suite = beir_suite(tmp_path / "suite")
    res = tr.run_reranker(small_cfg(suite, tmp_path / "run", tiny_bert, format="beir", weak=False), log=lambda m: None)
    test_texts = {f"how to care for {t} number {i}" for i, t in enumerate(TOPICS) if i >= len(TOPICS) - 4}
    assert [name for name, _ in seen] == ["fold-0"]  # one fold, and no retraining for the served model
    assert seen[0][1] and not seen[0][1] & test_texts
    lines = (tmp_path / "run" / "rerank-tuned-heldout.trec").read_text().splitlines()
    assert {ln.split()[0] for ln in lines} == {f"q{i:02d}" for i in range(len(TOPICS) - 4, len(TOPICS))}
    assert res["official_split"] == {"train": 12, "test": 4} and res["final"]["model_dir"].endswith("fold-0/model")
    assert (tmp_path / "run" / "model").is_dir() and res["model"].startswith("cross-encoder:")


def test_empty_suite_is_one_clear_error(tmp_path, qmdlab_home, tiny_bert):
    from qmdlab.errors import QmdlabError
    from qmdlab.training.reranker import run_reranker

    suite = write_suite(tmp_path / "suite", qrels=False)
    with pytest.raises(QmdlabError, match=r"no (judged queries|judgments).*qrels"):
        run_reranker(small_cfg(suite, tmp_path / "run", tiny_bert), log=lambda m: None)


def test_no_positives_is_one_clear_error(tmp_path, qmdlab_home, tiny_bert):
    from qmdlab.errors import QmdlabError
    from qmdlab.training.reranker import run_reranker

    suite = write_suite(tmp_path / "suite", positives=False)
    with pytest.raises(QmdlabError, match="no positive judgments.*grade ≥ 1"):
        run_reranker(small_cfg(suite, tmp_path / "run", tiny_bert), log=lambda m: None)


def test_missing_base_model_names_the_fix(tmp_path, qmdlab_home):
    from qmdlab.errors import ModelError
    from qmdlab.training.base_models import resolve_encoder_base
    from qmdlab.training.reranker import run_reranker

    suite = write_suite(tmp_path / "suite")
    with pytest.raises(ModelError, match="--base DIR"):
        run_reranker(small_cfg(suite, tmp_path / "run", tmp_path / "nowhere"), log=lambda m: None)
    with pytest.raises(ModelError, match="huggingface-cli download"):
        resolve_encoder_base("hf:nobody/no-such-model-here")


@pytest.mark.extra("offline-models")  # the base model is found before the suite is read
def test_cli_reports_bad_suite(tmp_path, qmdlab_home):
    from click.testing import CliRunner

    from qmdlab.cli import cli

    res = CliRunner().invoke(
        cli, ["train", "reranker", "--suite", str(tmp_path / "missing"), "--out", str(tmp_path / "o")]
    )
    assert res.exit_code != 0
    assert "unknown suite" in res.output


def test_platt_and_auc_closed_form():
    from qmdlab.training.reranker_eval import auc, platt

    assert auc(np.array([3.0, 2.0, 1.0]), np.array([True, False, False])) == 1.0
    assert auc(np.array([1.0, 1.0]), np.array([True, False])) == 0.5
    a, b = platt(np.array([-1.0, 1.0] * 50), np.array([0, 1] * 50))
    assert a > 5 and abs(b) < 1e-6  # separable: a large slope, no offset (ridge keeps it finite)


def test_query_lists_shape_and_no_empty_lists():
    from qmdlab.training.reranker_data import CANDIDATE_SCHEMA, query_lists

    t = pl.DataFrame(
        {
            "qid": ["1"] * 4 + ["2"] * 2,
            "query": ["q1"] * 4 + ["q2"] * 2,
            "docno": ["a", "b", "c", "d", "a", "b"],
            "fused_rank": [1, 2, 3, None, 1, 2],
            "fused_score": [0.4, 0.3, 0.2, None, 0.4, 0.3],
            "candidate": [True] * 3 + [False] + [True] * 2,
            "chunk_id": [1, 2, 3, 4, 1, 2],
            "text": ["A", "B", "C", "D", "A", "B"],
            "grade": [0, 1, 0, 2, 0, 0],
        },
        schema=CANDIDATE_SCHEMA,
    )
    rows = query_lists(t, ["1", "2"], list_size=3, max_positives=2, seed=0)
    assert [r["qid"] for r in rows] == ["1"]  # query 2 has no positive
    assert sorted(zip(rows[0]["docs"], rows[0]["labels"])) == [("A", 0.0), ("B", 1.0), ("D", 2.0)]


def test_query_lists_distillation_labels_unjudged_candidates():
    """With a teacher (cached LLM rerank scores), unjudged candidates get the teacher's score as
    label instead of 0; judged documents keep their grade."""
    from qmdlab.training.reranker_data import CANDIDATE_SCHEMA, query_lists

    t = pl.DataFrame(
        {
            "qid": ["1"] * 3,
            "query": ["q"] * 3,
            "docno": ["a", "b", "c"],
            "fused_rank": [1, 2, 3],
            "fused_score": [0.5, 0.4, 0.3],
            "candidate": [True] * 3,
            "chunk_id": [1, 2, 3],
            "text": ["A", "B", "C"],
            "grade": [1, 0, 0],
        },
        schema=CANDIDATE_SCHEMA,
    )
    rows = query_lists(t, ["1"], list_size=3, teacher={("1", "b"): 0.7, ("1", "a"): 0.1})
    assert sorted(zip(rows[0]["docs"], rows[0]["labels"])) == [("A", 1.0), ("B", 0.7), ("C", 0.0)]


def test_teacher_without_rerank_scores_is_refused(tmp_path):
    from qmdlab.errors import QmdlabError
    from qmdlab.training.reranker import teacher_scores

    assert teacher_scores(None) is None
    with pytest.raises(QmdlabError, match="not a qmdlab eval results directory"):
        teacher_scores(tmp_path)
