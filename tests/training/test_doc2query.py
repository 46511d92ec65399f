"""The doc2query trainer: its pairs, its held-out guard, and one real (tiny) training step."""

from __future__ import annotations

import json

from qmdlab.models import doc2query as fmt
from qmdlab.training.doc2query import (
    Doc2QueryRunConfig,
    best_chunk,
    build_data,
    heading_pairs,
    label_pairs,
    run_doc2query,
)
from qmdlab.training.splits import load_splits


def test_best_chunk_counts_distinct_shared_terms():
    chunks = ["cats cats cats purr", "dogs bark at the mail carrier", "cats and dogs sleep"]
    # "cats dogs": chunk 2 shares both terms, chunk 0 one term (repeated), chunk 1 one term.
    assert best_chunk("cats dogs", chunks) == 2
    assert best_chunk("mail carrier", chunks) == 1


def test_label_pairs_cover_train_queries_only_and_use_the_shared_format():
    chunks = {"a.md": ["Intro.", "Restore the database from last night's backup."], "b.md": ["Cats purr."]}
    queries = {"1": "restore database backup", "2": "why do cats purr", "3": "held out query"}
    relevant = {"1": ["a.md", "missing.md"], "2": ["b.md"], "3": ["a.md"]}
    rows = label_pairs(chunks, queries, relevant, ["1", "2"], max_pairs=10)
    assert [(r["qid"], r["docno"]) for r in rows] == [("1", "a.md"), ("2", "b.md")]
    assert rows[0]["prompt"] == fmt.prompt("Restore the database from last night's backup.")
    assert rows[0]["completion"] == " restore database backup\n"
    assert len(label_pairs(chunks, queries, relevant, ["1", "2"], max_pairs=1)) == 1


def test_build_data_on_the_bundled_suite_never_reads_a_heldout_query(qmdlab_home, tmp_path):
    out = tmp_path / "run"
    counts = build_data(Doc2QueryRunConfig(suite="default", out=str(out)), log=lambda m: None)
    split = load_splits(out / "splits.json")["default"]
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
    assert counts["pairs"] == len(rows) and counts["label_pairs"] > 0 and counts["heading_pairs"] > 0
    assert counts["heldout_queries"] == len(split.heldout) > 0
    labelled = [r for r in rows if r["source"] == "label"]
    assert {r["qid"] for r in labelled} <= set(split.train)
    assert not {r["qid"] for r in labelled} & set(split.heldout)
    from qmdlab.eval.suites import get_suite

    texts = dict(get_suite("default").data().judged_queries().select("qid", "query").iter_rows())
    held_texts = {" ".join(texts[q].lower().split()) for q in split.heldout}
    assert not {" ".join(r["completion"].lower().split()) for r in rows} & held_texts
    for r in rows:  # every record is in the format the generator is prompted with
        assert r["prompt"].startswith(fmt.PASSAGE_PREFIX) and r["prompt"].endswith(fmt.QUERY_CUE)
        assert fmt.parse_query(r["completion"]) is not None


def test_heading_pairs_cut_the_heading_from_the_passage(qmdlab_home, tmp_path):
    from qmdlab.store import Index

    corpus = tmp_path / "notes"
    corpus.mkdir()
    body = "Stop the service, run pg_restore with last night's dump, then start the service again. " * 2
    (corpus / "restore.md").write_text(f"# Restoring the database\n\n{body}\n")
    (corpus / "short.md").write_text("# Tiny\n\nToo short.\n")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", corpus)
    idx.update()
    rows = heading_pairs(idx, max_pairs=10)
    assert [r["completion"] for r in rows] == [" Restoring the database\n"]
    assert "Restoring the database" not in rows[0]["prompt"] and "pg_restore" in rows[0]["prompt"]


def test_one_real_training_step_writes_a_merged_model(qmdlab_home, tmp_path, tiny_qwen3):
    out = tmp_path / "d2q"
    cfg = Doc2QueryRunConfig(
        suite="default",
        out=str(out),
        base=str(tiny_qwen3),
        max_steps=1,
        per_device_train_batch_size=2,
        max_label_pairs=4,
        max_heading_pairs=2,
        max_length=128,
        gguf=False,
        n_threads=1,
    )
    res = run_doc2query(cfg, log=lambda m: None)
    assert res["steps"] == 1 and res["pairs"] == 6
    assert (out / "merged" / "config.json").exists() and (out / "DONE").exists()
    # a finished run is not trained again
    assert run_doc2query(cfg, log=lambda m: None) == res


def test_fit_length_shortens_the_passage_never_the_query(tiny_qwen3):
    from qmdlab.training import hardware
    from qmdlab.training.doc2query import fit_length

    tok = hardware.load_tokenizer(str(tiny_qwen3))
    record = {"prompt": fmt.prompt("word " * 400, max_chars=5000), "completion": fmt.completion("restore the database")}
    fitted = fit_length(record, tok, 64)
    assert fitted["completion"] == record["completion"]
    n = len(tok(fitted["prompt"])["input_ids"]) + len(tok(fitted["completion"], add_special_tokens=False)["input_ids"])
    assert n <= 64 and fitted["prompt"].startswith(fmt.PASSAGE_PREFIX) and fitted["prompt"].endswith(fmt.QUERY_CUE)
    short = {"prompt": fmt.prompt("Backups run nightly."), "completion": " when\n"}
    assert fit_length(short, tok, 64) == short
