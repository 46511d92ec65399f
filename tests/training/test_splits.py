"""Held-out queries never reach training: fixed-seed splits, the split file's guard, GRPO's prompt
rows (``split_rows``), evaluation's check of a GRPO run's prompts, and routing of the retrieval term."""

from __future__ import annotations

import json

import pytest

from qmdlab.errors import ConfigError
from qmdlab.training.leakage import LeakError
from qmdlab.training.splits import (
    QuerySplit,
    heldout_tagged,
    load_splits,
    save_splits,
    split_queries,
    tag,
    untag,
)

QIDS = [str(i) for i in range(1, 21)]


# -- drawing a split ---------------------------------------------------------------------------
def test_split_is_deterministic_disjoint_and_covers_every_query():
    a = split_queries("s", QIDS, heldout_fraction=0.3, seed=7)
    assert split_queries("s", list(reversed(QIDS)) + ["3"], heldout_fraction=0.3, seed=7) == a  # order, dupes
    assert len(a.heldout) == 6 and len(a.train) == 14
    assert not set(a.train) & set(a.heldout) and set(a.train) | set(a.heldout) == set(QIDS)
    assert list(a.train) == sorted(a.train) and list(a.heldout) == sorted(a.heldout)
    # another seed draws another split (C(20, 6) = 38760 possible held-out sets)
    assert split_queries("s", QIDS, heldout_fraction=0.3, seed=8).heldout != a.heldout


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1])
def test_split_fraction_outside_the_open_interval_is_refused(fraction):
    with pytest.raises(ConfigError, match="heldout_fraction"):
        split_queries("s", QIDS, heldout_fraction=fraction)


def test_split_keeps_one_query_on_each_side():
    s = split_queries("s", ["1", "2"], heldout_fraction=0.9)
    assert len(s.train) == 1 and len(s.heldout) == 1


def test_tag_round_trip_and_untagged_is_an_error():
    assert untag(tag("cisi", "1")) == ("cisi", "1")
    with pytest.raises(ValueError, match="not a suite-tagged qid"):
        untag("1")


# -- the split file ----------------------------------------------------------------------------
def test_split_file_round_trip(tmp_path):
    splits = [split_queries("a", QIDS, seed=1), split_queries("b", ["x", "y", "z"], seed=1)]
    path = save_splits(splits, tmp_path / "run" / "splits.json")
    assert load_splits(path) == {s.suite: s for s in splits}
    assert heldout_tagged(load_splits(path)) == {tag(s.suite, q) for s in splits for q in s.heldout}


def test_load_splits_refuses_a_file_whose_sides_overlap(tmp_path):
    path = tmp_path / "splits.json"
    path.write_text(json.dumps({"a": {"train": ["1", "2", "3"], "heldout": ["3", "4"]}}))
    with pytest.raises(LeakError, match=r"\['3'\]"):
        load_splits(path)


def test_load_splits_names_the_file_when_missing_or_not_json(tmp_path):
    with pytest.raises(ConfigError, match="does not exist.*split"):
        load_splits(tmp_path / "nope.json")
    bad = tmp_path / "splits.json"
    bad.write_text('{"a": {"train": ["1"],\n "heldout": [}')
    with pytest.raises(ConfigError, match=r"splits.json: not valid JSON .*line 2"):
        load_splits(bad)


# -- GRPO prompts: only the train side ----------------------------------------------------------
def _grpo_cfg(suite_dir, splits_file, **kw):
    from qmdlab.training.grpo import GRPORunConfig

    return GRPORunConfig(labelled_suites=[str(suite_dir)], splits_file=str(splits_file), **kw)


def test_split_rows_are_the_train_side_only(tmp_path, suite_dir):
    from qmdlab.training.grpo import split_rows

    path = save_splits([QuerySplit("toy", ("1", "3", "5"), ("2", "4", "6"), 0, 0.5)], tmp_path / "splits.json")
    rows = split_rows(_grpo_cfg(suite_dir, path))
    assert [r["qid"] for r in rows] == ["toy:1", "toy:3", "toy:5"]
    assert [r["query"] for r in rows] == ["cats", "birds", "cows"]
    assert all(r["suite"] == "toy" and len(r["qrels"]) == 1 for r in rows)
    assert all(set(r["qrels"].values()) == {1} for r in rows)


def test_split_rows_drop_a_train_query_without_a_relevant_document(tmp_path, suite_dir):
    from qmdlab.training.grpo import split_rows

    # query 6 has no judgement at all: no retrieval term can be computed for it
    path = save_splits([QuerySplit("toy", ("1", "6"), ("2", "3", "4", "5"), 0, 0.5)], tmp_path / "splits.json")
    assert [r["qid"] for r in split_rows(_grpo_cfg(suite_dir, path))] == ["toy:1"]


@pytest.mark.extra("train", "datasets")  # the GRPO dataset
def test_split_rows_refuse_a_corrupted_split_file(tmp_path, suite_dir):
    from qmdlab.training.grpo import build_dataset, split_rows

    path = tmp_path / "splits.json"
    path.write_text(json.dumps({"toy": {"train": ["1", "2", "3"], "heldout": ["2", "4", "5", "6"]}}))
    with pytest.raises(LeakError, match=r"toy:2|'2'"):
        split_rows(_grpo_cfg(suite_dir, path))
    with pytest.raises(LeakError):  # the GRPO dataset is built from the same rows
        build_dataset(_grpo_cfg(suite_dir, path, unlabelled_prompts=False))


def test_split_rows_check_their_own_prompts_against_the_held_out_ids(tmp_path, suite_dir, monkeypatch):
    """The guard inside ``split_rows`` (not only ``load_splits``'): a loader that let an overlap through
    still cannot turn a held-out query into a GRPO prompt."""
    import qmdlab.training.splits as training_splits
    from qmdlab.training.grpo import split_rows

    leaky = {"toy": QuerySplit("toy", ("1", "2"), ("2", "3"), 0, 0.5)}
    monkeypatch.setattr(training_splits, "load_splits", lambda _path: leaky)
    with pytest.raises(LeakError, match=r"GRPO prompts: \['toy:2'\]"):
        split_rows(_grpo_cfg(suite_dir, tmp_path / "ignored.json"))


@pytest.mark.extra("train", "datasets")  # the GRPO dataset
def test_labelled_suites_without_a_split_file_name_the_fix(suite_dir):
    from qmdlab.training.grpo import GRPORunConfig, build_dataset, split_rows

    cfg = GRPORunConfig(labelled_suites=[str(suite_dir)], prompts_file=None, unlabelled_prompts=False)
    with pytest.raises(ConfigError, match="labelled_suites needs splits_file"):
        split_rows(cfg)
    with pytest.raises(ConfigError, match="splits_file"):
        build_dataset(cfg)


def test_a_split_file_without_the_suite_is_refused(tmp_path, suite_dir):
    from qmdlab.training.grpo import split_rows

    path = save_splits([split_queries("other", QIDS)], tmp_path / "splits.json")
    with pytest.raises(ConfigError, match=r"no split for suite 'toy'.*\['other'\]"):
        split_rows(_grpo_cfg(suite_dir, path))


@pytest.mark.extra("train", "datasets")  # the GRPO dataset
def test_grpo_dataset_of_labelled_suites_holds_only_train_prompts(tmp_path, suite_dir):
    from qmdlab.training.grpo import build_dataset

    path = save_splits([QuerySplit("toy", ("1", "3", "5"), ("2", "4", "6"), 0, 0.5)], tmp_path / "splits.json")
    ds = build_dataset(_grpo_cfg(suite_dir, path, prompts_file=None, unlabelled_prompts=False))
    assert sorted(ds["qid"]) == ["toy:1", "toy:3", "toy:5"]


# -- evaluation: held-out only, and never a GRPO prompt --------------------------------------------
def _eval_cfg(suite_dir, splits_file, prompt_qids_file=None):
    from qmdlab.training.evaluate import EvaluateConfig

    return EvaluateConfig(
        suite=str(suite_dir),
        splits_file=str(splits_file),
        prompt_qids_file=None if prompt_qids_file is None else str(prompt_qids_file),
    )


def test_evaluation_refuses_held_out_queries_that_were_grpo_prompts(tmp_path, suite_dir):
    """GRPO ran on one split's train side; evaluation on another split (another seed) would score
    queries the model was trained on: an error, not a number."""
    from qmdlab.training.evaluate import heldout_qids
    from qmdlab.training.grpo import split_rows

    qids = [str(i) for i in range(1, 6)]  # the judged queries with a relevant document
    used = save_splits([split_queries("toy", qids, seed=0)], tmp_path / "a" / "splits.json")
    prompts = tmp_path / "a" / "prompt_qids.json"
    prompts.write_text(json.dumps(sorted(r["qid"] for r in split_rows(_grpo_cfg(suite_dir, used)))))

    assert heldout_qids(_eval_cfg(suite_dir, used, prompts)) == set(load_splits(used)["toy"].heldout)
    other = next(
        split_queries("toy", qids, seed=s)
        for s in range(1, 50)
        if set(split_queries("toy", qids, seed=s).heldout) - set(load_splits(used)["toy"].heldout)
    )
    swapped = save_splits([other], tmp_path / "b" / "splits.json")
    with pytest.raises(LeakError, match="GRPO prompts of .*prompt_qids.json"):
        heldout_qids(_eval_cfg(suite_dir, swapped, prompts))
    # a hand-written prompt list naming one held-out query is refused too
    prompts.write_text(json.dumps(["toy:" + load_splits(used)["toy"].heldout[0]]))
    with pytest.raises(LeakError):
        heldout_qids(_eval_cfg(suite_dir, used, prompts))


def test_evaluation_without_a_split_file_scores_every_judged_query(suite_dir):
    from qmdlab.training.evaluate import EvaluateConfig, heldout_qids

    assert heldout_qids(EvaluateConfig(suite=str(suite_dir))) is None


# -- the retrieval term routed by suite ------------------------------------------------------------
def test_routed_retrieval_scores_each_prompt_with_its_own_suite():
    from qmdlab.training.grpo import RoutedRetrieval
    from qmdlab.training.reward import RetrievalReward

    seen = {"a": [], "b": []}

    def scorer(name, ranking):
        return lambda q, s: seen[name].append((q, s)) or ranking

    a = RetrievalReward(scorer("a", ["d1"]), {"a:1": {"d1": 1}})
    b = RetrievalReward(scorer("b", ["d2", "d1"]), {"b:1": {"d1": 1}})
    routed = RoutedRetrieval({"a": a, "b": b})
    assert routed("q", "a:1", "lex: q") == 0.0 and len(seen["a"]) == 2 and seen["b"] == []  # baseline + expanded
    assert routed("q", "b:1", "lex: q") == 0.0 and len(seen["b"]) == 2
    for qid in ("1", None, "", "c:1", "a:2"):  # untagged, unlabelled, unknown suite, unjudged qid
        assert routed("q", qid, "lex: q") is None
    assert len(seen["a"]) == 2 and len(seen["b"]) == 2
    out = routed.reward_func(completions=["lex: q", "lex: q", "lex: q"], query=["q", "q", "q"], qid=["a:1", "1", "b:1"])
    assert out == [0.0, None, 0.0]
    assert routed.reward_func(completions=["lex: q"], query=["q"]) == [None]  # no qid column
