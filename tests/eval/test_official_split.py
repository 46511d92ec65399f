"""A collection's official train/test split (SciFact's): loaded as such, fitted on train, reported on test.

The leak checks spy on every score a tuner asks for: under the official split no test query — by
id, or by text through a training query that repeats it — reaches tuning or training; under k-fold
the same spy does see every query (the control that shows the spy can fail).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from qmdlab.errors import DataFormatError
from qmdlab.eval.loaders import OfficialSplit, load_beir
from qmdlab.eval.optimise import Param, cross_validate
from qmdlab.eval.study import Study
from qmdlab.pipeline.config import PipelineConfig

BASE = PipelineConfig(rerank=False)
SPACE = (Param("weight_original_fts", 0.0, 4.0), Param("weight_original_vec", 0.0, 4.0))
SCIFACT = Path(os.environ.get("QMDLAB_SCIFACT_DIR") or Path(__file__).resolve().parents[3] / "shared/data/scifact")


def _beir(d: Path, train: str, test: str, queries: dict[str, str]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": f"d{i}", "title": "", "text": f"doc {i}"}) + "\n" for i in range(4))
    )
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items()))
    (d / "qrels").mkdir(exist_ok=True)
    (d / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n" + train)
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + test)
    return d


def test_beir_folder_with_train_and_test_loads_both_sides_with_the_split(tmp_path):
    d = _beir(
        tmp_path,
        "t1\td0\t1\nt2\td1\t1\n",
        "e1\td2\t1\n",
        {"t1": "train one", "t2": "train two", "e1": "test one", "u": "unjudged"},
    )
    data = load_beir(d)
    assert data.split == OfficialSplit(("t1", "t2"), ("e1",), ())
    assert sorted(data.queries["qid"].to_list()) == ["e1", "t1", "t2"]
    assert sorted(data.qrels.rows()) == [("e1", "d2", 1), ("t1", "d0", 1), ("t2", "d1", 1)]
    # an explicit split reads that file alone, with no official split
    only_test = load_beir(d, "test")
    assert only_test.split is None and only_test.queries["qid"].to_list() == ["e1"]


def test_a_query_on_both_sides_is_refused_with_the_folder(tmp_path):
    d = _beir(tmp_path, "q\td0\t1\n", "q\td1\t1\n", {"q": "both"})
    with pytest.raises(DataFormatError, match="both the train and the test split: \\['q'\\]"):
        load_beir(d)


def test_a_training_query_repeating_a_test_query_text_is_dropped_from_train(tmp_path):
    d = _beir(
        tmp_path,
        "t1\td0\t1\nt2\td1\t1\n",
        "e1\td0\t1\n",
        {"t1": "Obesity decreases life  quality.", "t2": "other", "e1": "obesity decreases life quality."},
    )
    assert load_beir(d).split == OfficialSplit(("t2",), ("e1",), ("t1",))


def test_registered_suite_reports_the_test_side(tmp_path, monkeypatch):
    from qmdlab.eval.suites import get_suite

    d = _beir(tmp_path / "sf", "t1\td0\t1\n", "e1\td2\t1\ne2\td3\t1\n", {"t1": "a", "e1": "b", "e2": "c"})
    monkeypatch.setenv("QMDLAB_SCIFACT_DIR", str(d))
    suite = get_suite("scifact")
    assert suite.format == "beir" and suite.report_qids() == ("e1", "e2")
    assert get_suite(d).report_qids() == ("e1", "e2")  # any BEIR folder with both files


class SpyStudy(Study):
    """A study that remembers every query a tuner scored (``score`` is the optimisers' objective)."""

    scored: set[str] = set()

    def score(self, config=None, metric="ndcg@10", lists=None):
        SpyStudy.scored.update(self.qids)
        return super().score(config, metric, lists)

    def subset(self, qids):
        sub = super().subset(qids)
        sub.__class__ = SpyStudy
        return sub


def _spy(toy_suite, split):
    SpyStudy.scored = set()
    return SpyStudy(*toy_suite, config=BASE, split=split)


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_tuning_on_the_official_split_never_scores_a_test_query(toy_suite):
    qids = sorted(toy_suite[1]["qid"].to_list())
    train, test = tuple(qids[:20]), tuple(qids[20:])
    study = _spy(toy_suite, OfficialSplit(train, test))
    report = cross_validate(study, base=BASE, space=SPACE, method="coordinate", trials=20, points=5)
    assert SpyStudy.scored == set(train)
    assert sorted(report.held_out["qid"].to_list()) == list(test)
    assert report.folds.height == 1 and report.folds.row(0, named=True)["n_train"] == 20
    # the control: k-fold's final fit sees every query, so the same spy catches test queries there
    kfold_study = _spy(toy_suite, None)
    cross_validate(kfold_study, base=BASE, space=SPACE, method="coordinate", trials=20, folds=3, points=5)
    assert set(test) <= SpyStudy.scored


def test_the_official_fold_keeps_only_the_studys_queries(toy_suite):
    qids = sorted(toy_suite[1]["qid"].to_list())
    study = Study(*toy_suite, config=BASE, split=OfficialSplit((*qids[:5], "elsewhere"), tuple(qids[5:10])))
    (fold,) = study.folds(5)
    assert fold.train == tuple(qids[:5]) and fold.test == tuple(qids[5:10])
    sub = study.subset(qids[:5])
    with pytest.raises(Exception, match="needs queries on both sides"):
        sub.folds(5)


def test_scifact_official_split(require):
    require((SCIFACT / "qrels" / "train.tsv").is_file(), f"SciFact not at {SCIFACT} (set QMDLAB_SCIFACT_DIR)")
    data = load_beir(SCIFACT)
    assert data.split is not None
    # 809 training claims, 300 test claims; two training claims repeat a test claim's text word for word
    assert len(data.split.train) + len(data.split.dropped) == 809 and len(data.split.test) == 300
    assert data.split.dropped == ("1291", "871")
    assert data.docs.height == 5183 and data.qrels.height == 919 + 339
