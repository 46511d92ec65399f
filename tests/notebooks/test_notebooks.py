"""Every notebook runs headless on the default corpus with the fake models; a failing cell fails.

The in-process runs (marimo's script runner) also check that what a notebook shows is what
the qmdlab.eval and qmdlab.training APIs compute — the notebooks hold no logic of their own — and drive the
buttons by replacing the button's cell with a clicked button (``defs``).
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from ..conftest import require

require.extra("notebooks")  # marimo (and matplotlib): without the extra this module skips, under CI it fails

import marimo as mo  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from .conftest import LIMIT, NB_ARGS, NOTEBOOKS, RECORD_ARGS, export_html, run_notebook  # noqa: E402

CLICKED = types.SimpleNamespace(value=True)


def _n_plots(outputs) -> int:
    """Matplotlib figures among the cell outputs (each plot is its own cell's output)."""
    return sum(isinstance(o, Figure) for o in outputs)


@pytest.fixture
def no_model_calls(monkeypatch):
    """Arm: afterwards any call of a fake model raises (the models of the `fake` preset)."""
    from qmdlab.models import fakes

    def arm():
        def boom(self, *a, **k):
            raise AssertionError(f"{type(self).__name__} was called while re-tuning")

        for cls, names in (
            (fakes.KeywordEmbedder, ("embed_query", "embed_documents")),
            (fakes.RuleExpander, ("expand",)),
            (fakes.TableReranker, ("score",)),
        ):
            for name in names:
                monkeypatch.setattr(cls, name, boom)

    return arm


# -- tune ------------------------------------------------------------------------------
def test_tune_defaults_reproduce_the_recorded_pipeline(nb_env, monkeypatch):
    from qmdlab.eval.metrics import mean_scores, per_query

    outputs, defs = run_notebook(NOTEBOOKS / "tune.py", *RECORD_ARGS, monkeypatch=monkeypatch)
    # The controls start exactly at the suite defaults (no slider rounding drift)...
    assert defs["config"] == defs["defaults"], defs["config"].diff(defs["defaults"])
    assert defs["evaluation"].metrics == defs["baseline"].metrics
    # ...and the nDCG shown at the defaults is the score of the pipeline's own recorded ranking
    # (what `qmdlab eval` reports), so re-tuning from the traces loses nothing.
    study = defs["study"]
    recorded = mean_scores(per_query(study.trace.final.rename({"final_rank": "rank"}), study.qrels, study.metrics))
    assert defs["evaluation"].metrics == pytest.approx(recorded, abs=1e-12)
    assert len(study.qids) == defs["per_query_delta"].height == LIMIT
    assert defs["per_query_delta"]["delta"].abs().max() == 0
    # The per-query plots: one PNG of the figure the notebook updates in place (no matplotlib
    # Figure output, which marimo would draw twice at twice the resolution); at the defaults every
    # query sits in the zero-gain bin.
    assert _n_plots(outputs) == 0
    assert sum(o.text.startswith("<img") for o in outputs if isinstance(o, mo.Html)) == 1
    counts = defs["delta_figure"].counts()
    assert sum(counts) == LIMIT and counts[len(counts) // 2] == LIMIT
    # The optimiser and "Save config" wait for their buttons (mo.stop), silently.
    assert "cv_report" not in defs and "saved_to" not in defs


def test_tune_draws_the_frontier_when_it_ran(nb_env, nb_home, monkeypatch):
    from qmdlab.eval.frontier import Point, _table
    from qmdlab.pipeline.config import PipelineConfig

    pq = pl.DataFrame({"qid": ["1", "2"], "ndcg@10": [0.5, 0.7]})
    points = [
        Point("bm25", "", pq, "all queries", PipelineConfig(), "bm25", 0.01),
        Point(
            "+rerank",
            "",
            pq.with_columns(pl.col("ndcg@10") + 0.1),
            "all queries",
            PipelineConfig(),
            "recorded pipeline",
            2.0,
            recording="llm",
        ),
    ]
    out = nb_home / "eval" / "default" / "results" / "frontier"
    out.mkdir(parents=True, exist_ok=True)
    _table(points, "ndcg@10").write_csv(out / "frontier.csv")
    try:
        _, defs = run_notebook(NOTEBOOKS / "tune.py", *RECORD_ARGS, monkeypatch=monkeypatch)
    finally:
        (out / "frontier.csv").unlink()
    table = defs["frontier_table"]
    assert table["config"].to_list() == ["bm25", "+rerank"] and table["pareto"].to_list() == [True, True]


@pytest.mark.slow
def test_tune_slider_rescoring_and_save_without_model_calls(nb_env, monkeypatch, tmp_path, no_model_calls):
    from qmdlab.pipeline.config import PipelineConfig

    run_notebook(NOTEBOOKS / "tune.py", *RECORD_ARGS, monkeypatch=monkeypatch)  # records the traces (cached)
    no_model_calls()
    slider = mo.ui.slider(0.0, 4.0, step=0.1, value=2.1, label="weight: original BM25")
    target = tmp_path / "cfg" / "tuned.yaml"
    _, defs = run_notebook(
        NOTEBOOKS / "tune.py",
        *RECORD_ARGS,
        "--save",
        str(target),
        monkeypatch=monkeypatch,
        defs={
            "knobs": mo.ui.dictionary({"weight_original_fts": slider}),
            "save_path": types.SimpleNamespace(value=str(target)),
            "save_button": CLICKED,
        },
    )
    config, study = defs["config"], defs["study"]
    assert config == defs["defaults"].replace(weight_original_fts=2.1)
    expected = study.evaluate(config).metrics
    assert defs["evaluation"].metrics == expected
    assert expected["ndcg@10"] != defs["baseline"].metrics["ndcg@10"]
    deltas = defs["per_query_delta"]
    assert deltas.filter(pl.col("delta") != 0).height > 0
    assert deltas["delta"].mean() == pytest.approx(expected["ndcg@10"] - defs["baseline"].metrics["ndcg@10"])
    # the plots show the moved config's gains, not the defaults'
    hist, _ = np.histogram(deltas["delta"].to_numpy(), bins=len(defs["delta_figure"].counts()), range=(-1, 1))
    assert defs["delta_figure"].counts() == hist.tolist()
    # "Save config" wrote a YAML that loads back to the same configuration.
    assert defs["saved_to"] == target and target.exists()
    assert PipelineConfig.from_yaml(target) == config
    assert "weight_original_fts: 2.1" in target.read_text()


@pytest.mark.slow
def test_tune_optimiser_loads_the_tuned_config(nb_env, monkeypatch, no_model_calls):
    run_notebook(NOTEBOOKS / "tune.py", *RECORD_ARGS, monkeypatch=monkeypatch)
    no_model_calls()
    _, defs = run_notebook(
        NOTEBOOKS / "tune.py",
        *RECORD_ARGS,
        monkeypatch=monkeypatch,
        defs={
            "optimise_button": CLICKED,
            "optimise_method": types.SimpleNamespace(value="coordinate"),
            "optimise_folds": types.SimpleNamespace(value=2),
            "optimise_trials": types.SimpleNamespace(value=20),
        },
    )
    from qmdlab.eval.optimise import cross_validate

    report = defs["cv_report"]
    assert report.folds.height == 2 and report.held_out.height == len(defs["study"].qids)
    assert defs["get_start"]() == report.config  # what the controls are rebuilt from
    # what the notebook shows is qmdlab.eval.optimise's cross-validation, not something of its own: the
    # same call gives the same held-out scores, gain, p-values and tuned config
    direct = cross_validate(defs["study"], base=defs["defaults"], method="coordinate", trials=20, folds=2)
    assert report.held_out.equals(direct.held_out) and report.folds.equals(direct.folds)
    assert (report.gain, report.p_ttest, report.p_fisher, report.config) == (
        direct.gain,
        direct.p_ttest,
        direct.p_fisher,
        direct.config,
    )
    # the gain is held-out: the mean of (tuned − base) over queries each scored by a config tuned without it
    assert report.gain == pytest.approx((report.held_out["tuned"] - report.held_out["base"]).mean(), abs=1e-15)
    assert sorted(report.held_out["qid"].to_list()) == sorted(defs["study"].qids)


# -- explore ---------------------------------------------------------------------------
def test_explore_explains_every_stage_of_a_query_document(nb_env, monkeypatch):
    doc = "undo a git rebase\nlex: git rebase abort\nvec: how to undo a rebase in git"
    outputs, defs = run_notebook(NOTEBOOKS / "explore.py", *NB_ARGS, monkeypatch=monkeypatch, defs={"query_text": doc})
    trace = defs["trace"]
    assert trace.expansions.filter(pl.col("kept")).select("type", "text").rows() == [
        ("lex", "git rebase abort"),
        ("vec", "how to undo a rebase in git"),
    ]
    assert {"original", "lex", "vec"} <= set(trace.lists["query_type"].to_list())
    assert trace.final.height > 0 and trace.results["snippet"].drop_nulls().len() == trace.results.height
    # the stage rule of `qmdlab query` (qmdlab.pipeline.stages): the fake preset's defaults, said in the first note
    assert trace.notes["stage"][0] == "stages" and "rerank on (fake preset default" in trace.notes["message"][0]
    # The stacked bars are the pipeline's own per-list contributions: they add up to rrf_base.
    sums = defs["contrib"].group_by("docno").agg(pl.col("contribution").sum())
    joined = trace.fused.join(sums, on="docno")
    assert (joined["rrf_base"] - joined["contribution"]).abs().max() < 1e-12
    assert _n_plots(outputs) == 3  # contributions, blend, timings
    # results carry the snippet line's heading breadcrumb (qmdlab.search.hit_context.breadcrumbs)
    crumbs = dict(zip(defs["results_table"]["docno"], defs["results_table"]["breadcrumb"]))
    rebase = "default/howto/git-rebase-interactive.md"
    assert rebase in crumbs and crumbs[rebase].startswith("Cleaning up a branch with interactive rebase")


def test_explore_takes_the_query_from_the_command_line(nb_env, monkeypatch):
    _, defs = run_notebook(
        NOTEBOOKS / "explore.py", *NB_ARGS, "--query", "postgres restore from backup", monkeypatch=monkeypatch
    )
    assert defs["query_text"] == "postgres restore from backup"
    assert defs["trace"].final.height > 0


def test_explore_opens_the_suite_index_of_the_chosen_chunker(nb_env, monkeypatch):
    _, defs = run_notebook(
        NOTEBOOKS / "explore.py",
        *NB_ARGS,
        "--chunker",
        "headings",
        "--query",
        "postgres restore from backup",
        monkeypatch=monkeypatch,
    )
    index = defs["lab"].index
    assert index.chunker == "headings" and index.dir.name == "index-headings"
    assert defs["trace"].final.height > 0


def test_explore_pipeline_options_feed_the_live_query(nb_env, monkeypatch):
    """The "pipeline options" start at the suite's config and set the live query's config:
    a phrase weight above 0 adds the verbatim-phrase list, a preferred tag the tag lift, a required
    tag the filter of `qmdlab query --tag`."""
    args = (*NB_ARGS, "--query", "interactive rebase")
    _, plain = run_notebook(NOTEBOOKS / "explore.py", *args, monkeypatch=monkeypatch)
    assert plain["query_config"] == plain["lab"].config and plain["query_filters"] is None
    assert "phrase" not in set(plain["trace"].lists["source"].to_list())

    options = dict(plain["pipeline_options"].items())
    options["weight_original_phrase"] = mo.ui.slider(0.0, 4.0, step=0.1, value=1.5)
    options["prefer_tags"] = mo.ui.text(value="workflow")
    options["require_tags"] = mo.ui.text(value="git")
    _, defs = run_notebook(
        NOTEBOOKS / "explore.py", *args, monkeypatch=monkeypatch, defs={"pipeline_options": mo.ui.dictionary(options)}
    )
    trace, cfg, lab = defs["trace"], defs["query_config"], defs["lab"]
    assert cfg == lab.config.replace(weight_original_phrase=1.5, tags=("workflow",), tag_lift=3)
    assert trace.config == cfg.to_dict()
    phrase = trace.lists.filter(pl.col("source") == "phrase")
    assert phrase.height > 0 and set(phrase["weight"].to_list()) == {1.5}
    assert "default/howto/git-rebase-interactive.md" in phrase["docno"].to_list()
    from qmdlab.search import SearchFilters

    assert defs["query_filters"] == SearchFilters(("git",))
    tagged = {r["docno"]: r["tags"] for r in lab.index.documents().iter_rows(named=True)}
    assert trace.final.height > 0 and all("git" in tagged[d] for d in trace.final["docno"].to_list())


# -- evaluate --------------------------------------------------------------------------
def test_evaluate_ablation_distributions_and_threshold(nb_env, monkeypatch):
    from qmdlab.eval.ablation import ablate
    from qmdlab.eval.thresholds import best_threshold, threshold_curve

    outputs, defs = run_notebook(NOTEBOOKS / "evaluate.py", *RECORD_ARGS, monkeypatch=monkeypatch)
    study, table = defs["study"], defs["ablation"]
    assert table.equals(ablate(study, baseline="best-leg"))
    assert {"bm25", "vector", "bm25+vector", "+rerank"} <= set(table["config"].to_list())
    assert set(defs["distributions"]["stage"].to_list()) >= {"fts/original", "fused", "rerank", "final"}
    curve = threshold_curve(study.trace.rerank, study.qrels, score_col="rerank_score")
    assert defs["suggested"] == best_threshold(curve)
    assert defs["threshold"].value == pytest.approx(defs["suggested"], abs=1e-6)
    assert _n_plots(outputs) == 3


@pytest.mark.slow
def test_evaluate_other_baseline_and_score(nb_env, monkeypatch):
    _, defs = run_notebook(
        NOTEBOOKS / "evaluate.py",
        *RECORD_ARGS,
        monkeypatch=monkeypatch,
        defs={
            "baseline_picker": types.SimpleNamespace(value="bm25+vector"),
            "score_picker": types.SimpleNamespace(value="final"),
        },
    )
    table = defs["ablation"]
    assert set(table["baseline"].to_list()) == {"bm25+vector"}
    assert table.filter(pl.col("config") == "bm25+vector")["delta"][0] == 0
    assert defs["threshold_col"] == "final_score"


# -- train -----------------------------------------------------------------------------
@pytest.fixture
def run_dir(tmp_path):
    """A run directory in the format SFT/GRPO write (qmdlab.training.rundir.append_metrics)."""
    from qmdlab.training import rundir

    run = tmp_path / "runs" / "sft-grpo"
    for step in range(1, 6):
        rundir.append_metrics(run, {"stage": "sft", "step": step, "loss": 2.0 / step, "learning_rate": 2e-4})
    for step in range(1, 4):
        rundir.append_metrics(
            run, {"stage": "grpo", "step": step, "loss": 0.01 * step, "reward": 0.5 + 0.1 * step, "kl": 0.001 * step}
        )
    rundir.append_metrics(run, {"stage": "grpo", "final": True, "train_runtime": 12.5})
    return run


@pytest.fixture
def evaluation_dir(nb_env, tmp_path):
    """An expander evaluation written by qmdlab.training.evaluate with a rule-based expander."""
    from qmdlab.eval.suites import get_suite
    from qmdlab.models.fakes import RuleExpander
    from qmdlab.training.evaluate import EvaluateConfig, run_evaluate

    suite = get_suite("default")
    rows = suite.data().judged_queries().sort("qid").head(6)
    rules = {q.lower(): [("lex", q), ("vec", f"how to {q}")] for q in rows["query"].to_list()}
    out = tmp_path / "evaluation"
    run_evaluate(
        EvaluateConfig(
            suite=str(suite.path),
            collection=suite.collection,
            index=str(tmp_path / "eval-index"),
            models_preset="fake",
            output_dir=str(out),
            max_queries=6,
        ),
        expanders={"rules": RuleExpander(rules)},
    )
    return out


def test_train_data_reward_curves_and_before_after(nb_env, monkeypatch, run_dir, evaluation_dir):
    from qmdlab.training.data import SEED_PATH, load_examples
    from qmdlab.training.reward import score_expansion

    outputs, defs = run_notebook(
        NOTEBOOKS / "train.py",
        *NB_ARGS,
        "--run",
        str(run_dir),
        "--evaluation",
        str(evaluation_dir),
        monkeypatch=monkeypatch,
    )
    examples = load_examples(SEED_PATH)
    assert defs["rewards"].height == len(examples)
    assert defs["rewards"]["total"][0] == score_expansion(examples[0].query, examples[0].completion).total
    assert defs["example_lines"].height == sum(len(e.output) for e in examples)
    # reward breakdown of the prefilled expansion
    assert 0 <= defs["rule"].total <= 1 and defs["rule"].gate is None
    assert defs["rule"].total == score_expansion(defs["reward_text"], defs["completion"]).total
    # the retrieval term is ΔnDCG@10 of the pipeline searching with the typed lines vs the query
    # alone (rerank off), recomputed here from the lab and qmdlab.eval.metrics
    from qmdlab.eval.metrics import per_query
    from qmdlab.pipeline.expand import parse_query_document

    lab, qid, text = defs["reward_lab"], defs["reward_qid"], defs["reward_text"]
    _, _, searches = parse_query_document(defs["completion"])
    judged = pl.DataFrame(
        [(qid, d, g) for d, g in defs["qrels"][qid].items()], schema=["qid", "docno", "grade"], orient="row"
    )

    def ndcg(trace):
        return per_query(trace.final.with_columns(qid=pl.lit(qid)).rename({"final_rank": "rank"}), judged, ["ndcg@10"])[
            "ndcg@10"
        ][0]

    expected = ndcg(lab.query(text, searches=searches)) - ndcg(lab.query(text, expand=False))
    assert len(searches) == 3 and defs["retrieval"] == pytest.approx(expected, abs=1e-12)
    # curves
    assert {"loss", "reward", "kl", "learning_rate"} <= set(defs["curve_metrics"])
    assert defs["curves"].height == 8 and len(defs["final_records"]) == 1
    # before/after
    assert set(defs["eval_variants"]["variant"].to_list()) == {"none", "rules"}
    assert defs["eval_per_query"].height == 12
    assert _n_plots(outputs) == 4  # data, reward parts, curves, before/after


def test_train_typed_expansion_that_fails_the_gate(nb_env, monkeypatch, tmp_path):
    form = types.SimpleNamespace(value="<think>hmm</think>\nlex: x", element=types.SimpleNamespace(value=""))
    # The notebook offers every run under ./runs; a developer's checkout may have some, so run it from
    # an empty directory (the seed data by absolute path) to test the "no run directory" branch.
    seed = Path(NOTEBOOKS).resolve().parent / "data" / "training" / "seed.jsonl"
    monkeypatch.chdir(tmp_path)
    _, defs = run_notebook(
        NOTEBOOKS / "train.py", *NB_ARGS, "--data", str(seed), monkeypatch=monkeypatch, defs={"expansion_box": form}
    )
    assert defs["rule"].total == 0 and defs["rule"].gate
    assert defs["retrieval"] is None and defs["total"] == 0
    assert "curves" not in defs  # no run directory: the section stops with a hint


@pytest.mark.slow
def test_train_evaluate_button_runs_the_expander_evaluation(nb_env, monkeypatch):
    _, defs = run_notebook(
        NOTEBOOKS / "train.py",
        *NB_ARGS,
        monkeypatch=monkeypatch,
        defs={"evaluate_button": CLICKED, "expander_ref": types.SimpleNamespace(value="fake:rules")},
    )
    assert set(defs["evaluated"]) == {"none", "trained"}
    assert defs["evaluated"]["none"]["n_queries"] == LIMIT
    assert (defs["evaluated_dir"] / "per_query.jsonl").exists()
    assert defs["get_eval_dir"]() == defs["evaluated_dir"]


# -- the command-line path: `marimo export html` --------------------------------------
@pytest.mark.slow
def test_marimo_export_html_runs_every_cell_of_train(nb_env, tmp_path, run_dir):
    """The CLI path on the notebook with the most sections (the others run in-process above)."""
    out = tmp_path / "train.html"
    proc = export_html(NOTEBOOKS / "train.py", out, *NB_ARGS, "--run", str(run_dir), env=nb_env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    html = out.read_text(encoding="utf-8")
    assert "Training curves" in html and html.count("image/png") >= 3


# -- the newcomer path: make demo, then the tune notebook ---------------------------
@pytest.mark.slow
def test_tune_opens_what_the_demo_recorded_and_records_nothing_itself(nb_env, monkeypatch, tmp_path, no_model_calls):
    """Nothing recorded: tune records nothing (it says how); after the demo's two tiers it opens
    the retrieval tier on every query by default and offers the LLM tier, without a model call."""
    import importlib.util

    from qmdlab.eval import choices, record
    from qmdlab.eval.suites import get_suite
    from qmdlab.pipeline.config import PipelineConfig

    monkeypatch.setenv("QMDLAB_HOME", str(tmp_path / "newcomer-home"))
    _, empty = run_notebook(NOTEBOOKS / "tune.py", *NB_ARGS, monkeypatch=monkeypatch)
    assert empty["available"] == [] and empty["new_key"] is None and "study" not in empty
    assert empty["cost"].to_run == LIMIT  # what the Record button would run, shown before it runs

    spec = importlib.util.spec_from_file_location("demo_script", NOTEBOOKS.parent / "scripts" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    common = ["--preset", "fake", "--limit", "12", "--llm-queries", "3"]
    assert demo.main([*common, "--tier", "1"]) == 0 and demo.main([*common, "--tier", "2"]) == 0

    no_model_calls()
    _, defs = run_notebook(NOTEBOOKS / "tune.py", *NB_ARGS, monkeypatch=monkeypatch)
    names = [r.name for r in defs["available"]]
    assert names == ["demo-retrieval", "demo-full"]
    assert defs["recording_picker"].value == defs["available"][0].key  # the default: the retrieval tier
    assert len(defs["study"].qids) == 12
    assert defs["defaults"] == record.depth_config(PipelineConfig(expand=False, rerank=False))
    llm = defs["available"][1]
    _, picked = run_notebook(
        NOTEBOOKS / "tune.py",
        *NB_ARGS,
        monkeypatch=monkeypatch,
        defs={"recording_picker": types.SimpleNamespace(value=llm.key)},
    )
    assert len(picked["study"].qids) == 3 and picked["defaults"].candidate_limit == choices.DEMO_CANDIDATES
    assert picked["study"].trace.rerank.height > 0  # the LLM tier's rerank scores, from the cache
    # the demo's LLM tier is one of the notebook's tiers: recording more of it extends the same cache
    tier = next(t for t in choices.tiers(get_suite("default")) if t.config.candidate_limit == choices.DEMO_CANDIDATES)
    assert (
        record.cache_key(
            get_suite("default"),
            record.depth_config(tier.config),
            __import__("qmdlab.models", fromlist=["load_models"]).load_models("fake"),
        )
        == llm.key
    )
