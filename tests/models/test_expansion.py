"""Expansion grammar and parser."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qmdlab.models.expansion import GRAMMAR, format_lines, matches_grammar, parse_expansion


def test_grammar_is_design_section_3_verbatim():
    assert GRAMMAR.splitlines() == [
        "root ::= line+",
        'line ::= type ": " content "\\n"',
        'type ::= "lex" | "vec" | "hyde"',
        "content ::= [^\\n]+",
    ]


def test_bounded_grammar_exact():
    from qmdlab.models.expansion import grammar_for

    assert grammar_for(2) == GRAMMAR.replace("root ::= line+", "root ::= line{1,2}")
    assert grammar_for(None, 5).splitlines()[3] == "content ::= [^\\n]{1,5}"
    with pytest.raises(ValueError):
        grammar_for(0)
    with pytest.raises(ValueError):
        grammar_for(2, 0)


def test_parse_keeps_order_and_records_reasons():
    raw = "vec: b\n\nlex: a\n  hyde : c d \nvec: B\nnot a line\nintent: x\nlex:\n"
    r = parse_expansion(raw)
    assert r.raw == raw
    assert r.lines == [("vec", "b"), ("lex", "a"), ("hyde", "c d")]
    assert r.dropped == [
        ("vec: B", "duplicate"),
        ("not a line", "not a 'type: content' line"),
        ("intent: x", "unknown type 'intent'"),
        ("lex:", "empty content"),
    ]


def test_same_content_different_type_is_not_duplicate():
    assert parse_expansion("lex: a\nvec: a\n").lines == [("lex", "a"), ("vec", "a")]


def test_content_keeps_inner_colons():
    assert parse_expansion("hyde: time: 10:30 UTC\n").lines == [("hyde", "time: 10:30 UTC")]


lines_st = st.lists(
    st.tuples(
        st.sampled_from(["lex", "vec", "hyde"]),
        st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1).map(str.strip).filter(bool),
    ),
    min_size=1,
    max_size=8,
)


@given(lines_st)
def test_roundtrip_grammar_text(lines):
    raw = format_lines(lines)
    assert matches_grammar(raw)
    parsed = parse_expansion(raw)
    seen, expect = set(), []
    for t, c in lines:
        if (t, c.lower()) not in seen:
            seen.add((t, c.lower()))
            expect.append((t, c))
    assert parsed.lines == expect
    assert len(parsed.lines) + len(parsed.dropped) == len(lines)


@pytest.mark.parametrize(
    "raw,ok",
    [
        ("lex: a\n", True),
        ("lex: a\nvec: b\n", True),
        ("LEX: a\n", False),
        ("lex: a\n\n", False),
        ("lex:a\n", False),
        ("lex: a", False),
        ("", False),
    ],
)
def test_matches_grammar(raw, ok):
    assert matches_grammar(raw) is ok
