"""SMART relevance codes read as gains or as ranks (``--grades gain|rank``)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from qmdlab.errors import QmdlabError
from qmdlab.eval.loaders.smart import load_smart, rank_gains
from qmdlab.eval.suites import get_suite

DOCS = {
    "1": ("Cats", "cats purr and sleep"),
    "2": ("Dogs", "dogs bark at cats"),
    "3": ("Birds", "birds fly south"),
    "10": ("Fish", "fish swim in water"),
}
QUERIES = {"1": "cats", "2": "birds and fish"}
# (qid, docid, code): codes are ranks of relevance, 1 = complete answer, 4 = minimum interest, -1 = not relevant
CODES = [("1", "1", 1), ("1", "2", 3), ("1", "3", -1), ("2", "3", 2), ("2", "10", 4)]
# by hand: max_code = 4, gain = 4 + 1 - code for code >= 1, else 0
BY_HAND = {("1", "1"): 4, ("1", "2"): 2, ("1", "3"): 0, ("2", "3"): 3, ("2", "10"): 1}


def ranked_collection(tmp_path):
    d = tmp_path / "ranked"
    d.mkdir()
    (d / "R.ALL").write_text("".join(f".I {i}\n.T\n{t}\n.W\n{w}\n" for i, (t, w) in DOCS.items()))
    (d / "R.QRY").write_text("".join(f".I {q}\n.W\n{text}\n" for q, text in QUERIES.items()))
    (d / "R.REL").write_text("".join(f"{q} {doc} {code}\n" for q, doc, code in CODES))
    return d


def grades_of(data):
    return {(q, d): g for q, d, g in data.qrels.iter_rows()}


def test_rank_codes_become_gains_as_computed_by_hand(tmp_path, monkeypatch):
    monkeypatch.delenv("QMDLAB_SMART_GRADES", raising=False)
    d = ranked_collection(tmp_path)
    assert grades_of(load_smart(d, grades="rank")) == BY_HAND
    # read as gains (the default) the codes stay what the file says: the most relevant document has the lowest gain
    assert grades_of(load_smart(d)) == {(q, doc): code for q, doc, code in CODES}
    # the suite carries the choice to its loader; the environment is the default outside the CLI
    assert grades_of(get_suite(d, "smart", grades="rank").data()) == BY_HAND
    monkeypatch.setenv("QMDLAB_SMART_GRADES", "rank")
    assert get_suite(d, "smart").grades == "rank" and grades_of(load_smart(d)) == BY_HAND


def test_rank_reading_orders_graded_ndcg_the_other_way(tmp_path):
    import polars as pl

    from qmdlab.eval.metrics import per_query

    d = ranked_collection(tmp_path)
    suite_rank, suite_gain = get_suite(d, "smart", grades="rank"), get_suite(d, "smart", grades="gain")
    # query 1 ranks the complete answer (code 1) first: ideal under rank reading, not under gain reading
    run = pl.DataFrame({"qid": ["1", "1"], "docno": [suite_rank.docno("1"), suite_rank.docno("2")], "rank": [1, 2]})
    ndcg = {}
    for name, suite in (("rank", suite_rank), ("gain", suite_gain)):
        ndcg[name] = per_query(run, suite.qrels_docnos().filter(pl.col("qid") == "1"), ["ndcg@10"])["ndcg@10"][0]
    assert ndcg["rank"] == pytest.approx(1.0)
    # gain reading: gains 1 then 3 (ideal 3, 1); DCG = 1 + 3/log2(3), IDCG = 3 + 1/log2(3)
    import math

    assert ndcg["gain"] == pytest.approx((1 + 3 / math.log2(3)) / (3 + 1 / math.log2(3)))


def test_rank_gains_without_relevant_codes():
    assert rank_gains([("1", "a", 0), ("1", "b", -1)]) == [("1", "a", 0), ("1", "b", 0)]


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_grades_flag_named_on_first_line_and_recorded(tmp_path, qmdlab_home, monkeypatch):
    import qmdlab.eval.runner as eval_runner
    from qmdlab.cli import cli

    monkeypatch.setattr(eval_runner, "ranx_check", lambda q, r, ours: ours)
    d = ranked_collection(tmp_path)
    out = tmp_path / "o"
    res = CliRunner().invoke(
        cli,
        [
            "eval",
            str(d),
            "--format",
            "smart",
            "--grades",
            "rank",
            "--preset",
            "fake",
            "--no-progress",
            "--no-expand",
            "--no-rerank",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    first = res.stdout.splitlines()[0]
    assert first.startswith("suite ranked: 2 judged queries, grades: rank (gain = max_code + 1 - code")
    assert json.loads((out / "run.json").read_text())["grades"] == "rank"
    assert "grades: rank" in (out / "config.yaml").read_text().splitlines()[0]
    assert sorted((out / "qrels.txt").read_text().split("\n")[:-1]) == sorted(
        f"{q} 0 {doc} {g}" for (q, doc), g in BY_HAND.items()
    )


def test_grades_rank_refused_off_smart(tmp_path):
    with pytest.raises(QmdlabError, match=r"--grades rank: suite 'default' is in format 'qmdlab'.*drop --grades"):
        get_suite("default", grades="rank")
    with pytest.raises(QmdlabError, match="--grades 'ranks': unknown grade reading"):
        get_suite(ranked_collection(tmp_path), "smart", grades="ranks")
