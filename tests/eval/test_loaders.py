"""qmdlab.eval.loaders: tiny fixtures of every format round-trip; malformed input names file and line."""

from __future__ import annotations

import json

import pytest

from qmdlab.errors import DataFormatError
from qmdlab.eval.loaders import detect_format, load, load_beir, load_default, load_jsonl, load_smart, load_trec

SMART_ALL = """.I 1
.T
Cats and dogs
.A
Someone, A.
.W
   All about cats
and dogs.
.X
1	5	1
.I 002
.T
Birds
.W
Flying things.
.Net and .X are words here, not fields
"""
SMART_QRY = ".I 1\n.W\nWhich pets?\n.I 2\n.T\nbirds title only\n.I 3\n.W\nunjudged query\n"


def _write(d, name, text):
    (d / name).write_text(text, encoding="utf-8")
    return d / name


def test_smart_roundtrip_and_rel_variants(tmp_path):
    _write(tmp_path, "T.ALL", SMART_ALL)
    _write(tmp_path, "T.QRY", SMART_QRY)
    _write(tmp_path, "T.REL", "1 1 0 0.000000\r\n1 2 0 0.000000\r\n2 2 0 0.000000\r\n")  # CISI style, CRLF
    s = load_smart(tmp_path)
    assert s.docs.rows() == [
        ("1", "Cats and dogs", "All about cats and dogs."),
        ("2", "Birds", "Flying things. .Net and .X are words here, not fields"),
    ]
    assert s.queries.select("qid", "query").rows() == [
        ("1", "Which pets?"),
        ("2", "birds title only"),
        ("3", "unjudged query"),
    ]
    assert sorted(s.qrels.rows()) == [("1", "1", 1), ("1", "2", 1), ("2", "2", 1)]
    assert s.judged_queries()["qid"].to_list() == ["1", "2"]
    # Medline / TREC-style REL: qid 0 docid grade
    _write(tmp_path, "T.REL", "1 0 2 2\n2 0 1 1\n")
    assert sorted(load_smart(tmp_path).qrels.rows()) == [("1", "2", 2), ("2", "1", 1)]
    assert detect_format(tmp_path) == "smart"


@pytest.mark.parametrize(
    "content,line,problem",
    [
        (".I 1\n.W\nok\n.I 1\n.W\nagain\n", 4, "duplicate record id 1"),
        ("stray text\n.I 1\n", 1, "text before the first '.I'"),
        (".I x1\n", 1, "not a number"),
        (".I 1\nno field marker\n", 2, "without a field marker"),
    ],
)
def test_smart_malformed_records(tmp_path, content, line, problem):
    _write(tmp_path, "T.ALL", content)
    _write(tmp_path, "T.QRY", ".I 1\n.W\nq\n")
    _write(tmp_path, "T.REL", "1 1\n")
    with pytest.raises(DataFormatError) as err:
        load_smart(tmp_path)
    assert err.value.path.endswith("T.ALL") and err.value.line == line and problem in err.value.problem
    assert str(err.value).startswith(f"{tmp_path / 'T.ALL'}:{line}: ")


def test_smart_malformed_rel_and_missing_file(tmp_path):
    _write(tmp_path, "T.ALL", ".I 1\n.W\nx\n")
    _write(tmp_path, "T.QRY", ".I 1\n.W\nq\n")
    _write(tmp_path, "T.REL", "1 1 0 0.0\n1 1 0 0.0 extra\n")
    with pytest.raises(DataFormatError) as err:
        load_smart(tmp_path)
    assert err.value.line == 2 and "expected 2-4 fields" in err.value.problem
    (tmp_path / "T.REL").unlink()
    with pytest.raises(DataFormatError, match=r"no judgments \(\.REL\) file"):
        load_smart(tmp_path)


def test_trec_sgml_topics_and_docs_roundtrip(tmp_path):
    _write(
        tmp_path,
        "topics.401",
        "<top>\n<num> Number: 401\n<title> foreign minorities, Germany\n\n"
        "<desc> Description:\nWhat is the language?\n</top>\n<top><num> 402 <title>genetics</top>\n",
    )
    _write(tmp_path, "qrels.401", "401 0 FT1 1\n401 0 FT2 0\n402 0 FT2 2\n")
    _write(
        tmp_path,
        "docs.trec",
        "<DOC>\n<DOCNO> FT1 </DOCNO>\n<HEADLINE>x</HEADLINE>\n<TEXT>Germany has\n"
        "minorities.</TEXT>\n</DOC>\n<DOC><DOCNO>FT2</DOCNO><TITLE>Genes</TITLE><TEXT>DNA</TEXT></DOC>\n",
    )
    s = load_trec(tmp_path)
    assert s.queries.select("qid", "query").rows() == [("401", "foreign minorities, Germany"), ("402", "genetics")]
    assert sorted(s.qrels.rows()) == [("401", "FT1", 1), ("401", "FT2", 0), ("402", "FT2", 2)]
    assert s.docs.rows() == [("FT1", "", "x Germany has minorities."), ("FT2", "Genes", "DNA")]
    assert detect_format(tmp_path) == "trec"


def test_trec_tsv_topics_with_markdown_corpus(tmp_path):
    (tmp_path / "corpus" / "sub").mkdir(parents=True)
    _write(tmp_path / "corpus" / "sub", "a.md", "# A\n")
    _write(tmp_path, "topics.tsv", "q1\tfind a\n")
    _write(tmp_path, "qrels.txt", "q1 0 sub/a.md 1\n")
    s = load_trec(tmp_path)
    assert s.docs is None and s.corpus_dir == tmp_path / "corpus"
    assert s.qrels.rows() == [("q1", "sub/a.md", 1)]


@pytest.mark.parametrize(
    "topics,qrels,bad,line,problem",
    [
        ("<top><num> 1 <title> a\n<top>\n", "1 0 d 1\n", "topics.x", 2, "inside an open topic"),
        ("<top><num> 1 </top>\n", "1 0 d 1\n", "topics.x", 1, "no <title> text"),
        ("<top><num> 1 <title> a </top>\n", "1 0 d\n", "qrels.x", 1, "expected 4 fields"),
        ("<top><num> 1 <title> a </top>\n", "\n1 0 d high\n", "qrels.x", 2, "is not a number"),
        ("1 only-one-field\n", "1 0 d 1\n", "topics.x", 1, "expected 'qid<TAB>query'"),
    ],
)
def test_trec_malformed(tmp_path, topics, qrels, bad, line, problem):
    _write(tmp_path, "topics.x", topics)
    _write(tmp_path, "qrels.x", qrels)
    _write(tmp_path, "docs.trec", "<DOC><DOCNO>d</DOCNO>t</DOC>")
    with pytest.raises(DataFormatError) as err:
        load_trec(tmp_path)
    assert err.value.path.endswith(bad) and err.value.line == line and problem in err.value.problem


def _beir(tmp_path, qrels="query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t2\n"):
    _write(
        tmp_path,
        "corpus.jsonl",
        json.dumps({"_id": "d1", "title": "T1", "text": "one"})
        + "\n"
        + json.dumps({"_id": "d2", "title": "", "text": "two"})
        + "\n",
    )
    _write(
        tmp_path,
        "queries.jsonl",
        json.dumps({"_id": "q1", "text": "query one"})
        + "\n"
        + json.dumps({"_id": "q2", "text": "not in this split"})
        + "\n",
    )
    (tmp_path / "qrels").mkdir(exist_ok=True)
    _write(tmp_path / "qrels", "test.tsv", qrels)


def test_beir_roundtrip(tmp_path):
    _beir(tmp_path)
    s = load_beir(tmp_path)
    assert s.docs.rows() == [("d1", "T1", "one"), ("d2", "", "two")]
    assert s.queries.select("qid", "query").rows() == [("q1", "query one")]  # only judged queries
    assert sorted(s.qrels.rows()) == [("q1", "d1", 1), ("q1", "d2", 2)]
    assert detect_format(tmp_path) == "beir"
    with pytest.raises(DataFormatError, match="qrels split missing"):
        _write(tmp_path / "qrels", "dev.tsv", "q1\td1\t1\n")
        load_beir(tmp_path, split="train")


def test_beir_malformed_lines(tmp_path):
    _beir(tmp_path, qrels="query-id\tcorpus-id\tscore\nq1\td1\n")
    with pytest.raises(DataFormatError) as err:
        load_beir(tmp_path)
    assert err.value.line == 2 and err.value.path.endswith("test.tsv")
    _beir(tmp_path)
    _write(tmp_path, "corpus.jsonl", '{"_id": "d1", "text": "ok"}\n{"_id": "d2", "text": \n')
    with pytest.raises(DataFormatError) as err:
        load_beir(tmp_path)
    assert err.value.line == 2 and "invalid JSON" in err.value.problem
    _write(tmp_path, "corpus.jsonl", '{"_id": "d1", "text": "ok"}\n["not", "an", "object"]\n')
    with pytest.raises(DataFormatError, match=r"corpus.jsonl:2: expected a JSON object"):
        load_beir(tmp_path)
    _write(tmp_path, "corpus.jsonl", '{"title": "no id", "text": "x"}\n')
    with pytest.raises(DataFormatError, match=r"corpus.jsonl:1: missing field '_id'"):
        load_beir(tmp_path)


def test_jsonl_roundtrip_inline_qrels(tmp_path):
    _write(tmp_path, "docs.jsonl", '{"id": "a", "title": "A", "text": "alpha"}\n\n{"id": 7, "text": "seven"}\n')
    _write(
        tmp_path,
        "queries.jsonl",
        '{"qid": "q1", "query": "alpha?", "category": "kw", "qrels": {"a": 2, "7": 0}}\n'
        '{"qid": "q2", "query": "x", "intent": "why"}\n',
    )
    s = load_jsonl(tmp_path)
    assert s.docs.rows() == [("a", "A", "alpha"), ("7", "", "seven")]
    assert s.queries.rows() == [("q1", "alpha?", "kw", None), ("q2", "x", None, "why")]
    assert sorted(s.qrels.rows()) == [("q1", "7", 0), ("q1", "a", 2)]
    assert detect_format(tmp_path) == "jsonl"


@pytest.mark.parametrize(
    "queries,line,problem",
    [
        ('{"qid": "q1", "query": "a"}\n{"qid": "q1", "query": "b"}\n', 2, "duplicate qid"),
        ('{"qid": "q1", "query": "a", "qrels": {"a": "high"}}\n', 1, "is not a number"),
        ('{"qid": "q1", "query": "a", "qrels": ["a"]}\n', 1, "must be an object"),
        ('{"qid": "q1"}\n', 1, "missing field 'query'"),
    ],
)
def test_jsonl_malformed(tmp_path, queries, line, problem):
    _write(tmp_path, "docs.jsonl", '{"id": "a", "text": "alpha"}\n')
    _write(tmp_path, "queries.jsonl", queries)
    with pytest.raises(DataFormatError) as err:
        load_jsonl(tmp_path)
    assert err.value.line == line and problem in err.value.problem and err.value.path.endswith("queries.jsonl")


def test_default_layout_roundtrip_and_unknown_docno(tmp_path):
    (tmp_path / "corpus" / "howto").mkdir(parents=True)
    _write(tmp_path / "corpus" / "howto", "git.md", "# Git\n")
    _write(tmp_path, "queries.jsonl", '{"qid": "q1", "query": "git", "category": "keyword"}\n')
    _write(tmp_path, "qrels.txt", "q1 0 howto/git.md 3\n")
    s = load(tmp_path)
    assert s.corpus_dir == tmp_path / "corpus" and s.qrels.rows() == [("q1", "howto/git.md", 3)]
    _write(tmp_path, "qrels.txt", "q1 0 howto/git.md 3\nq1 0 howto/missing.md 1\n")
    with pytest.raises(DataFormatError, match="not in corpus/: howto/missing.md"):
        load_default(tmp_path)


def test_shipped_default_corpus_loads(default_corpus):
    if not default_corpus.is_dir():
        pytest.skip(f"default corpus not present at {default_corpus}")
    s = load_default(default_corpus.parent)
    assert s.queries.height >= 50 and s.judged_queries().height == s.queries.height
    assert set(s.qrels.columns) == {"qid", "docid", "grade"} and s.qrels["grade"].max() >= 2


def test_cisi_loads(cisi_dir):
    s = load_smart(cisi_dir)
    assert s.docs.height == 1460 and s.queries.height == 112
    assert s.judged_queries().height == 76 and s.qrels.height == 3114
    assert set(s.qrels["grade"].unique()) == {1}


def test_unknown_format_and_undetectable_dir(tmp_path):
    with pytest.raises(DataFormatError, match="unknown suite format"):
        load(tmp_path, "xml")
    _write(tmp_path, "notes.txt", "x")
    with pytest.raises(DataFormatError, match="cannot tell the suite format"):
        detect_format(tmp_path)


# -- SMART: .REL numbering queries by position (Cranfield layout), negative grades ----------------
POSITIONAL = __import__("pathlib").Path(__file__).parent / "fixtures" / "smart-positional"


def test_smart_positional_qrels_stop_with_an_error_naming_the_choice(monkeypatch):
    monkeypatch.delenv("QMDLAB_SMART_QRELS_IDS", raising=False)
    with pytest.raises(DataFormatError) as err:
        load_smart(POSITIONAL)
    msg = str(err.value)
    assert err.value.path.endswith("T.REL")
    assert "1 judged query id(s) are not '.I' ids (3)" in msg
    assert "qrels_ids='position'" in msg and "qrels_ids='ids'" in msg and "$QMDLAB_SMART_QRELS_IDS" in msg
    with pytest.raises(DataFormatError, match=r"not \.QRY '\.I' ids \(3\)"):  # by id: query 3 does not exist
        load_smart(POSITIONAL, qrels_ids="ids")


def test_smart_positional_qrels_map_by_position_with_a_warning(monkeypatch):
    monkeypatch.delenv("QMDLAB_SMART_QRELS_IDS", raising=False)
    with pytest.warns(UserWarning, match="mapped to queries by position.*3 of 5 judged queries"):
        s = load_smart(POSITIONAL, qrels_ids="position")
    # the k-th .QRY record (ids 1, 2, 4, 5, 9) is query k of T.REL; negative grades are kept
    assert sorted(s.qrels.rows()) == [
        ("1", "1", 2),
        ("1", "3", -1),
        ("2", "2", 1),
        ("4", "1", -1),
        ("4", "3", 3),
        ("5", "4", 2),
        ("9", "2", -1),
        ("9", "5", 1),
    ]
    assert s.judged_queries()["qid"].to_list() == ["1", "2", "4", "5", "9"]
    q = dict(s.queries.select("qid", "query").iter_rows())
    assert q["4"] == "heat transfer at hypersonic speed" and q["9"] == "buckling of cylindrical shells"
    monkeypatch.setenv("QMDLAB_SMART_QRELS_IDS", "position")  # the same choice from outside Python
    with pytest.warns(UserWarning):
        assert load(POSITIONAL, "smart").qrels.sort("qid", "docid").equals(s.qrels.sort("qid", "docid"))
    monkeypatch.setenv("QMDLAB_SMART_QRELS_IDS", "bogus")
    with pytest.raises(DataFormatError, match="unknown qrels_ids 'bogus'"):
        load_smart(POSITIONAL)


def test_smart_dense_numbering_over_skipping_ids_is_detected(tmp_path, monkeypatch):
    monkeypatch.delenv("QMDLAB_SMART_QRELS_IDS", raising=False)
    _write(tmp_path, "T.ALL", ".I 1\n.W\nx\n.I 2\n.W\ny\n")
    _write(tmp_path, "T.QRY", ".I 1\n.W\na\n.I 3\n.W\nb\n")  # ids 1, 3
    _write(tmp_path, "T.REL", "1 1\n3 2\n")  # by id: both are .I ids, positions would put 3 out of range
    assert sorted(load_smart(tmp_path).qrels.rows()) == [("1", "1", 1), ("3", "2", 1)]
    with pytest.raises(DataFormatError, match="exceed the 2 .QRY records"):
        load_smart(tmp_path, qrels_ids="position")
    _write(tmp_path, "T.QRY", ".I 2\n.W\na\n.I 1\n.W\nb\n")  # ids 2, 1: the numbering 1..2 could be either
    _write(tmp_path, "T.REL", "1 1\n2 2\n")
    with pytest.raises(DataFormatError, match="exactly 1..N while the '.I' ids are not 1..N in file order"):
        load_smart(tmp_path)


def test_cisi_qrels_ids_are_query_ids(cisi_dir, monkeypatch):
    """CISI is not affected: its .I ids are 1..112 in order, so ids and positions agree."""
    from qmdlab.eval.loaders.smart import read_records, read_rel

    monkeypatch.delenv("QMDLAB_SMART_QRELS_IDS", raising=False)
    ids = [rid for rid, _ in read_records(next(cisi_dir.glob("*.QRY")))]
    assert ids == [str(i) for i in range(1, 113)]
    rel = read_rel(next(cisi_dir.glob("*.REL")))
    assert {q for q, _, _ in rel} <= set(ids)
    assert sorted(load_smart(cisi_dir, qrels_ids="ids").qrels.rows()) == sorted(load_smart(cisi_dir).qrels.rows())
