"""The query-adapter trainer: closed-form problems (a rotation of the document vectors is learnt back,
full and low-rank; nothing to learn keeps the identity), the held-out leak check inside fitting, and
runs end to end on the fake preset — labelled (folds over a suite), synthetic (generated queries),
and through the CLI, after which ``qmdlab query --embed-model …+adapter:…`` notes the adapter."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qmdlab.training.adapter import (
    AdapterRunConfig,
    Corpus,
    HeldOut,
    Query,
    build_pairs,
    fit_pairs,
    fit_with_heldback,
    run_adapter,
)
from qmdlab.training.leakage import LeakError

# fitting runs on torch; the held-out figures' p-values come from the evaluation's significance tests
pytestmark = pytest.mark.extra("train", "torch", "scipy")

FAST = {"n_threads": 1, "progress": False, "temperature": 0.05, "batch_size": 32}


def _problem(n: int, rotation: np.ndarray, seed: int = 0):
    """``n`` one-chunk documents of random unit vectors; query ``i`` is ``rotation @ doc_i``, relevant: doc ``i``."""
    rng = np.random.default_rng(seed)
    d = rotation.shape[0]
    docs = rng.normal(size=(n, d)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    names = [f"n/d{i:03d}.md" for i in range(n)]
    corpus = Corpus.from_rows(names, list(range(n)), docs)
    queries = [Query(str(i), f"query {i}", {names[i]: 1.0}) for i in range(n)]
    return corpus, queries, (docs @ rotation.T).astype(np.float32)


def _rotation(d: int, seed: int = 1) -> np.ndarray:
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(d, d)))
    return q


def test_a_rotation_of_the_document_vectors_is_learnt_back():
    r = _rotation(16)
    corpus, queries, vectors = _problem(200, r)
    pairs = build_pairs(corpus, queries, vectors, hard_negatives=7, depth=30)
    cfg = AdapterRunConfig(**FAST, learning_rate=0.02, epochs=120, weight_decay=0.0, patience=8, heldback=0.2)
    res = fit_with_heldback(pairs, corpus, HeldOut(), cfg, print)
    back = res["heldback"]
    assert back["queries"] == 40
    assert back["before"]["mrr@10"] < 0.3  # the base vectors point elsewhere
    assert back["after"]["mrr@10"] >= 0.97 and back["after"]["ndcg@10"] >= 0.97  # recall goes to ~1
    w = res["fit"].arrays["W"]
    mapped = vectors @ w.T  # every query, fitted or held back, is sent to its own document
    assert np.mean(np.argmax(mapped @ corpus.matrix.T, axis=1) == np.arange(200)) >= 0.97


def test_a_low_rank_map_learns_a_rotation_of_a_subspace():
    d, k = 16, 6
    r = np.eye(d)
    r[:k, :k] = _rotation(k, seed=3)
    corpus, queries, vectors = _problem(200, r, seed=2)
    pairs = build_pairs(corpus, queries, vectors, hard_negatives=7, depth=30)
    cfg = AdapterRunConfig(**FAST, rank=k, learning_rate=0.03, epochs=150, weight_decay=0.0, patience=10, heldback=0.2)
    res = fit_with_heldback(pairs, corpus, HeldOut(), cfg, print)
    back = res["heldback"]
    assert back["after"]["mrr@10"] >= 0.95 > back["before"]["mrr@10"]
    assert set(res["fit"].arrays) == {"U", "V"} and res["fit"].arrays["U"].shape == (d, k)


def test_nothing_to_learn_keeps_the_identity():
    corpus, queries, _ = _problem(60, np.eye(8))
    pairs = build_pairs(corpus, queries, corpus.matrix.copy(), hard_negatives=3, depth=10)
    res = fit_with_heldback(pairs, corpus, HeldOut(), AdapterRunConfig(**FAST, epochs=4, patience=2), print)
    assert res["fit"].best_epoch == 0
    assert res["fit"].arrays["W"].tobytes() == np.eye(8, dtype=np.float32).tobytes()
    assert res["heldback"]["before"] == res["heldback"]["after"] == {"ndcg@10": 1.0, "mrr@10": 1.0}


def test_hard_negatives_are_chunks_of_documents_not_relevant():
    names = ["a", "a", "b", "c", "d"]
    m = np.eye(5, dtype=np.float32)
    corpus = Corpus.from_rows(names, [1, 2, 3, 4, 5], m)
    q = Query("1", "q", {"a": 1.0, "c": 1.0})
    pairs = build_pairs(corpus, [q], np.array([[0.1, 0.9, 0.5, 0.2, 0.3]], np.float32), hard_negatives=3, depth=5)
    assert pairs.positive.tolist() == [1, 3]  # a's nearest chunk, c's only chunk
    assert sorted(pairs.negatives[0].tolist()) == [-1, 2, 4]  # b and d; only two exist
    assert [r["qid"] for r in pairs.rows] == ["1", "1"]


# -- the leak check ---------------------------------------------------------------------------------
def _tiny_pairs(synthetic: bool = False):
    corpus, queries, vectors = _problem(6, np.eye(4))
    return corpus, build_pairs(corpus, queries, vectors, hard_negatives=2, depth=4, synthetic=synthetic)


def test_fitting_refuses_a_held_out_query_by_id():
    corpus, pairs = _tiny_pairs()
    with pytest.raises(LeakError, match=r"held-out queries reached query-adapter training pairs: \['toy:3'\]"):
        fit_pairs(pairs, corpus, HeldOut(("3", "9"), {}, "toy"), epochs=1)
    fit_pairs(pairs, corpus, HeldOut(("9",), {}, "toy"), epochs=1)  # none of them: fitted


def test_the_held_back_slice_is_checked_too():
    """The slice that picks the epoch is tuning data: a held-out query may not be held back either."""
    corpus, pairs = _tiny_pairs()
    cfg = AdapterRunConfig(**FAST, epochs=1, heldback=0.5)
    for qid in "012345":  # wherever the query falls, fitted or held back
        with pytest.raises(LeakError, match=f"'toy:{qid}'"):
            fit_with_heldback(pairs, corpus, HeldOut((qid,), {}, "toy"), cfg, print)


def test_fitting_refuses_a_generated_query_that_is_a_held_out_querys_text():
    corpus, pairs = _tiny_pairs(synthetic=True)
    assert all(r["qid"] is None for r in pairs.rows)
    with pytest.raises(LeakError, match=r"is the held-out query 'toy:h1'"):
        fit_pairs(pairs, corpus, HeldOut(("h1",), {"h1": "  QUERY 2 "}, "toy"), epochs=1)


# -- runs on the fake preset ---------------------------------------------------------------------
# every text is made of the fake embedder's vocabulary (qmdlab.models.fakes.FAKE_VOCABULARY)
DOCS = {
    "1": "git commit branch merge",
    "2": "docker network server install",
    "3": "python test file error",
    "4": "sqlite database index query",
    "5": "cache memory performance time",
    "6": "http api json server",
    "7": "shell linux user password",
    "8": "security key password data",
}
QUERIES = {
    "1": "git branch",
    "2": "docker server",
    "3": "python error",
    "4": "sqlite index",
    "5": "memory cache",
    "6": "json api",
    "7": "linux shell",
    "8": "security key",
}


@pytest.fixture
def vocab_suite(tmp_path, qmdlab_home):
    d = tmp_path / "toy"
    d.mkdir()
    (d / "T.ALL").write_text("".join(f".I {i}\n.T\nNote {i}\n.W\n{w}\n" for i, w in DOCS.items()))
    (d / "T.QRY").write_text("".join(f".I {i}\n.W\n{q}\n" for i, q in QUERIES.items()))
    (d / "T.REL").write_text("".join(f"{i} {i} 0 0.0\n" for i in QUERIES))
    return d


def _cfg(tmp_path, suite, **kw) -> AdapterRunConfig:
    return AdapterRunConfig(
        **FAST, out=str(tmp_path / "run"), suite=str(suite), format="smart", preset="fake", epochs=3, **kw
    )


def test_labelled_run_on_folds_writes_an_adapter_the_registry_loads(tmp_path, vocab_suite):
    from qmdlab.models import load_models
    from qmdlab.models.adapter import AdaptedEmbedder

    res = run_adapter(_cfg(tmp_path, vocab_suite, folds=2), log=lambda m: None)
    assert res["mode"] == "labelled" and res["split"] == "2 folds"
    assert res["heldout"]["queries"] == 8  # every judged query, each scored by the fold that did not fit on it
    assert set(res["heldout"]["before"]) == {"ndcg@10", "mrr@10"}
    run = tmp_path / "run"
    for name in ("adapter.npz", "adapter.json", "report.json", "README.md", "metrics.jsonl", "DONE"):
        assert (run / name).is_file(), name
    meta = json.loads((run / "adapter.json").read_text())
    assert meta["base_ref"] == "fake:keyword" and meta["dim"] == 40 and meta["rank"] == 0
    emb = load_models("fake", embed=f"fake:keyword+adapter:{run}").embedder
    assert isinstance(emb, AdaptedEmbedder) and emb.adapter.digest == res["digest"]
    assert run_adapter(_cfg(tmp_path, vocab_suite, folds=2), log=lambda m: None) == json.loads(
        (run / "DONE").read_text()
    )  # a finished run returns its result


def test_a_fold_that_would_fit_on_its_test_queries_is_refused(tmp_path, vocab_suite, monkeypatch):
    from qmdlab.eval import folds

    leaky = [folds.Fold(("1", "2", "3", "4", "5"), ("5", "6", "7", "8"))]
    monkeypatch.setattr(folds, "kfold", lambda qids, k, seed: leaky)
    with pytest.raises(LeakError, match=r"held-out query 'toy:5'"):
        run_adapter(_cfg(tmp_path, vocab_suite), log=lambda m: None)
    assert not (tmp_path / "run" / "adapter.npz").exists()


def _expand(idx, fn):
    from qmdlab.models.doc_query_gen import TableDocQueryGenerator
    from qmdlab.pipeline.doc_expand import expand_documents

    return expand_documents(idx, TableDocQueryGenerator(fn), per_chunk=2, top_k=20)


def _generated(passage: str, i: int) -> str:
    """Two generated queries per note: its first two words, then its last two."""
    words = passage.split("\n")[-1].split() if "\n" in passage else passage.split()
    return f" {' '.join(words[:2] if i == 0 else words[-2:])}\n"


def test_synthetic_run_in_a_suite_refuses_a_generated_copy_of_a_judged_query(tmp_path, vocab_suite):
    from qmdlab.eval.record import prepare_index
    from qmdlab.eval.suites import get_suite
    from qmdlab.models import load_models

    suite = get_suite(str(vocab_suite), "smart")
    idx = prepare_index(suite, load_models("fake").embedder, progress=False, log=lambda m: None)
    # note 1's second sample is query 1's text, word for word
    rep = _expand(idx, lambda p, i: " git branch\n" if "git commit" in p and i == 1 else _generated(p, i))
    assert rep.kept >= 8
    idx.close()
    with pytest.raises(LeakError, match=r"is the held-out query 'toy:1'"):
        run_adapter(_cfg(tmp_path, vocab_suite, synthetic=True), log=lambda m: None)


def test_synthetic_run_in_a_suite_reports_on_its_judged_queries(tmp_path, vocab_suite):
    from qmdlab.eval.record import prepare_index
    from qmdlab.eval.suites import get_suite
    from qmdlab.models import load_models

    suite = get_suite(str(vocab_suite), "smart")
    idx = prepare_index(suite, load_models("fake").embedder, progress=False, log=lambda m: None)
    _expand(idx, lambda p, i: " ".join(["", *_generated(p, i).split()[::-1], "\n"]))  # reversed: no judged text
    idx.close()
    res = run_adapter(_cfg(tmp_path, vocab_suite, synthetic=True), log=lambda m: None)
    assert res["mode"] == "synthetic" and res["generated"]["queries"] >= 8
    assert res["heldout"]["queries"] == 8  # no judged query was read for fitting: all are held out


NOTES = {
    "git.md": "# Git\n\nCommit to a branch, then merge or rebase it.\n",
    "docker.md": "# Docker\n\nInstall the server and its network.\n",
    "python.md": "# Python\n\nA test file that shows the error.\n",
    "sqlite.md": "# SQLite\n\nThe database index answers the query.\n",
    "cache.md": "# Cache\n\nMemory for performance over time.\n",
    "shell.md": "# Shell\n\nThe linux user and the password.\n",
}


def test_cli_trains_on_generated_queries_then_query_uses_the_adapter(tmp_path, cli_run, qmdlab_home):
    from qmdlab.models.batching import embed_missing
    from qmdlab.models.fakes import FAKE_VOCABULARY, KeywordEmbedder
    from qmdlab.store import Index

    root = tmp_path / "notes"
    root.mkdir()
    for name, body in NOTES.items():
        (root / name).write_text(body, encoding="utf-8")
    with Index.open(cli_run.index_dir) as idx:
        idx.add_collection("n", root)
        idx.update()
        embed_missing(idx, KeywordEmbedder(FAKE_VOCABULARY))
        vocab = set(FAKE_VOCABULARY)
        rep = _expand(
            idx,
            lambda p, i: " " + " ".join([w for w in p.lower().replace(".", " ").split() if w in vocab][i::2]) + "\n",
        )
        assert rep.kept >= 6
    out = tmp_path / "adapter-run"
    res = cli_run(
        "train",
        "adapter",
        "--synthetic",
        "--preset",
        "fake",
        "--output-dir",
        str(out),
        "--epochs",
        "3",
        "--set",
        "n_threads=1",
        "--set",
        "progress=false",
    )
    summary = json.loads(res.stdout)
    assert summary["mode"] == "synthetic" and summary["adapter"] == str(out / "adapter.npz")
    assert summary["use"] == f"--embed-model fake:keyword+adapter:{out}"
    assert "held-back slice" in res.stderr
    q = cli_run(
        "query",
        "git branch",
        "--preset",
        "fake",
        "--no-expand",
        "--no-rerank",
        "--embed-model",
        f"fake:keyword+adapter:{out}",
        "--trace-json",
    )
    trace = json.loads(q.stdout)
    notes = [n["message"] for n in trace["notes"] if n["stage"] == "retrieve"]
    assert any("query adapter" in m and summary["digest"] in m for m in notes), trace["notes"]
    assert trace["results"] and trace["results"][0]["file"].endswith("git.md")
    plain = json.loads(
        cli_run("query", "git branch", "--preset", "fake", "--no-expand", "--no-rerank", "--trace-json").stdout
    )
    assert not any("query adapter" in n["message"] for n in plain["notes"])
