"""The held-out leak check every trainer runs on what it is about to fit: a held-out query reaching
training fails, by its id or by its text (case and spacing ignored), and names the query."""

from __future__ import annotations

import pytest

from qmdlab.training.leakage import LeakError, check_no_heldout

QUERIES = {"1": "train query", "2": "Held  Out query"}


def test_ids_that_are_held_out_are_named():
    check_no_heldout(["toy:1", "toy:3"], ["toy:2"], where="GRPO prompts")
    with pytest.raises(LeakError, match=r"held-out queries reached GRPO prompts: \['toy:2'\]"):
        check_no_heldout(["toy:1", "toy:2"], {"toy:2", "toy:4"}, where="GRPO prompts")


def test_a_row_with_a_heldout_qid_is_a_leak_whatever_its_text():
    rows = [{"qid": "1", "completion": " train query\n"}]
    check_no_heldout(rows, ["2"], QUERIES, where="doc2query data", text="completion", suite="s")
    with pytest.raises(LeakError, match=r"doc2query data: \['s:2'\]"):
        check_no_heldout([{"qid": 2, "completion": " anything\n"}], ["2"], QUERIES, where="doc2query data", suite="s")


def test_a_row_whose_text_is_a_heldout_query_is_a_leak():
    """A heading, a generated query or a completion that equals a held-out query is a leak too."""
    row = {"source": "heading", "completion": " held out QUERY\n"}
    with pytest.raises(LeakError, match=r"doc2query data: query .* is the held-out query 's:2' \('Held  Out query'\)"):
        check_no_heldout([row], ["2"], QUERIES, where="doc2query data", text="completion", suite="s")
    # without a text field the check is by id only; a train query's text is allowed
    check_no_heldout([row], ["2"], QUERIES, where="doc2query data")
    check_no_heldout([{"anchor": "TRAIN query"}], ["2"], QUERIES, where="embedder pairs", text="anchor")


def test_reranker_lists_are_checked_against_heldout_and_tune_queries():
    lists = [{"qid": "1", "query": "train query", "docs": ["a"], "labels": [1.0]}]
    check_no_heldout(lists, ["2", "3"], QUERIES, where="reranker training lists", text="query")
    with pytest.raises(LeakError, match="reranker training lists"):
        check_no_heldout(lists, ["1"], QUERIES, where="reranker training lists", text="query")
