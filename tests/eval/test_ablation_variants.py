"""RecordingInfo-variant ablation rows (``qmdlab eval --ablate --variants``): each feature that changes what is
retrieved is the same queries recorded again with its config overrides (fake models, a ten-document suite)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
import yaml
from click.testing import CliRunner

from qmdlab.errors import ConfigError
from qmdlab.eval.ablation import RECORDED_VARIANTS, check_variant, strong_signal_qids, variant_evaluations
from qmdlab.eval.record import cache_key, cache_root, record
from qmdlab.eval.runner import run_suite
from qmdlab.eval.study import Study
from qmdlab.eval.suites import get_suite
from qmdlab.models import load_models
from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander
from qmdlab.pipeline.config import PipelineConfig

DOCS = {
    "1": ("Zebra stripes", "zebra stripes are black and white stripes"),
    "2": ("Penguin", "penguins swim in icy water and cannot fly"),
    "3": ("Dog", "the quick brown fox jumps over the lazy dog"),
    "4": ("Fox", "a brown fox is quick on its feet"),
    "5": ("Whale", "whales swim in the deep ocean water"),
    "6": ("Eagle", "eagles fly high over the mountains"),
    "7": ("Tokyo", "東京の天気予報は晴れです"),
    "8": ("Salmon", "salmon swim upstream to spawn"),
    "9": ("Owl", "owls hunt at night"),
    "10": ("Camel", "camels cross the desert"),
    "11": ("Weather", "天気予報 for the coast"),
}
QUERIES = {"1": "zebra stripes", "2": "animals that swim in water", "3": "quick brown fox", "4": "東京の天気予報"}
QRELS = [("1", "1"), ("2", "2"), ("2", "5"), ("2", "8"), ("3", "3"), ("4", "7")]  # "3": the verbatim one
# the strong-signal query "zebra stripes" expands towards penguins (a line must share a query term to be kept)
RULES = {"zebra stripes": [("lex", "zebra penguins icy water"), ("hyde", "zebra penguins cannot fly")]}


def _suite(tmp_path: Path):
    d = tmp_path / "zoo"
    d.mkdir()
    (d / "Z.ALL").write_text("".join(f".I {i}\n.T\n{t}\n.W\n{w}\n" for i, (t, w) in DOCS.items()))
    (d / "Z.QRY").write_text("".join(f".I {q}\n.W\n{text}\n" for q, text in QUERIES.items()))
    (d / "Z.REL").write_text("".join(f"{q} {doc} 0 0.0\n" for q, doc in QRELS))
    return get_suite(d, "smart")


def _models():
    fake = load_models("fake")
    return ModelSet(fake.embedder, RuleExpander(RULES, default=[("lex", "swim water")]), fake.reranker)


def _expand_suite_index(suite, models) -> None:
    """Write generated queries into the suite index's expansions column (a fake generator: the
    penguin note gets "penguin animals", a word no document has, which query 2 asks for)."""
    from qmdlab.eval.record import prepare_index
    from qmdlab.models.doc_query_gen import TableDocQueryGenerator
    from qmdlab.pipeline.doc_expand import expand_documents

    def fn(passage: str, i: int) -> str:
        return " penguin animals" if "penguin" in passage.lower() else " " + " ".join(passage.split()[1:3])

    idx = prepare_index(suite, models.embedder, progress=False, log=lambda m: None)
    try:
        rep = expand_documents(idx, TableDocQueryGenerator(fn), per_chunk=1)
        assert rep.kept >= 1
    finally:
        idx.close()


def _keys(suite) -> set[str]:
    return {p.name for p in cache_root(suite).iterdir() if p.is_dir()}


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_variant_rows_are_own_recordings_with_paired_stats(tmp_path, qmdlab_home):
    suite, models, cfg = _suite(tmp_path), _models(), PipelineConfig()
    _expand_suite_index(suite, models)  # so the expansions variant has a column to weigh
    res = run_suite(
        suite,
        models,
        cfg,
        out=tmp_path / "out",
        ablate=True,
        progress=False,
        log=lambda m: None,
        recorded_variants=tuple(RECORDED_VARIANTS),
        baseline="+rerank",
        check_ranx=False,
    )
    main = Study(res.trace, res.qrels)
    assert strong_signal_qids(main.trace.notes) == ["1"]  # the skip fired on "zebra stripes" only
    rows = {r["config"]: r for r in res.ablation.iter_rows(named=True)}
    labels = [v.row for v in RECORDED_VARIANTS.values()]
    assert set(labels) <= set(rows) and "strong-signal skip" not in rows  # recorded with the skip on
    for label in labels:  # paired against the baseline on the same four queries
        r = rows[label]
        assert r["wins"] + r["ties"] + r["losses"] == 4 and r["p_ttest"] is not None and r["p_fisher"] is not None
        assert not r["description"].startswith("="), (label, r["description"])
    # one trace-cache entry per variant (the key hashes to_dict()), beside the main recording's
    from qmdlab.eval.record import index_dir
    from qmdlab.store import Index

    idx = Index.open(index_dir(suite))
    try:  # the index holds expansions: they are part of every key
        keys = {
            name: cache_key(suite, res_cfg, models, idx)
            for name, res_cfg in [("main", cfg.replace(limit=100))]
            + [(n, cfg.replace(limit=100, **v.overrides)) for n, v in RECORDED_VARIANTS.items()]
        }
    finally:
        idx.close()
    assert len(set(keys.values())) == len(keys) and _keys(suite) == set(keys.values())
    # each feature fires here: its recording retrieved other lists than the main one
    cols = ["qid", "source", "query_type", "docno", "rank", "score"]
    main_lists = res.trace.lists.select(cols).sort(cols)
    saved = pl.read_parquet(tmp_path / "out" / "per_query.parquet")
    for name, v in RECORDED_VARIANTS.items():
        rec = record(suite, models, cfg.replace(**v.overrides), progress=False, log=lambda m: None)
        assert rec.timings["queries_cached"] == 4 and rec.cache_dir.name == keys[name]
        assert not rec.trace.lists.select(cols).sort(cols).equals(main_lists), name
        direct = Study.from_recording(rec).evaluate(rec.config).metrics["ndcg@10"]
        assert rows[v.row]["ndcg@10"] == pytest.approx(direct), name  # the row is its recording, as recorded
        assert saved.filter(pl.col("run") == v.row).height == 4
        new = set(rec.trace.lists["source"].unique()) - set(main_lists["source"].unique())
        if name in ("phrase", "like", "trigram", "heading"):
            assert new == {name}, name
    # the verbatim phrase lifts the relevant "Dog" document of "quick brown fox" over the "Fox" one
    phrase = rows["+phrase list"]
    assert phrase["mrr@10"] > rows["+rerank"]["mrr@10"] and phrase["wins"] >= 1 and phrase["losses"] == 0
    # no-skip on a skip-on recording = the pipeline recorded with the skip off
    off = run_suite(
        suite,
        models,
        cfg.replace(strong_signal=False),
        out=tmp_path / "off",
        name="off",
        progress=False,
        log=lambda m: None,
        check_ranx=False,
    )
    assert off.timings["queries_cached"] == 4  # the variant's recording
    assert rows["no strong-signal skip"]["ndcg@10"] == pytest.approx(off.metrics["off"]["ndcg@10"], abs=1e-12)
    assert rows["no strong-signal skip"]["mrr@10"] == pytest.approx(off.metrics["off"]["mrr@10"], abs=1e-12)
    assert off.trace.lists.filter((pl.col("qid") == "1") & (pl.col("query_type") != "original")).height


def test_inert_variants_are_the_main_recording(tmp_path, qmdlab_home):
    suite, models = _suite(tmp_path), _models()
    rec = record(
        suite, models, PipelineConfig(expand=False, weight_original_like=1.0), progress=False, log=lambda m: None
    )
    study = Study.from_recording(rec)
    rows = variant_evaluations(
        study, suite, models, ["no-skip", "like", "expansions"]
    )  # "expansions": the earlier name of doc-queries
    assert rows["no strong-signal skip"].description == "= the main recording (expansion off: nothing to skip)"
    assert rows["+doc-queries column"].description.startswith(
        "= the main recording (the suite's index has no doc-queries"
    )
    assert rows["+like list"].description == "= the main recording (the main config already has it)"
    assert rows["+like list"].evaluation.metrics == study.evaluate(study.config).metrics
    assert _keys(suite) == {rec.cache_dir.name}  # nothing recorded again
    with pytest.raises(ConfigError, match="--variants 'bogus': unknown variant; use all or one of phrase, like"):
        variant_evaluations(study, suite, models, ["bogus"])


def test_field_weights_variant_is_the_content_first_config_file():
    path = Path(__file__).resolve().parents[2] / "qmdlab" / "eval" / "configs" / "content-first-fields.yaml"
    assert RECORDED_VARIANTS["field-weights"].overrides == yaml.safe_load(path.read_text())
    assert check_variant("no-skip") == "no-skip"
    for v in RECORDED_VARIANTS.values():
        PipelineConfig().replace(**v.overrides)  # every override is a valid option


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_cli_variants(tmp_path, qmdlab_home, monkeypatch):
    import qmdlab.eval.runner as eval_runner
    from qmdlab.cli import cli

    monkeypatch.setattr(eval_runner, "ranx_check", lambda q, r, ours: ours)  # numba's first compile: test_runner's

    suite = _suite(tmp_path)
    runner = CliRunner()
    bad = runner.invoke(
        cli,
        ["eval", str(suite.path), "--format", "smart", "--preset", "fake", "--ablate", "--variants", "phrase,bogus"],
    )
    assert bad.exit_code != 0
    assert "--variants 'bogus'" in bad.output and "phrase, like, trigram, heading, two-unit-gate" in bad.output
    no_ablate = runner.invoke(cli, ["eval", str(suite.path), "--format", "smart", "--variants", "all"])
    assert no_ablate.exit_code == 1 and "give --ablate too" in no_ablate.output
    out = runner.invoke(
        cli,
        [
            "eval",
            str(suite.path),
            "--format",
            "smart",
            "--preset",
            "fake",
            "--no-progress",
            "--ablate",
            "--variants",
            "phrase,no-skip",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert out.exit_code == 0, out.output
    assert "+phrase list" in out.output and "no strong-signal skip" in out.output
    table = pl.read_csv(tmp_path / "o" / "ablation.csv")
    assert {"+phrase list", "no strong-signal skip"} <= set(table["config"].to_list())
