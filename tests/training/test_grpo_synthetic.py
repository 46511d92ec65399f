"""GRPO prompts from the kept generated queries of a collection (``synthetic_suites``): each prompt's
relevant document is its source, its reward the source's reciprocal rank, and a generated query
equal to a held-out query's text stops the run."""

from __future__ import annotations

import pytest

from qmdlab.errors import ConfigError
from qmdlab.training.leakage import LeakError
from qmdlab.training.splits import QuerySplit, save_splits

WORDS = {"1": "purr sleep", "2": "bark", "3": "fly south", "4": "swim", "5": "eat grass", "6": "hunt night"}


def _doc_id(passage: str) -> str:
    return next(i for i, w in WORDS.items() if w.split()[0] in passage)


def _expand(suite_dir, generate) -> None:
    from qmdlab.eval.record import prepare_index
    from qmdlab.eval.suites import get_suite
    from qmdlab.models.doc_query_gen import TableDocQueryGenerator
    from qmdlab.pipeline.doc_expand import expand_documents

    idx = prepare_index(get_suite(str(suite_dir)), None, progress=False, log=lambda m: None)
    expand_documents(idx, TableDocQueryGenerator(generate), per_chunk=3, top_k=1)


def _own_words(passage: str, i: int) -> str:
    """Sample 0 and 2: the document's own words (kept, and a duplicate); sample 1: another
    document's words (dropped by the round trip: top_k=1)."""
    d = _doc_id(passage)
    other = str(int(d) % 6 + 1)
    return [f" {WORDS[d]}\n", f" {WORDS[other]}\n", f" {WORDS[d]}\n"][i]


def _cfg(suite_dir, splits, **kw):
    from qmdlab.training.grpo import GRPORunConfig

    return GRPORunConfig(
        synthetic_suites=[str(suite_dir)], splits_file=str(splits), prompts_file=None, unlabelled_prompts=False, **kw
    )


def _splits(tmp_path, train=("1", "3", "5"), heldout=("2", "4")):
    return save_splits([QuerySplit("toy", tuple(train), tuple(heldout), 0, 0.5)], tmp_path / "splits.json")


def test_synthetic_prompts_are_the_kept_queries_with_their_source(tmp_path, suite_dir):
    from qmdlab.training.grpo import synthetic_rows

    _expand(suite_dir, _own_words)
    rows = synthetic_rows(_cfg(suite_dir, _splits(tmp_path)))
    # one prompt per distinct kept query: the dropped samples and the duplicate are not prompts
    assert sorted(r["query"] for r in rows) == sorted(WORDS.values())
    for r in rows:
        assert r["qid"].startswith("toy:syn-") and r["synthetic"] and r["suite"] == "toy"
        (docno,) = r["qrels"]
        assert r["qrels"][docno] == 1 and _doc_id(r["query"]) in docno
    assert len({r["qid"] for r in rows}) == len(rows)
    capped = synthetic_rows(_cfg(suite_dir, _splits(tmp_path), synthetic_max_prompts=2))
    assert len(capped) == 2 and {r["qid"] for r in capped} <= {r["qid"] for r in rows}


def test_a_generated_heldout_query_is_a_leak_and_a_train_one_is_not(tmp_path, suite_dir):
    from qmdlab.training.grpo import synthetic_rows

    # document 2's query is "dogs barking" itself: the labelled query of qid 2
    def leaky(passage: str, i: int) -> str:
        return " dogs barking\n" if _doc_id(passage) == "2" else _own_words(passage, i)

    _expand(suite_dir, leaky)
    with pytest.raises(LeakError, match="GRPO prompts: query 'dogs barking' is the held-out query 'toy:2'"):
        synthetic_rows(_cfg(suite_dir, _splits(tmp_path)))
    train_side = _splits(tmp_path, train=("2", "4"), heldout=("1", "3", "5"))
    assert "dogs barking" in {r["query"] for r in synthetic_rows(_cfg(suite_dir, train_side))}


def test_synthetic_prompts_need_a_split_and_kept_queries(tmp_path, suite_dir):
    from qmdlab.training.grpo import GRPORunConfig, synthetic_rows

    with pytest.raises(ConfigError, match="synthetic_suites needs splits_file"):
        synthetic_rows(GRPORunConfig(synthetic_suites=[str(suite_dir)]))
    with pytest.raises(ConfigError, match="holds no kept generated queries.*expand-docs"):
        synthetic_rows(_cfg(suite_dir, _splits(tmp_path)))


@pytest.mark.extra("train", "datasets")  # the GRPO dataset
def test_the_dataset_and_the_reward_route_synthetic_prompts(tmp_path, suite_dir):
    from qmdlab.training.grpo import build_dataset, suite_retrieval

    _expand(suite_dir, _own_words)
    cfg = _cfg(suite_dir, _splits(tmp_path), models_preset="fake", labelled_suites=[str(suite_dir)])
    ds = build_dataset(cfg)
    qids = list(ds["qid"])
    assert sorted(q for q in qids if not q.startswith("toy:syn-")) == ["toy:1", "toy:3", "toy:5"]
    assert sum(q.startswith("toy:syn-") for q in qids) == len(WORDS)
    routed = suite_retrieval(cfg)
    assert set(routed.by_suite) == {"toy", "toy/synthetic"}
    assert routed.by_suite["toy/synthetic"].metric == "rr" and routed.by_suite["toy"].metric == "ndcg"
    row = next(r for r in zip(ds["qid"], ds["query"]) if r[0].startswith("toy:syn-") and r[1] == "hunt night")
    syn = routed.by_suite["toy/synthetic"]
    # the source document ranks first for its own words without expansion: its reciprocal rank is 1
    assert syn.baseline(row[1], row[0]) == 1.0
    gain = routed(row[1], row[0], "lex: hunt night\nvec: owls hunt at night")
    assert gain is not None and -1.0 <= gain <= 0.0


def test_the_recipe_refuses_a_generator_trained_on_another_split(tmp_path, suite_dir):
    from qmdlab.training.cpu_run import check_generator_split

    ours = _splits(tmp_path)
    (tmp_path / "gen").mkdir()
    same = save_splits([QuerySplit("toy", ("1", "3", "5"), ("2", "4"), 0, 0.5)], tmp_path / "gen" / "splits.json")
    assert check_generator_split(tmp_path / "gen", ours, [str(suite_dir)]) == same
    save_splits([QuerySplit("toy", ("1", "2", "5"), ("3", "4"), 1, 0.5)], tmp_path / "gen" / "splits.json")
    with pytest.raises(LeakError, match="splits suite 'toy' differently"):
        check_generator_split(tmp_path / "gen", ours, [str(suite_dir)])
