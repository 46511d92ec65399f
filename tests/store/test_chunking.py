"""qmd's break-point chunker: exact break positions, decay, code fences, addresses."""

from __future__ import annotations

import pytest

from qmdlab.store.breakpoints import (
    CHUNK_OVERLAP_CHARS,
    CHUNK_SIZE_CHARS,
    CHUNK_WINDOW_CHARS,
    BreakPoint,
    chunk_spans,
    decayed_score,
    find_best_cutoff,
    find_code_fences,
    scan_break_points,
)
from qmdlab.store.chunking import chunk_document


def test_constants_follow_qmd():
    assert (CHUNK_SIZE_CHARS, CHUNK_OVERLAP_CHARS, CHUNK_WINDOW_CHARS) == (3600, 540, 800)


def test_break_point_scores_per_kind():
    text = "p\n# a\n## b\n### c\n#### d\n##### e\n###### f\n```\nx\n```\n---\nq\n\nr\n- s\n1. t\nu"
    got = {(text[bp.pos + 1 : bp.pos + 4], bp.score, bp.kind) for bp in scan_break_points(text)}
    assert ("# a", 100, "h1") in got
    assert ("## ", 90, "h2") in got
    assert ("###", 80, "h3") in got  # h3 and the code fence share score 80
    kinds = {bp.kind: bp.score for bp in scan_break_points(text)}
    assert kinds == {
        "h1": 100,
        "h2": 90,
        "h3": 80,
        "h4": 70,
        "h5": 60,
        "h6": 50,
        "codeblock": 80,
        "hr": 60,
        "blank": 20,
        "list": 5,
        "numlist": 5,
        "newline": 1,
    }


def test_decay_closed_form():
    # score * (1 - (d/w)^2 * 0.7)
    assert decayed_score(100, 0) == 100.0
    assert decayed_score(100, 800) == pytest.approx(30.0)
    assert decayed_score(90, 600) == pytest.approx(90 * (1 - 0.5625 * 0.7))  # 54.5625
    assert decayed_score(90, 600) == pytest.approx(54.5625)


@pytest.mark.parametrize(
    "far_kind,far_score,expected",
    [("h2", 90, 2820), ("h3", 80, 2820), ("h6", 50, 3600)],
)
def test_decay_trades_distance_against_strength(far_kind, far_score, expected):
    # far break 780 chars before the target vs a blank line (20) right at it:
    # h2 90*(1-(780/800)^2*0.7)=30.11 > 20, h3 26.77 > 20, h6 16.73 < 20.
    pts = [BreakPoint(2820, far_score, far_kind), BreakPoint(3600, 20, "blank")]
    assert find_best_cutoff(pts, 3600) == expected


def test_points_outside_window_are_ignored():
    pts = [BreakPoint(2799, 100, "h1"), BreakPoint(3500, 1, "newline")]
    assert find_best_cutoff(pts, 3600) == 3500
    assert find_best_cutoff([BreakPoint(2799, 100, "h1")], 3600) == 3600  # nothing in window: hard cut


def test_cut_at_heading_then_overlap():
    text = "x" * 3000 + "\n## Sec\n" + "y" * 1000  # 4008 chars
    # h2 at 3000: 90*(1-(600/800)^2*0.7) = 54.56 beats the newline at 3007 (~1)
    assert chunk_spans(text) == [(0, 3000), (3000 - 540, 4008)]


def test_short_document_is_one_chunk():
    assert chunk_spans("a" * 3600) == [(0, 3600)]
    assert chunk_spans("a" * 3601) == [(0, 3600), (3060, 3601)]  # no break points: hard cuts


def test_break_points_inside_fences_are_skipped():
    body = "a" * 3000 + "\n```\n" + "code\n" * 200 + "```\n" + "b" * 500
    fences = find_code_fences(body)
    assert fences == [(3000, 3000 + 5 + 1000 + 3)]  # ends right after the closing ```
    # newlines inside the fence score 1 but are skipped; the fence opening at 3000 is allowed
    assert chunk_spans(body)[0] == (0, 3000)


def test_fallback_cut_never_lands_inside_a_fence():
    body = "a" * 2000 + "\n```\n" + "c" * 3000 + "\n```\n" + "d" * 100
    # no break point in [2800, 3600]: qmd would hard-cut at 3600, inside the fence; we cut at its start
    spans = chunk_spans(body)
    assert spans[0] == (0, 2000)
    for s, e in spans:
        for fs, fe in find_code_fences(body):
            assert not (fs < e < fe) or e == len(body)


def test_chunks_cover_document_and_carry_addresses():
    sec = "word " * 150 + "\n"  # 751 chars per paragraph line
    text = "# Setup\n\n" + sec * 3 + "\n## Linux\n\n" + sec * 4 + "\n## Mac\n\n" + sec * 2
    chunks = chunk_document(text)
    assert len(chunks) >= 2
    assert chunks[0].char_start == 0 and chunks[-1].char_end == len(text)
    for a, b in zip(chunks, chunks[1:]):
        assert b.char_start < a.char_end  # overlap
        assert b.char_start == a.char_end - 540
    for c in chunks:
        assert c.text == text[c.char_start : c.char_end]
        first = c.char_start + (len(c.text) - len(c.text.lstrip("\n")))
        assert c.line_start == text.count("\n", 0, first) + 1
        assert c.line_end == text.count("\n", 0, c.char_end - 1) + 1
    # first cut: the "## Linux" h2 sits at 9+3*751=2262 (dist 1338 > window), so the window
    # [2800,3600] holds only newlines/blank lines; the blank line before "## Linux" is out too.
    assert chunks[0].heading_path == "Setup"
    assert any(c.heading_path.startswith("Setup > Linux") for c in chunks[1:])


def test_heading_path_and_lines_after_front_matter_offset():
    full = "---\ntitle: t\n---\n# A\ntext\n## B\nmore\n"
    off = full.index("# A")
    (c,) = chunk_document(full[off:], offset=off, full_text=full)
    assert (c.char_start, c.char_end, c.line_start, c.line_end, c.heading_path) == (off, len(full), 4, 7, "A")


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

MD_ALPHABET = ["a", "b", " ", "\n", "#", "`", "-", "*", "1", ".", "```", "\n```\n", "\n## h\n", "\n\n"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(MD_ALPHABET), max_size=120).map("".join))
def test_chunk_invariants(text):
    spans = chunk_spans(text, max_chars=40, overlap_chars=6, window_chars=10)
    fences = find_code_fences(text)
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
        assert s1 < s2 < e2 and s2 <= e1  # moves forward, overlaps or abuts, never gaps
        assert s2 in (e1 - 6, e1)
    for s, e in spans[:-1]:
        assert not any(fs < e < fe for fs, fe in fences), (s, e, fences)
        assert e - s <= 40 or any(e == fe for _, fe in fences)  # only a fence can stretch a chunk
    chunks = chunk_document(text, max_chars=40, overlap_chars=6, window_chars=10)
    for c in chunks:
        assert c.text == text[c.char_start : c.char_end]
        assert 1 <= c.line_start <= c.line_end <= text.count("\n") + 1
