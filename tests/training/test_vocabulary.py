"""Vocabulary SFT examples: built from train-split judged queries only, each line kept by the engine's
expansion filter, every added word a word of the relevant document that the query lacks, ranked by tf·idf."""

from __future__ import annotations

import math

import pytest

from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.expand import filter_expansions
from qmdlab.terms import terms, words
from qmdlab.training.vocabulary import distinctive_terms, document_frequency, vocabulary_lines


def test_distinctive_terms_rank_by_tf_idf_computed_by_hand():
    texts = ["kinase kinase protein", "protein cells", "cells membrane", "membrane protein"]
    df = document_frequency(texts)
    assert df == {"kinase": 1, "protein": 3, "cells": 2, "membrane": 2}
    doc = "kinase kinase protein cells cells cells"
    expected = {"kinase": 2 * math.log(4 / 1), "protein": 1 * math.log(4 / 3), "cells": 3 * math.log(4 / 2)}
    ranked = sorted(expected, key=lambda w: -expected[w])
    assert distinctive_terms(doc, df, 4) == ranked == ["kinase", "cells", "protein"]
    assert distinctive_terms(doc, df, 4, min_df=2) == ["cells", "protein"]
    # a word in every text has idf 0 and adds nothing
    assert "protein" not in distinctive_terms(doc, {**df, "protein": 4}, 4)


def test_vocabulary_lines_pass_the_engine_filter_and_add_only_document_words():
    query = "Aspirin lowers the risk of stroke in older adults"
    doc = (
        "Low-dose aspirin inhibits platelet cyclooxygenase. In a cohort of elderly patients, thromboxane fell "
        "and ischaemic stroke incidence was reduced; haemorrhage rose slightly."
    )
    texts = [doc, "stroke units and rehabilitation", "aspirin and gastric bleeding", "older adults exercise"]
    df = document_frequency(texts)
    lines = vocabulary_lines(query, doc, df, len(texts), lines=2, terms_per_line=3)
    assert [k for k, _ in lines] == ["lex", "lex"]
    kept = filter_expansions(query, lines, PipelineConfig())
    assert all(e.kept for e in kept), [(e.text, e.reason_dropped) for e in kept]
    q = set(terms(query))
    for _, text in lines:
        first, *added = text.split()
        assert first in q  # the query's rarest terms lead, one per line
        assert added and not set(added) & q
        assert set(added) <= set(words(doc))
    assert lines[0][1].split()[0] != lines[1][1].split()[0]  # the second line takes the next-rarest term


def test_vocabulary_lines_empty_without_query_terms_or_new_words():
    df = {"git": 2}
    assert vocabulary_lines("?!", "git rebase", df, 2) == ()
    assert vocabulary_lines("git rebase", "git rebase", df, 2) == ()


@pytest.mark.extra("train")
def test_examples_come_from_train_split_queries_only(tmp_path, qmdlab_home):
    from qmdlab.eval.metrics import qrels_dict
    from qmdlab.eval.suites import get_suite
    from qmdlab.training.splits import save_splits, suite_split
    from qmdlab.training.vocabulary import vocabulary_examples

    suite = get_suite("default")
    qids = suite.data().judged_queries()["qid"].cast(str).to_list()
    split = suite_split(suite, qids, heldout_fraction=0.5, seed=0)
    path = save_splits([split], tmp_path / "splits.json")
    examples = vocabulary_examples(["default"], str(path), log=lambda _m: None)
    queries = dict(zip(suite.data().judged_queries()["qid"].cast(str), suite.data().judged_queries()["query"]))
    qrels = qrels_dict(suite.qrels_docnos())
    train_texts = {queries[q] for q in split.train if any(g > 0 for g in qrels.get(q, {}).values())}
    heldout_texts = {queries[q] for q in split.heldout} - train_texts
    assert examples and {e.query for e in examples} <= train_texts
    assert not {e.query for e in examples} & heldout_texts
    assert len(examples) >= 0.9 * len(train_texts)
    for e in examples:
        assert e.category == "default"
        kept = filter_expansions(e.query, e.output, PipelineConfig())
        assert all(x.kept for x in kept), (e.query, [(x.text, x.reason_dropped) for x in kept])
