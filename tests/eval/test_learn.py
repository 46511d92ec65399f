"""fusion=learned: real LightGBM lambdarank on synthetic suites.

- a suite where relevance is decided by one known feature (title overlap) that RRF cannot see;
- a noise suite where a leak of held-out queries into training would show (and a test that
  injects one to prove it would);
- save/load round trip, pred_contrib, config errors.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from qmdlab.errors import ConfigError
from qmdlab.eval.learn import LearnConfig, cross_validate_learned, explain_query, fit, save, training_frame
from qmdlab.eval.study import Study
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.fuse import fuse
from qmdlab.pipeline.learned import FEATURES, contributions, features, terms_expr
from qmdlab.pipeline.trace import SCHEMAS, Trace

# real LightGBM training, cross-validated (tens of seconds); LightGBM is the learn extra
pytestmark = [pytest.mark.slow, pytest.mark.extra("learn")]

BASE = PipelineConfig(rerank=False, expand=False, limit=20)


def _suite(n_queries: int, n_docs: int, seed: int, relevant_by_title: bool):
    """Two lists per query (BM25 and vector), ranks and scores random; the relevant documents
    are those whose title holds the query's words (``relevant_by_title``) or a random few."""
    rng = np.random.default_rng(seed)
    rows, qrels, docs = [], [], []
    for q in range(n_queries):
        qid = f"q{q:03d}"
        words = [f"w{q}a", f"w{q}b", f"w{q}c"]
        text = " ".join(words)
        rel = set(rng.choice(n_docs, size=3, replace=False).tolist())
        for d in range(n_docs):
            docno = f"c/{qid}-{d}.md"
            title = text if (relevant_by_title and d in rel) else f"t{rng.integers(1_000_000)} other words"
            docs.append((docno, title, int(rng.integers(200, 5000))))
            if d in rel:
                qrels.append((qid, docno, 1))
        for list_id, (source, order) in enumerate([("fts", rng.permutation(n_docs)), ("vec", rng.permutation(n_docs))]):
            for rank, d in enumerate(order, 1):
                backend = -float(rng.uniform(1, 20)) if source == "fts" else float(rng.uniform(0.2, 0.9))
                rows.append(
                    (
                        qid,
                        list_id,
                        source,
                        "original",
                        text,
                        f"c/{qid}-{d}.md",
                        None,
                        rank,
                        backend,
                        abs(backend) / (1 + abs(backend)) if source == "fts" else backend,
                        2.0,
                    )
                )
    lists = pl.DataFrame(rows, schema=SCHEMAS["lists"], orient="row")
    qrels = pl.DataFrame(qrels, schema={"qid": pl.Utf8, "docno": pl.Utf8, "grade": pl.Int64}, orient="row")
    d = pl.DataFrame(docs, schema={"docno": pl.Utf8, "title": pl.Utf8, "size": pl.Int64}, orient="row")
    doc_table = d.select(
        "docno",
        terms_expr(pl.col("title")).alias("title_terms"),
        pl.lit([], dtype=pl.List(pl.Utf8)).alias("heading_terms"),
        pl.col("size").cast(pl.Float64).log1p().alias("doc_len"),
    )
    return Study(Trace(lists=lists), qrels, metrics=["ndcg@10"], config=BASE, docs=doc_table)


@pytest.fixture(scope="module")
def title_study():
    return _suite(40, 20, seed=1, relevant_by_title=True)


def test_features_closed_form(title_study):
    f = features(title_study.trace.lists.filter(pl.col("qid") == "q000"), title_study.docs)
    assert f.columns == ["qid", "docno", *FEATURES]
    row = f.row(0, named=True)
    lists = title_study.trace.lists.filter((pl.col("qid") == "q000") & (pl.col("docno") == row["docno"]))
    fts = lists.filter(pl.col("source") == "fts").row(0, named=True)
    vec = lists.filter(pl.col("source") == "vec").row(0, named=True)
    assert row["rank_original_fts"] == fts["rank"] and row["rank_original_vec"] == vec["rank"]
    assert row["bm25"] == -fts["backend_score"] and row["cosine"] == vec["backend_score"]
    assert row["rrf"] == pytest.approx(1 / (60 + fts["rank"]) + 1 / (60 + vec["rank"]))
    assert row["n_lists"] == 2 and row["query_len"] == 3
    assert row["rank_lex"] is None and row["score_hyde"] is None  # absent list types are missing values
    rel = set(title_study.qrels.filter(pl.col("qid") == "q000")["docno"].to_list())
    assert set(f.filter(pl.col("title_overlap") == 1.0)["docno"].to_list()) == rel
    assert f.filter(~pl.col("docno").is_in(list(rel)))["title_overlap"].max() == 0.0


def test_learned_finds_the_known_feature(title_study):
    """Relevance = title holds the query words; RRF over random lists is near chance, the learned
    fusion must be near perfect on held-out queries and credit title_overlap most."""
    rep = cross_validate_learned(
        title_study, cfg=LearnConfig(folds=4, min_data_in_leaf=5, n_estimators=50, select=False)
    )
    base, learned = rep.held_out["base"].mean(), rep.held_out["learned"].mean()
    assert learned > 0.95 and base < 0.5, (base, learned)
    assert rep.p_ttest < 1e-6
    contrib = contributions(
        title_study.trace.lists.filter(pl.col("qid") == "q001"), BASE, title_study.docs, booster=rep.booster
    )
    top = (
        contrib.filter(~pl.col("feature").is_in(["(bias)", "(rrf prior)"]))
        .group_by("feature")
        .agg(pl.col("contribution").abs().mean())
        .sort("contribution", descending=True)["feature"][0]
    )
    assert top == "title_overlap"
    # the contributions of a document sum to the model's score
    x = features(title_study.trace.lists.filter(pl.col("qid") == "q001"), title_study.docs)
    pred = 60.0 * x["rrf"].to_numpy() + rep.booster.predict(x.select(FEATURES).to_numpy().astype(float))
    sums = contrib.group_by("docno", maintain_order=True).agg(pl.col("contribution").sum())
    assert sums["contribution"].to_numpy() == pytest.approx(pred, abs=1e-9)
    table = explain_query(title_study, rep.booster, "q001", top=3)
    assert table["rank"].unique().sort().to_list() == [1, 2, 3]


def test_cross_validation_never_trains_on_a_held_out_query():
    """On a noise suite a model that saw the held-out queries memorises them: the injected leak
    lifts held-out nDCG far above chance, the real cross-validation must stay near chance, and
    every fold's training qids must be disjoint from its test qids."""
    study = _suite(40, 20, seed=7, relevant_by_title=False)
    cfg = LearnConfig(
        folds=4,
        min_data_in_leaf=1,
        num_leaves=31,
        n_estimators=300,
        learning_rate=0.2,
        feature_fraction=1.0,
        select=False,
    )
    honest = cross_validate_learned(study, cfg=cfg)
    for train, test in zip(honest.trained_on, honest.tested_on):
        assert not set(train) & set(test)
    assert sorted(q for t in honest.tested_on for q in t) == study.qids
    leaked = cross_validate_learned(study, cfg=cfg, _train_filter=lambda train, test: [*train, *test])
    assert leaked.held_out["learned"].mean() > 0.8  # the suite detects a leak ...
    assert honest.held_out["learned"].mean() < 0.55  # ... and the real CV shows none
    assert honest.in_sample_gain > honest.gain + 0.3


def test_official_split_trains_on_train_only_and_reports_test():
    """A collection's official split is one fold: every booster, the saved one included, sees only
    the training queries, and the noise suite's test queries stay at chance."""
    from qmdlab.eval.loaders import OfficialSplit

    study = _suite(40, 20, seed=7, relevant_by_title=False)
    train, test = tuple(study.qids[:30]), tuple(study.qids[30:])
    study.split = OfficialSplit(train, test)
    cfg = LearnConfig(min_data_in_leaf=1, num_leaves=31, n_estimators=300, learning_rate=0.2, select=False)
    report = cross_validate_learned(study, cfg=cfg)
    assert report.trained_on == [train] and report.tested_on == [test]
    assert sorted(report.held_out["qid"].to_list()) == list(test)
    assert report.held_out["learned"].mean() < 0.55  # memorised training queries do not carry over
    assert report.in_sample_gain > report.gain + 0.3  # the saved model's in-sample figure is on train only


def test_save_load_and_fuse_round_trip(title_study, tmp_path):
    rep = cross_validate_learned(title_study, cfg=LearnConfig(folds=3))  # nested selection on (the default)
    assert len(rep.chosen) == 4 and all(set(c) == {"n_estimators", "num_leaves", "prior_scale"} for c in rep.chosen)
    for train, test in zip(rep.trained_on, rep.tested_on):
        assert not set(train) & set(test)
    paths = save(rep, tmp_path / "out", BASE, docid=lambda d: d.split("/", 1)[1][:-3])
    cfg = PipelineConfig.from_yaml(paths["config"])
    assert cfg.fusion == "learned" and cfg.learned_model == str(paths["model"].resolve())
    lists = title_study.trace.lists
    fused = fuse(lists, cfg, title_study.docs)
    x = features(lists, title_study.docs)
    want = x.with_columns(
        s=pl.Series(
            60.0 * x["rrf"].to_numpy()  # the RRF prior + the trees
            + rep.booster.predict(x.select(FEATURES).to_numpy().astype(float))
        )
    )
    got = fused.join(want.select("qid", "docno", "s"), on=["qid", "docno"])
    assert got.height == x.height
    assert got["fused_score"].to_numpy() == pytest.approx(got["s"].to_numpy())
    first = fused.filter(pl.col("qid") == "q000").sort("fused_rank")
    assert first["fused_score"].is_sorted(descending=True)
    run = (tmp_path / "out" / "learned-heldout.trec").read_text().splitlines()
    assert run[0].split()[2].startswith("q") and not run[0].split()[2].startswith("c/")  # collection ids
    assert len({line.split()[0] for line in run}) == len(title_study.qids)
    assert (tmp_path / "out" / "default.trec").exists()
    # the same through the Study slider path
    assert title_study.evaluate(cfg).metrics["ndcg@10"] > 0.9
    # and through retune + --explain's text (a tree model has no per-list share: it says where to look)
    from qmdlab.pipeline.explain import format_explain
    from qmdlab.pipeline.retune import retune

    one = Trace(lists=lists.filter(pl.col("qid") == "q000"))
    text = format_explain(retune(one, cfg, docs=title_study.docs), cfg)
    assert "= learned model score (per-feature contributions" in text and "+-" in text


def test_learned_config_errors(tmp_path):
    import lightgbm as lgb

    with pytest.raises(ConfigError, match="learned_model"):
        PipelineConfig(fusion="learned")
    cfg = PipelineConfig(fusion="learned", learned_model=str(tmp_path / "nope.txt"))
    lists = pl.DataFrame(schema=SCHEMAS["lists"])
    with pytest.raises(ConfigError, match="nope.txt': file not found"):
        fuse(
            lists.vstack(
                pl.DataFrame(
                    [("q", 0, "fts", "original", "x", "d", None, 1, -1.0, 0.5, 1.0)],
                    schema=SCHEMAS["lists"],
                    orient="row",
                )
            ),
            cfg,
            pl.DataFrame(),
        )
    bad = tmp_path / "bad.txt"
    bad.write_text("not a model")
    with pytest.raises(ConfigError, match="not a LightGBM model file"):
        from qmdlab.pipeline.learned import load_model

        load_model(bad)
    other = lgb.train(
        {"objective": "regression", "verbose": -1, "min_data_in_leaf": 1},
        lgb.Dataset(np.random.default_rng(0).random((20, 2)), label=np.arange(20.0)),
        2,
    )
    other.save_model(str(tmp_path / "other.txt"))
    with pytest.raises(ConfigError, match="not qmdlab's learned-fusion features"):
        load_model(tmp_path / "other.txt")
    with pytest.raises(ConfigError, match="document table"):
        features(pl.DataFrame(schema=SCHEMAS["lists"]), None)


def test_training_frame_labels(title_study):
    frame = training_frame(title_study, BASE)
    assert frame.height == 40 * 20
    assert frame["label"].sum() == title_study.qrels.height
    booster = fit(frame.filter(pl.col("qid") < "q010"), LearnConfig(n_estimators=5, min_data_in_leaf=5, select=False))
    assert booster.num_trees() == 5


def test_inner_selection_sees_only_its_queries(title_study):
    """select() is given one fold's training rows only; it must not score any other query."""
    from qmdlab.eval.learn import GRID, select
    from qmdlab.eval.metrics import Scorer

    frame = training_frame(title_study, BASE)
    train = frame.filter(pl.col("qid") < "q020")
    seen = []

    class Spy(Scorer):
        def score(self, run, **kw):
            seen.extend(run["qid"].unique().to_list())
            return super().score(run, **kw)

    best, table = select(
        train, title_study.trace.lists, BASE, LearnConfig(inner_folds=3), Spy(title_study.qrels, ["ndcg@10"]), "ndcg@10"
    )
    assert table.height == len(GRID)
    assert seen and set(seen) <= set(train["qid"].to_list())


def _jsonl_suite(root):
    """12 queries over 36 short documents (a JSONL suite directory)."""
    import json

    root.mkdir()
    topics = [
        "rebase",
        "pasta",
        "docker",
        "sqlite",
        "python",
        "garden",
        "violin",
        "cycling",
        "tax",
        "coffee",
        "sailing",
        "chess",
    ]
    with open(root / "docs.jsonl", "w") as f:
        for i, t in enumerate(topics):
            for j, extra in enumerate(["guide", "notes", "history"]):
                f.write(
                    json.dumps(
                        {
                            "id": f"d{i}-{j}",
                            "title": f"{t} {extra}",
                            "text": f"{t} {extra} about {t} and {topics[(i + j + 1) % 12]}",
                        }
                    )
                    + "\n"
                )
    with open(root / "queries.jsonl", "w") as f:
        for i, t in enumerate(topics):
            f.write(
                json.dumps({"qid": f"q{i:02d}", "query": f"{t} guide", "qrels": {f"d{i}-0": 2, f"d{i}-1": 1}}) + "\n"
            )
    return root


def test_cli_tune_learn(qmdlab_home, tmp_path):
    """`qmdlab tune --learn --out DIR --explain QID` end to end on a small JSONL suite (fake models)."""
    from click.testing import CliRunner

    from qmdlab.cli import cli

    suite = str(_jsonl_suite(tmp_path / "toy"))
    runner = CliRunner()
    bad = runner.invoke(cli, ["tune", suite, "--preset", "fake", "--explain", "q01"])
    assert bad.exit_code != 0 and "--explain QID needs --learn" in bad.output
    out_dir = tmp_path / "learned"
    res = runner.invoke(
        cli,
        [
            "tune",
            suite,
            "--preset",
            "fake",
            "--no-progress",
            "--no-expand",
            "--no-rerank",
            "--folds",
            "2",
            "--learn",
            "--out",
            str(out_dir),
            "--explain",
            "q01",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "learned (held-out folds)" in res.output and "pred_contrib" in res.output
    for name in ("learned.lgb.txt", "config.yaml", "learned-heldout.trec", "default.trec", "learn.json"):
        assert (out_dir / name).exists(), name
    cfg = PipelineConfig.from_yaml(out_dir / "config.yaml")
    assert cfg.fusion == "learned" and cfg.learned_model == str((out_dir / "learned.lgb.txt").resolve())
    run = [line.split() for line in (out_dir / "learned-heldout.trec").read_text().splitlines()]
    assert {r[0] for r in run} == {f"q{i:02d}" for i in range(12)}
    assert all(r[2].startswith("d") and not r[2].endswith(".md") for r in run)  # the collection's own ids
    res = runner.invoke(
        cli, ["eval", suite, "--preset", "fake", "--no-progress", "--config", str(out_dir / "config.yaml")]
    )
    assert res.exit_code == 0, res.output
    assert "in-sample" in res.output
    yaml_out = runner.invoke(
        cli,
        [
            "tune",
            suite,
            "--preset",
            "fake",
            "--no-progress",
            "--no-expand",
            "--learn",
            "--out",
            str(tmp_path / "x.yaml"),
        ],
    )
    assert yaml_out.exit_code != 0 and "--out is a directory" in yaml_out.output
