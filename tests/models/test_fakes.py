"""The deterministic fakes: exact outputs."""

import numpy as np
import pytest

from qmdlab.models import Embedder, Expander, KeywordEmbedder, Reranker, RuleExpander, TableReranker, term_overlap


def test_keyword_embedder_exact_vectors():
    e = KeywordEmbedder(["Git", "rebase", "docker"])
    assert e.vocabulary == ("git", "rebase", "docker")
    np.testing.assert_array_equal(e.embed_query("docker"), np.array([0, 0, 1], np.float32))
    h = np.float32(1 / np.sqrt(2))
    m = e.embed_documents([("Git notes", "how to rebase"), ("", "rebase rebase docker"), ("x", "none")])
    np.testing.assert_allclose(m, [[h, h, 0], [0, h, h], [0, 0, 0]], rtol=1e-6)
    assert m.dtype == np.float32 and m.shape == (3, 3)
    assert e.embed_documents([]).shape == (0, 3)


def test_keyword_embedder_title_counts_and_cosine():
    e = KeywordEmbedder(["git", "rebase", "docker"])
    q = e.embed_query("git rebase")
    d = e.embed_documents([("Git", "rebase docker")])[0]
    assert float(q @ d) == pytest.approx(2 / np.sqrt(2) / np.sqrt(3))  # |{git,rebase}| / (√2·√3)


def test_keyword_embedder_rejects_duplicate_vocabulary():
    with pytest.raises(ValueError, match="duplicate"):
        KeywordEmbedder(["git", "GIT"])


def test_fingerprints_change_with_content():
    assert KeywordEmbedder(["a", "b"]).fingerprint != KeywordEmbedder(["b", "a"]).fingerprint
    assert RuleExpander({"q": [("lex", "a")]}).fingerprint != RuleExpander({"q": [("lex", "b")]}).fingerprint
    assert TableReranker({("q", "t"): 0.1}).fingerprint != TableReranker({("q", "t"): 0.2}).fingerprint


def test_rule_expander_exact_lines_and_dropped():
    x = RuleExpander(
        {"rrf fusion": "lex: reciprocal rank fusion\nvec: how rrf merges rankings\nhyde: \nsql: x\n"},
        default=[("lex", "fallback")],
    )
    r = x.expand("  RRF fusion ")
    assert r.lines == [("lex", "reciprocal rank fusion"), ("vec", "how rrf merges rankings")]
    assert r.dropped == [("hyde: ", "empty content"), ("sql: x", "unknown type 'sql'")]
    assert x.expand("other").lines == [("lex", "fallback")]


def test_table_reranker_exact_and_validation():
    r = TableReranker({("q", "a"): 1.0, ("q", "b"): 0.25}, default=0.0)
    assert r.score("q", ["b", "a", "c"]) == [0.25, 1.0, 0.0]
    assert r.score("q", []) == []
    with pytest.raises(ValueError, match="outside"):
        TableReranker({("q", "a"): 1.5})


def test_term_overlap_exact():
    assert term_overlap("a b c d", "D c x") == 0.5
    assert TableReranker({}, default=term_overlap).score("git rebase", ["Git REBASE", "nothing"]) == [1.0, 0.0]


def test_fakes_satisfy_protocols():
    assert isinstance(KeywordEmbedder(["a"]), Embedder)
    assert isinstance(RuleExpander({}), Expander)
    assert isinstance(TableReranker({}), Reranker)
