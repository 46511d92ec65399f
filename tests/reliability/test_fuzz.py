"""Property fuzzing with hypothesis: query builder + BM25, chunker, expansion parser, loaders.

Example counts come from the profile (``tests/reliability/conftest.py``): the CI profile runs
a few dozen examples per target inside ``make test``; ``QMDLAB_FUZZ_PROFILE=deep`` (``make
fuzz``) runs at least 1,000 per target with fresh randomness each run.

Properties:

- **FTS query builder / BM25**: for any text (FTS5 operators, quotes, ``NEAR(``, ``*``, ``^``,
  ``:``, parentheses, unicode) and either mode, ``build_fts_query`` returns ``None`` or an
  expression whose only unquoted characters are FTS5 operators the builder itself wrote, and
  ``bm25_search`` never raises.
- **Chunker**: chunks cover the text in order (first at 0, last at the end, no gap), each
  chunk's text is its slice, no chunk ends strictly inside a code fence, line numbers match
  the offsets, heading paths match the last heading before the chunk.
- **Expansion parser**: never raises; every non-blank line is either kept (known type,
  non-empty one-line content) or dropped with a reason; parse ∘ format is the identity on
  kept lines.
- **Loaders** (``qmdlab/eval/loaders`` qrels/queries, ``qmdlab/training/data.py`` examples): any bytes give
  data or a :class:`~qmdlab.errors.DataFormatError` naming the file and a line inside it,
  never another exception; a malformed record at line N is reported at line N.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from qmdlab.errors import DataFormatError
from qmdlab.models.expansion import LINE_TYPES, format_lines, matches_grammar, parse_expansion
from qmdlab.search.lexical import build_fts_query
from qmdlab.store.breakpoints import find_code_fences, heading_paths
from qmdlab.store.chunking import chunk_document
from qmdlab.store.frontmatter import parse_front_matter

from .conftest import fuzz_settings

# ---------------------------------------------------------------- FTS query builder + BM25
FTS_SYNTAX = [
    '"',
    "*",
    "^",
    ":",
    "(",
    ")",
    "NEAR(",
    "NEAR",
    "AND",
    "OR",
    "NOT",
    "-",
    "+",
    "{",
    "}",
    ",",
    "'",
    "title:",
    "body:",
    "\\",
    "\x00",
    "東京",
    "ß",
    "İ",
    "é",
    "\u200b",
    "🙂",
    "git",
    "rebase",
    "the",
]
fts_text = st.one_of(
    st.text(max_size=80),
    st.lists(st.sampled_from(FTS_SYNTAX) | st.text(max_size=6), max_size=14).map(" ".join),
    st.lists(st.sampled_from(FTS_SYNTAX), max_size=10).map("".join),
)
_QUOTED = re.compile(r'"[^"]*"')


@pytest.fixture(scope="module")
def fuzz_index(tmp_path_factory):
    from qmdlab.store import Index

    root = tmp_path_factory.mktemp("fuzzcorpus")
    docs = {
        "git.md": "# Git rebase\n\nrebase and merge the branch\n",
        "jp.md": "# 東京\n\n東京大学の講義\n",
        "ops.md": '---\ntags: [ops]\n---\n# NEAR and AND\n\nthe title: body ^ star * quotes "x"\n',
        "de.md": "# Straße\n\nÜber die Brücke, ß und é\n",
    }
    for name, text in docs.items():
        (root / name).write_text(text, encoding="utf-8")
    idx = Index(tmp_path_factory.mktemp("fuzzidx"))
    idx.add_collection("f", root)
    idx.update()
    yield idx
    idx.close()


@fuzz_settings()
@given(text=fts_text, mode=st.sampled_from(["and", "or"]))
@example(text='NEAR("a" "b", 2) title:x ^y "unclosed', mode="and")
@example(text='-"" - -- * ** "*" ("(")', mode="or")
@example(text="\x00", mode="or")
def test_fts_builder_and_search_never_raise(fuzz_index, text, mode):
    from qmdlab.search import bm25_search

    q = build_fts_query(text, mode)
    if q is not None:
        outside = _QUOTED.sub(" ", q)
        assert re.fullmatch(r"(?:\s|\*|\(|\)|AND|OR|NOT)*", outside), (text, q)
    hits = bm25_search(fuzz_index, text, limit=5, mode=mode)
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert all(0.0 <= h.score < 1.0 for h in hits)
    if q is None:
        assert hits == []


# ---------------------------------------------------------------- chunker
md_line = st.one_of(
    st.sampled_from(
        [
            "",
            "",
            "```",
            "```python",
            "~~~",
            "---",
            "***",
            "- item",
            "1. step",
            "> quote",
            "| a | b |",
            "    indented code",
            "####### not a heading",
            "#",
            "# ",
            "#no-space",
        ]
    ),
    st.builds(
        lambda n, t: "#" * n + " " + t,
        st.integers(1, 6),
        st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=12),
    ),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=60),
    st.builds(lambda w, n: " ".join([w] * n), st.sampled_from(["word", "東京", "a", "x" * 30]), st.integers(1, 40)),
)
markdown = st.lists(md_line, max_size=60).map("\n".join)


@fuzz_settings()
@given(
    text=markdown,
    max_chars=st.integers(8, 400),
    overlap_frac=st.floats(0, 0.5),
    window_frac=st.floats(0.05, 1),
    front=st.booleans(),
)
@example(text="```\n" + "code\n" * 50, max_chars=20, overlap_frac=0.25, window_frac=0.5, front=False)
@example(text="a\n```\nx\n```\n" * 20, max_chars=9, overlap_frac=0.5, window_frac=1.0, front=True)
def test_chunker_invariants(text, max_chars, overlap_frac, window_frac, front):
    full = ("---\ntitle: t\n---\n" + text) if front else text
    off = parse_front_matter(full).body_offset
    body = full[off:]
    overlap = int(max_chars * overlap_frac)
    window = max(1, int(max_chars * window_frac))
    chunks = chunk_document(
        body, offset=off, full_text=full, max_chars=max_chars, overlap_chars=overlap, window_chars=window
    )
    assert chunks and [c.seq for c in chunks] == list(range(len(chunks)))
    # cover the text in order, no gap
    assert chunks[0].char_start == off and chunks[-1].char_end == len(full)
    for a, b in zip(chunks, chunks[1:]):
        assert a.char_start < b.char_start <= a.char_end
    fences = find_code_fences(body)
    heads = heading_paths(body)
    n_lines = full.count("\n") + 1
    for c in chunks:
        assert c.text == full[c.char_start : c.char_end]
        assert c.char_start < c.char_end or len(body) == 0
        # never cut inside a fence (the last chunk ends at the end of the text)
        if c is not chunks[-1]:
            e = c.char_end - off
            assert not any(fs < e < fe for fs, fe in fences), (e, fences)
        # line numbers agree with the offsets
        assert 1 <= c.line_start <= c.line_end <= n_lines
        assert c.line_end == full.count("\n", 0, max(c.char_end - 1, c.char_start)) + 1
        lead = len(c.text) - len(c.text.lstrip("\n"))
        first = c.char_start + min(lead, max(len(c.text) - 1, 0))
        assert c.line_start == full.count("\n", 0, first) + 1
        # heading path = the last heading at or before the chunk's first non-space character
        nonspace = c.char_start - off + (len(c.text) - len(c.text.lstrip()))
        want = ""
        for pos, path in heads:
            if pos <= nonspace:
                want = path
        assert c.heading_path == want


@fuzz_settings()
@given(text=markdown)
def test_default_size_chunker_covers_long_documents(text):
    doc = (text + "\n") * 40  # long enough to be cut at the default 3600 characters
    chunks = chunk_document(doc)
    assert chunks[0].char_start == 0 and chunks[-1].char_end == len(doc)
    for a, b in zip(chunks, chunks[1:]):
        assert a.char_start < b.char_start <= a.char_end
    fences = find_code_fences(doc)
    for c in chunks[:-1]:
        assert not any(fs < c.char_end < fe for fs, fe in fences)


# ---------------------------------------------------------------- expansion-output parser
exp_line = st.one_of(
    st.builds(
        lambda t, sep, c: f"{t}{sep}{c}",
        st.sampled_from(["lex", "vec", "hyde", "LEX", "Hyde", "intent", "x", "", "lex ", " vec"]),
        st.sampled_from([": ", ":", " : ", " ", "::", ": \t"]),
        st.text(max_size=40),
    ),
    st.text(max_size=40),
)


@fuzz_settings()
@given(raw=st.one_of(st.lists(exp_line, max_size=12).map("\n".join), st.text(max_size=200)))
@example(raw="lex: a\r\nvec: b\u2028hyde: c\x85\nlex:\n: x\nlex: A\n")
def test_expansion_parser_partitions_every_line(raw):
    res = parse_expansion(raw)
    assert res.raw == raw
    nonblank = [ln for ln in raw.splitlines() if ln.strip()]
    assert len(res.lines) + len(res.dropped) == len(nonblank)
    # walk the lines in order: each is the next kept line or the next dropped one
    ik = idr = 0
    for ln in nonblank:
        head, _, rest = ln.partition(":")
        if ik < len(res.lines) and res.lines[ik] == (head.strip().lower(), rest.strip()):
            ik += 1
        else:
            assert idr < len(res.dropped) and res.dropped[idr][0] == ln, (ln, res)
            idr += 1
    assert (ik, idr) == (len(res.lines), len(res.dropped))
    keys = set()
    for kind, content in res.lines:
        assert kind in LINE_TYPES and content == content.strip() and content and "\n" not in content
        assert (kind, content.lower()) not in keys
        keys.add((kind, content.lower()))
    assert all(isinstance(reason, str) and reason for _, reason in res.dropped)
    again = parse_expansion(format_lines(res.lines))
    assert again.lines == res.lines and again.dropped == []
    if res.lines:
        assert matches_grammar(format_lines(res.lines))


# ---------------------------------------------------------------- loaders
def _loaders():
    from qmdlab.eval.loaders._common import read_jsonl, read_trec_qrels
    from qmdlab.eval.loaders.beir import read_beir_qrels
    from qmdlab.eval.loaders.jsonl import read_queries_jsonl
    from qmdlab.eval.loaders.smart import read_records, read_rel

    out = {
        "queries.jsonl": read_queries_jsonl,
        "jsonl": lambda p: list(read_jsonl(p)),
        "trec-qrels": read_trec_qrels,
        "beir-qrels": read_beir_qrels,
        "smart-rel": read_rel,
        "smart-records": read_records,
    }
    if importlib.util.find_spec("qmdlab.training.data") is not None:
        from qmdlab.training.data import load_examples

        out["training-examples"] = load_examples
    return out


LOADERS = _loaders()
loader_lines = st.one_of(
    st.sampled_from(
        [
            '{"qid": "1", "query": "git", "qrels": {"d1": 1}}',
            '{"query": "q", "output": [["lex", "a"]]}',
            "1 0 d1 1",
            "q1\td1\t2",
            "query-id\tcorpus-id\tscore",
            ".I 1",
            ".W",
            "text",
            "# comment",
            "",
            '{"qid": 1, "query": {"x": 1}}',
            '{"qrels": {"d": Infinity}, "qid": "2", "query": "x"}',
            "1 0 d1 inf",
            "1 0 d1 nan",
            "q\td\t1e400",
            "[1, 2]",
            "null",
            '{"qid": "1"}',
            "\ufeff1 0 d 1",
            '{"query": "q", "output": [["lex", "a\\nb"]]}',
            '{"query": "q", "output": "lex: a"}',
        ]
    ),
    st.text(max_size=50),
)
loader_bytes = st.one_of(
    st.lists(loader_lines, max_size=10).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")),
    st.binary(max_size=120),
)


LOADER_NAMES = ["queries.jsonl", "jsonl", "trec-qrels", "beir-qrels", "smart-rel", "smart-records", "training-examples"]
NO_TRAINING = "qmdlab/training/data.py is not present in this checkout: its loader is not fuzzed"


@pytest.mark.parametrize("name", LOADER_NAMES)
@fuzz_settings()
@given(data=loader_bytes)
@example(data=b"q\td\tinf\n")  # found by this fuzzer: OverflowError in the BEIR/TREC/SMART grade parsers
@example(data=b"1 0 d1 1e999\n")
@example(data=b'{"qid": "1", "query": "x", "qrels": {"d": Infinity}}\n')  # ... and in the JSONL one
@example(data=b"\xff\xfe{}\n")  # ... and UnicodeDecodeError in qmdlab/training/data.py
def test_loaders_return_data_or_a_located_data_error(tmp_path_factory, name, data):
    if name not in LOADERS:
        pytest.skip(NO_TRAINING)
    path = tmp_path_factory.mktemp("ld") / "input.txt"
    path.write_bytes(data)
    try:
        LOADERS[name](path)
    except DataFormatError as err:
        assert str(path) in str(err)
        if err.line is not None:
            n_lines = max(1, len(data.splitlines()) + 1)
            assert 1 <= err.line <= n_lines + data.count(b"\r"), (err.line, data)


GOOD = {
    "queries.jsonl": lambda i: json.dumps({"qid": f"q{i}", "query": f"query {i}", "qrels": {f"d{i}": 1}}),
    "training-examples": lambda i: json.dumps({"query": f"query {i}", "output": [["lex", f"term {i}"]]}),
    "trec-qrels": lambda i: f"q{i} 0 d{i} 1",
    "beir-qrels": lambda i: f"q{i}\td{i}\t1",
}
BAD = {
    "queries.jsonl": [
        '{"qid": "x", ',
        "[1, 2]",
        '{"query": "no id"}',
        '{"qid": "q0", "query": "dup"}',
        '{"qid": "z", "query": "q", "qrels": {"d": "high"}}',
        "not json",
    ],
    "training-examples": [
        '{"query": "q"',
        '{"query": "", "output": [["lex", "a"]]}',
        '{"query": "q", "output": [["sparse", "a"]]}',
        "42",
    ],
    "trec-qrels": ["q 0 d", "q 0 d high", "q 0 d 1 extra"],
    "beir-qrels": ["q\td", "q\td\thigh", "q\td\t1\textra"],
}


@pytest.mark.parametrize("name", sorted(BAD))
@fuzz_settings()
@given(n_good=st.integers(0, 30), bad=st.data(), blank_every=st.integers(0, 4))
def test_malformed_record_is_reported_at_its_line(tmp_path_factory, name, n_good, bad, blank_every):
    if name not in LOADERS:
        pytest.skip(NO_TRAINING)
    bad_line = bad.draw(st.sampled_from(BAD[name]))
    assume(not (bad_line.startswith('{"qid": "q0"') and n_good == 0))  # a duplicate needs its first
    lines = []
    for i in range(n_good):
        lines.append(GOOD[name](i))
        if blank_every and i % blank_every == 0:
            lines.append("")  # blank lines are skipped but still counted
    if name == "beir-qrels" and not lines:
        lines.append(GOOD[name](99))  # a first line "q<TAB>d" could pass as a header-less judgment
    where = len(lines) + 1
    lines += [bad_line, GOOD[name](1000)]
    path = tmp_path_factory.mktemp("ln") / "data.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        LOADERS[name](path)
    assert info.value.line == where, (str(info.value), where)
    assert str(info.value).startswith(f"{path}:{where}: ")
