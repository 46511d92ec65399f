"""qmd bench fixtures as suites: loading, qmd's measures (closed form), the CLI report beside ranx."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from qmdlab.errors import DataFormatError, QmdlabError
from qmdlab.eval.loaders.qmdbench import BenchQuery, load_qmd_bench, match_expected, read_fixture
from qmdlab.eval.qmdbench import bench_report, score_query
from qmdlab.eval.suites import get_suite

DOCS = {
    "notes/alpha.md": "# Alpha\n\nalpha words live here\n",
    "notes/beta.md": "# Beta\n\nbeta words live here\n",
    "gamma.md": "# Gamma\n\ngamma words live here\n",
    "Deep/Delta.md": "# Delta\n\ndelta words live here\n",
    "drafts/alpha-draft.txt": "alpha but not markdown\n",
}

QUERIES = [
    {
        "id": "q1",
        "query": "alpha",
        "type": "exact",
        "description": "",
        "expected_files": ["notes/alpha.md"],
        "expected_in_top_k": 1,
    },
    # "beta.md" matches notes/beta.md as a path suffix; gamma.md is relevant but BM25 cannot find it
    {
        "id": "q2",
        "query": "beta",
        "type": "exact",
        "description": "",
        "expected_files": ["beta.md", "gamma.md"],
        "expected_in_top_k": 2,
    },
    {
        "id": "q3",
        "query": "delta",
        "type": "semantic",
        "description": "",
        "expected_in_top_k": 3,
        "expected_files": ["qmd://notes/deep/delta.md"],
    },  # qmd:// prefix and case fold
    {
        "id": "q4",
        "query": "gamma",
        "type": "semantic",
        "description": "",
        "expected_files": ["missing.md"],
        "expected_in_top_k": 5,
    },
]


def _corpus(tmp_path):
    root = tmp_path / "vault"
    for rel, text in DOCS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _fixture(tmp_path, queries=QUERIES, **extra):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"version": 1, "description": "t", **extra, "queries": queries}), encoding="utf-8")
    return path


def test_score_query_matches_qmds_definitions():
    q = BenchQuery("q", "x", "exact", "", ("a.md", "b.md", "c.md"), 2)
    s = score_query(["z.md", "dir/A.md", "c.md", "b.md"], q)
    assert s["hits_at_k"] == 1  # only a.md within the top 2
    assert s["precision_at_k"] == 0.5  # 1 / min(2, 3)
    assert (s["recall_at_1"], s["recall_at_3"], s["recall_at_5"], s["recall"]) == (0.0, 2 / 3, 1.0, 1.0)
    assert s["mrr"] == 0.5
    assert s["f1"] == pytest.approx(2 * 0.5 * 1.0 / 1.5)
    # the list is cut at max(k, 10): a hit at rank 11 does not count
    late = score_query([f"x{i}.md" for i in range(10)] + ["a.md"], BenchQuery("q", "x", "", "", ("a.md",), 3))
    assert (late["mrr"], late["recall"]) == (0.0, 0.0)
    # a suffix must be whole path segments
    assert score_query(["notes/mya.md"], BenchQuery("q", "x", "", "", ("a.md",), 1))["hits_at_k"] == 0


def test_fixture_becomes_a_suite_with_every_expected_file_relevant(tmp_path):
    root, fx = _corpus(tmp_path), _fixture(tmp_path)
    data = load_qmd_bench(fx, root)
    assert data.corpus_dir == root and data.docs is None
    assert sorted(data.qrels.rows()) == [
        ("q1", "notes/alpha.md", 1),
        ("q2", "gamma.md", 1),
        ("q2", "notes/beta.md", 1),
        ("q3", "Deep/Delta.md", 1),
        ("q4", "missing.md", 1),
    ]
    assert data.queries["category"].to_list() == ["exact", "exact", "semantic", "semantic"]
    assert match_expected("alpha.md", ["notes/alpha.md", "x/alpha.md"]) == ["notes/alpha.md", "x/alpha.md"]


@pytest.mark.parametrize(
    "queries, needle",
    [
        ([{"id": "a", "query": "x", "expected_files": []}], "expected_files"),
        ([{"id": "a", "query": "x", "expected_files": ["a.md"], "expected_in_top_k": 0}], "expected_in_top_k"),
        ([{"id": "a", "query": "x", "expected_files": ["a.md"]}] * 2, "duplicate id"),
        ([{"query": "x", "expected_files": ["a.md"]}], "missing 'id'"),
        ([], "no queries"),
    ],
)
def test_bad_fixtures_name_the_query_and_the_fix(tmp_path, queries, needle):
    with pytest.raises(DataFormatError) as err:
        read_fixture(_fixture(tmp_path, queries))
    assert needle in str(err.value) and str(tmp_path / "bench.json") in str(err.value)


def test_not_json_and_wrong_version(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(DataFormatError, match="invalid JSON"):
        read_fixture(bad)
    bad.write_text(json.dumps({"version": 2, "queries": []}), encoding="utf-8")
    with pytest.raises(DataFormatError, match="version 2"):
        read_fixture(bad)


def test_corpus_from_the_collection_the_fixture_names(tmp_path, qmdlab_home, cli_run):
    root = _corpus(tmp_path)
    fx = _fixture(tmp_path, collection="vault")
    with pytest.raises(QmdlabError, match="collection 'vault' is not in the qmdlab index"):
        get_suite(fx, "qmd-bench", index=cli_run.index_dir)
    cli_run(
        "collection", "add", str(root), "--name", "vault", "--mask", "**/*.md", "--ignore", "Deep/**", "--no-update"
    )
    suite = get_suite(fx, index=cli_run.index_dir)  # a .json file: qmd-bench detected
    assert (suite.format, suite.corpus, suite.mask, suite.ignore) == (
        "qmd-bench",
        root.resolve(),
        "**/*.md",
        ("Deep/**",),
    )
    # the ignored folder is not in the corpus, so q3's expected file is a miss
    assert ("q3", "deep/delta.md", 1) in suite.data().qrels.rows()
    with pytest.raises(QmdlabError, match="names no collection"):
        get_suite(_fixture(tmp_path), "qmd-bench")
    with pytest.raises(QmdlabError, match="--corpus is for a qmd bench fixture"):
        get_suite(tmp_path, "smart", corpus=root)


@pytest.mark.slow  # indexes a corpus and runs the pipeline: seconds on 2 cores
def test_eval_prints_qmd_hit_rates_beside_ranx_ndcg(tmp_path, qmdlab_home):
    from ranx import Qrels, Run, evaluate

    from qmdlab.cli import cli

    root, fx = _corpus(tmp_path), _fixture(tmp_path)
    conf = tmp_path / "bm25.yaml"  # BM25 only: each query word is in exactly one document
    conf.write_text("expand: false\nvector: false\nrerank: false\n", encoding="utf-8")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    out = tmp_path / "out"
    res = CliRunner().invoke(
        cli,
        [
            "eval",
            str(fx),
            "--format",
            "qmd-bench",
            "--corpus",
            str(root),
            "--config",
            str(conf),
            "--preset",
            "fake",
            "--no-progress",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # the user's folder is untouched
    # the rankings are one document each: q1 alpha, q2 beta, q3 delta, q4 gamma (not the expected missing.md)
    trec = sorted(line.split()[:4] for line in (out / "qmdlab-no-expand-no-rerank-bm25.trec").read_text().splitlines())
    assert trec == [
        ["q1", "Q0", "notes/alpha.md", "1"],
        ["q2", "Q0", "notes/beta.md", "1"],
        ["q3", "Q0", "Deep/Delta.md", "1"],
        ["q4", "Q0", "gamma.md", "1"],
    ]
    # qmd's measures by hand: P@k = hits / min(k, |expected|)
    lines = {tuple(line.split()[:2]): line for line in res.output.splitlines() if "P@k=" in line}
    assert (
        "P@k= 0.750" in lines[("qmdlab-no-expand-no-rerank-bm25", "exact")]
        and "R@1= 0.750" in lines[("qmdlab-no-expand-no-rerank-bm25", "exact")]
    )
    assert (
        "P@k= 0.500" in lines[("qmdlab-no-expand-no-rerank-bm25", "semantic")]
        and "MRR= 0.500" in lines[("qmdlab-no-expand-no-rerank-bm25", "semantic")]
    )
    assert (
        "P@k= 0.625" in lines[("qmdlab-no-expand-no-rerank-bm25", "all")]
        and "MRR= 0.750" in lines[("qmdlab-no-expand-no-rerank-bm25", "all")]
    )
    assert "hits 3/5 in 4 queries" in lines[("qmdlab-no-expand-no-rerank-bm25", "all")]
    assert "1 expected file(s) match no file" in res.output and "q4: missing.md" in res.output
    # nDCG@10 beside it: by hand (q2: one of two relevant at rank 1) and with ranx on the same pairs
    ndcg = (1 + 1 / (1 + 1 / math.log2(3)) + 1 + 0) / 4
    metrics = json.loads((out / "metrics.json").read_text())["qmdlab-no-expand-no-rerank-bm25"]
    assert metrics["ndcg@10"] == pytest.approx(ndcg, abs=1e-12) and metrics["mrr@10"] == pytest.approx(0.75)
    qrels = Qrels(
        {
            "q1": {"notes/alpha.md": 1},
            "q2": {"notes/beta.md": 1, "gamma.md": 1},
            "q3": {"Deep/Delta.md": 1},
            "q4": {"missing.md": 1},
        }
    )
    run = Run(
        {
            "q1": {"notes/alpha.md": 1.0},
            "q2": {"notes/beta.md": 1.0},
            "q3": {"Deep/Delta.md": 1.0},
            "q4": {"gamma.md": 1.0},
        }
    )
    assert evaluate(qrels, run, "ndcg@10") == pytest.approx(ndcg, abs=1e-12)
    assert f"ndcg@10      {ndcg:.4f}" in res.output
    saved = json.loads((out / "qmd-bench.json").read_text())
    assert {(r["type"], r["P@k"]) for r in saved["summary"]} == {("exact", 0.75), ("semantic", 0.5), ("all", 0.625)}


@pytest.mark.slow  # records the pipeline and cuts the ablation rows
def test_ablate_and_tune_accept_a_qmd_bench_suite(tmp_path, qmdlab_home):
    from qmdlab.cli import cli

    root, fx = _corpus(tmp_path), _fixture(tmp_path)
    runner = CliRunner()
    res = runner.invoke(
        cli,
        [
            "eval",
            str(fx),
            "--corpus",
            str(root),
            "--preset",
            "fake",
            "--no-progress",
            "--no-expand",
            "--no-rerank",
            "--ablate",
            "--out",
            str(tmp_path / "abl"),
        ],
    )
    assert res.exit_code == 0, res.output
    bench = [line.split()[:2] for line in res.output.splitlines() if "P@k=" in line]
    rows = sorted(p.stem for p in (tmp_path / "abl").glob("*.trec"))
    assert len(rows) > 2 and ["bm25", "all"] in bench
    assert sorted(name for name, kind in bench if kind == "all") == rows  # one qmd line per ablation row
    saved = json.loads((tmp_path / "abl" / "qmd-bench.json").read_text())
    bm25 = next(r for r in saved["summary"] if r["run"] == "bm25" and r["type"] == "all")
    assert bm25["P@k"] == 0.625  # the BM25 row ranks exactly as the BM25-only run above
    res = runner.invoke(
        cli,
        [
            "tune",
            str(fx),
            "--format",
            "qmd-bench",
            "--corpus",
            str(root),
            "--preset",
            "fake",
            "--no-expand",
            "--no-rerank",
            "--trials",
            "4",
            "--folds",
            "2",
            "--no-progress",
            "--out",
            str(tmp_path / "tuned.yaml"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "tuned.yaml").is_file()


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_cli_errors_are_one_line(tmp_path, qmdlab_home):
    from qmdlab.cli import cli

    fx = _fixture(tmp_path)
    res = CliRunner().invoke(cli, ["eval", str(fx), "--format", "qmd-bench", "--preset", "fake"])
    assert res.exit_code == 1 and "names no collection; pass --corpus DIR" in res.output
    assert "Traceback" not in res.output
    res = CliRunner().invoke(cli, ["eval", str(tmp_path / "nope.json"), "--format", "qmd-bench", "--preset", "fake"])
    assert res.exit_code == 1 and "not a file" in res.output


def test_bench_report_groups_by_type_and_run():
    from qmdlab.eval.loaders.qmdbench import BenchFixture

    qs = tuple(
        BenchQuery(q["id"], q["query"], q["type"], "", tuple(q["expected_files"]), q["expected_in_top_k"])
        for q in QUERIES
    )
    fx = BenchFixture(None, 1, "", None, qs)
    perfect = {
        "q1": ["notes/alpha.md"],
        "q2": ["notes/beta.md", "gamma.md"],
        "q3": ["Deep/Delta.md"],
        "q4": ["missing.md"],
    }
    _, summ = bench_report(fx, {"a": perfect, "b": {}})
    rows = {(r["run"], r["type"]): r for r in summ.to_dicts()}
    assert rows[("a", "all")]["P@k"] == 1.0 and rows[("a", "all")]["hits"] == 5
    assert rows[("b", "all")]["P@k"] == 0.0 and rows[("b", "all")]["queries"] == 4
    assert [k for k in rows] == [
        ("a", "exact"),
        ("a", "semantic"),
        ("a", "all"),
        ("b", "exact"),
        ("b", "semantic"),
        ("b", "all"),
    ]


@pytest.mark.slow  # records the suite once
def test_notebook_path_records_and_reloads_a_qmd_bench_suite(tmp_path, qmdlab_home, cli_run, monkeypatch):
    """The notebooks name a suite by one string (``get_suite(value)``): a fixture file whose
    collection is in the qmdlab index; they record it, list the recording and load it as a Study."""
    from qmdlab.eval import record
    from qmdlab.eval.study import Study
    from qmdlab.models import load_models
    from qmdlab.pipeline.config import PipelineConfig

    root = _corpus(tmp_path)
    fx = _fixture(tmp_path, collection="vault")
    cli_run("collection", "add", str(root), "--name", "vault", "--no-update")
    monkeypatch.setenv("QMDLAB_INDEX", cli_run.index_dir)
    suite = get_suite(str(fx))
    cfg = PipelineConfig(expand=False, vector=False, rerank=False)
    key = record.record(suite, load_models("fake"), cfg, progress=False, log=lambda m: None).cache_dir.name
    assert [r.key for r in record.recorded(get_suite(str(fx)))] == [key]
    study = Study.from_recording(record.load_recorded(get_suite(str(fx)), key))
    assert sorted(study.qids) == ["q1", "q2", "q3", "q4"]
    assert study.evaluate(cfg).metrics["ndcg@10"] == pytest.approx((1 + 1 / (1 + 1 / math.log2(3)) + 1 + 0) / 4)
