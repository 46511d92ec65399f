"""Markdown tables are kept whole by the chunker, like code fences."""

from __future__ import annotations

from pathlib import Path

import pytest

from qmdlab.store.breakpoints import chunk_spans, find_tables

CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus"


def _doc(rows: int, before: int) -> str:
    table = "| host | role | owner |\n|:-----|:----:|------:|\n" + "".join(
        f"| db-{i:02d} | replica | team-{i % 3} |\n" for i in range(rows)
    )
    return "# Inventory\n\n" + "intro words here\n" * before + "\n" + table + "\nafter the table\n" * 5


def test_find_tables_spans_header_delimiter_and_rows():
    text = _doc(3, 1)
    ((start, end),) = find_tables(text)
    assert text[start] == "\n" and text[start + 1 :].startswith("| host |")
    assert text[start:end].count("\n") == 5 and text[end] == "\n" and text[end - 1] == "|"
    assert find_tables("x\n```\n| a | b |\n|---|---|\n```\n") == []  # inside a fence: the fence's business
    assert find_tables("a|b without delimiter\nnext") == []


@pytest.mark.parametrize("before", [20, 60, 100, 140])
def test_no_cut_inside_a_table(before):
    text = _doc(40, before)  # a ~1.3 KB table placed across the 3600-char target at various offsets
    ((t0, t1),) = find_tables(text)
    spans = chunk_spans(text, max_chars=1500, overlap_chars=200, window_chars=400)
    assert len(spans) > 1
    for s, e in spans:
        assert not (t0 < e < t1), (s, e, t0, t1)  # no chunk ends inside the table
    whole = [i for i, (s, e) in enumerate(spans) if s <= t0 + 1 and e >= t1]
    assert whole, "the table is inside one chunk in full"


def test_default_corpus_tables_never_split():
    if not CORPUS.is_dir():
        pytest.skip(f"default corpus not present at {CORPUS}")
    checked = 0
    for path in sorted(CORPUS.rglob("*.md")):
        text = path.read_text(encoding="utf-8")
        tables = find_tables(text)
        if not tables:
            continue
        # small chunks so that the corpus' notes are cut many times around their tables
        for s, e in chunk_spans(text, max_chars=600, overlap_chars=90, window_chars=150):
            for t0, t1 in tables:
                if t1 - t0 <= 600:
                    assert not (t0 < e < t1), (path.name, s, e, t0, t1)
        checked += len(tables)
    assert checked >= 10
