"""The selectable chunkers (``breakpoints | headings | fences-and-tables``) on the bundled corpus'
long notes, the overlap rule for tables, and the index-level setting (re-chunk, vectors, CLI)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from qmdlab.errors import ConfigError
from qmdlab.store.breakpoints import CHUNK_SIZE_CHARS, chunk_spans, find_code_fences, find_tables, heading_paths
from qmdlab.store.chunkers import (
    CHUNKERS,
    HEADING_MIN_CHARS,
    LEGACY_FINGERPRINT,
    check_chunker,
    chunker_fingerprint,
    spans,
)
from qmdlab.store.content import chunk_text
from qmdlab.store.frontmatter import parse_front_matter

CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus"
NOTES = sorted(CORPUS.rglob("*.md"))
LONG = [p for p in NOTES if len(p.read_text(encoding="utf-8")) > CHUNK_SIZE_CHARS]
CAPS = [(600, 90, 133), (1200, 180, 266), (CHUNK_SIZE_CHARS, 540, 800)]


def body(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    return text[parse_front_matter(text).body_offset :]


def regions(text: str) -> list[tuple[int, int]]:
    return find_code_fences(text) + find_tables(text)


def strictly_inside(pos: int, regs) -> tuple[int, int] | None:
    return next(((s, e) for s, e in regs if s < pos < e), None)


def sections(text: str) -> list[tuple[int, int]]:
    """(start, end) of each heading section as the headings chunker cuts them."""
    cuts = sorted({0, len(text)} | {p - 1 for p, _ in heading_paths(text) if p > 0})
    return list(zip(cuts, cuts[1:]))


def test_the_corpus_has_long_notes_with_tables_and_fences():
    assert len(LONG) >= 4, [p.name for p in LONG]
    assert any(find_tables(body(p)) for p in LONG) and any(find_code_fences(body(p)) for p in LONG)


@pytest.mark.parametrize("chunker", CHUNKERS)
@pytest.mark.parametrize("cap", CAPS, ids=lambda c: f"max{c[0]}")
def test_every_chunker_covers_the_text_never_cuts_a_fence_or_table_and_keeps_its_cap(chunker, cap):
    max_chars = cap[0]
    notes = NOTES if max_chars < CHUNK_SIZE_CHARS else LONG
    checked = 0
    for path in notes:
        text = body(path)
        got = spans(text, chunker, *cap)
        regs = regions(text)
        # every character covered, in order, no gap
        assert got[0][0] == 0 and got[-1][1] == len(text), path.name
        for (s0, e0), (s1, e1) in zip(got, got[1:]):
            assert s0 < s1 <= e0 < e1, (path.name, (s0, e0), (s1, e1))
        for s, e in got:
            # fences and tables never cut: no chunk END strictly inside one
            assert strictly_inside(e, regs) is None, (chunker, path.name, e)
            # a chunk START inside a table (breakpoints' overlap) sits on a row boundary
            r = strictly_inside(s, find_tables(text))
            assert r is None or text[s] == "\n", (chunker, path.name, s, text[s : s + 20])
            # within the cap, but for a fence or table that cannot be cut (its length is the most it adds)
            longest = max((r[1] - r[0] for r in regs if s < r[1] and r[0] < e), default=0)
            assert e - s <= max_chars + longest, (chunker, path.name, (s, e), longest)
            checked += 1
    assert checked >= len(notes)


@pytest.mark.parametrize("cap", CAPS, ids=lambda c: f"max{c[0]}")
def test_headings_never_cut_mid_section_unless_the_section_is_over_the_cap(cap):
    for path in NOTES if cap[0] < CHUNK_SIZE_CHARS else LONG:
        text = body(path)
        secs = sections(text)
        starts = {s for s, _ in secs}
        got = spans(text, "headings", *cap)
        for s, e in got:
            if e == len(text):
                continue
            if e not in starts:  # a cut inside a section: only in one longer than the cap
                sec = next((a, b) for a, b in secs if a < e < b)
                assert sec[1] - sec[0] > cap[0], (path.name, (s, e), sec)
        # every chunk that starts a section starts it at its heading line
        for s, _ in got:
            if s in starts and s > 0:
                assert text[s + 1] == "#", (path.name, s)


def test_headings_chunk_sections_and_join_short_ones_closed_form():
    a, b, c = "a" * 300, "b" * 50, "c" * 300
    text = f"# T\n{a}\n## B\n{b}\n## C\n{c}"
    # sections: "# T\n"+a (304), "\n## B\n"+b (56: short, joins C), "\n## C\n"+c
    assert spans(text, "headings") == [(0, 304), (304, len(text))]
    # a lone title heading is not a chunk of its own
    assert spans("# T\n## S\n" + "s" * 300, "headings") == [(0, 309)]
    # a section over the cap is cut inside by breakpoints
    long = "# L\n" + "\n".join("x" * 70 for _ in range(30))
    got = spans(long, "headings", 600, 90, 133)
    assert len(got) > 1 and all(e - s <= 600 for s, e in got)
    assert HEADING_MIN_CHARS == 200


def test_fences_and_tables_packs_blocks_and_keeps_a_long_fence_whole():
    table = "| k | v |\n|---|---|\n" + "".join(f"| {i} | {'v' * 30} |\n" for i in range(30))
    text = "intro\n\n" + table + "\nafter paragraph\n\n```\n" + "code line\n" * 80 + "```\n\ntail"
    got = spans(text, "fences-and-tables", 600, 90, 133)
    regs = regions(text)
    for s, e in got:
        assert strictly_inside(e, regs) is None and strictly_inside(s, regs) is None
    fence = find_code_fences(text)[0]
    assert any(s <= fence[0] and fence[1] <= e for s, e in got)  # the 800-char fence: one chunk
    assert got[0][0] == 0 and got[-1][1] == len(text)
    # no overlap between packed chunks
    assert all(e0 == s1 for (_, e0), (s1, _) in zip(got, got[1:]))


def test_overlap_never_starts_mid_table_row():
    """The noticed bug: heron-kubernetes-migration.md chunk 1 started "4Mi | 200m / 128Mi | ..."."""
    path = CORPUS / "projects" / "heron-kubernetes-migration.md"
    full = path.read_text(encoding="utf-8")
    chunks = chunk_text(full, "breakpoints")
    assert len(chunks) >= 2
    for k in chunks[1:]:
        assert k.text.startswith("\n") or not re.match(r"^[^\n|]*\|", k.text), k.text[:40]
    line = full[chunks[1].char_start + 1 :].split("\n", 1)[0]
    assert line.startswith("|") or not line.count("|"), line
    # the same positions with the overlap start left where it falls (the old rule) cut a row
    text = body(path)
    tables = find_tables(text)
    starts = [s for s, _ in chunk_spans(text)[1:]]
    assert any(strictly_inside(s, tables) for s in starts)  # the chunk starts in a table…
    assert all(text[s] == "\n" for s in starts if strictly_inside(s, tables))  # …on a row boundary


def test_check_and_fingerprint():
    assert check_chunker("fences-and-tables") == "fences-and-tables"
    with pytest.raises(ConfigError, match="--chunker 'x': unknown chunker; use one of breakpoints"):
        check_chunker("x")
    fps = {chunker_fingerprint(c) for c in CHUNKERS}
    assert len(fps) == 3 and LEGACY_FINGERPRINT not in fps
    assert chunker_fingerprint("breakpoints", 900) != chunker_fingerprint("breakpoints")


# ------------------------------------------------------------------------------------ the index
def _index(
    tmp_path,
    names=("projects/heron-kubernetes-migration.md", "runbooks/oncall-handbook.md", "reference/api-error-codes.md"),
):
    from qmdlab.store import Index

    root = tmp_path / "notes"
    for n in names:
        (root / n).parent.mkdir(parents=True, exist_ok=True)
        (root / n).write_text((CORPUS / n).read_text(encoding="utf-8"), encoding="utf-8")
    (root / "plain.md").write_text("no headings at all, one paragraph of text\n", encoding="utf-8")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("kb", root)
    idx.update()
    return idx, root


def _stored(idx):
    return idx.conn.execute(
        "SELECT hash, seq, char_start, char_end, heading_path FROM chunks ORDER BY hash, seq"
    ).fetchall()


def _expected(idx, chunker):
    out = []
    for h, body_ in idx.conn.execute("SELECT hash, body FROM content ORDER BY hash").fetchall():
        out += [(h, k.seq, k.char_start, k.char_end, k.heading_path) for k in chunk_text(body_, chunker)]
    return out


def _vectors(idx, fp="test#fp"):
    ids = [r[0] for r in idx.conn.execute("SELECT id FROM chunks ORDER BY id").fetchall()]
    idx.store_vectors(ids, np.ones((len(ids), 4), dtype=np.float32), fp)
    return ids


def test_set_chunker_rechunks_drops_only_changed_vectors_and_switches_back(tmp_path):
    idx, _ = _index(tmp_path)
    assert idx.chunker == "breakpoints" and idx.stored_chunker_fingerprint() == chunker_fingerprint()
    assert _stored(idx) == _expected(idx, "breakpoints")
    _vectors(idx)
    plain_id = idx.conn.execute(
        "SELECT k.id FROM chunks k JOIN documents d ON d.hash = k.hash WHERE d.path = 'plain.md'"
    ).fetchone()[0]
    rep = idx.set_chunker("headings")
    assert rep.changed and idx.chunker == "headings" and idx.status()["chunker"] == chunker_fingerprint("headings")
    assert _stored(idx) == _expected(idx, "headings")
    n = idx.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    assert rep.kept + rep.replaced + rep.added == n and rep.vectors_dropped == rep.replaced + rep.removed
    # no vector of an old chunk is paired with a new one: exactly the kept chunks keep vectors
    with_vec = idx.conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    assert with_vec == rep.kept
    assert idx.conn.execute("SELECT 1 FROM vectors WHERE chunk_id = ?", (plain_id,)).fetchone()  # unchanged chunk
    assert idx.chunks_needing_vectors("test#fp").height == n - rep.kept
    # same setting again: nothing to do; update keeps the chunker for new files
    assert not idx.set_chunker("headings").changed
    idx.update()
    assert _stored(idx) == _expected(idx, "headings")
    back = idx.set_chunker("breakpoints")
    assert back.changed and _stored(idx) == _expected(idx, "breakpoints")


def test_legacy_index_is_rechunked_by_update_not_mixed(tmp_path):
    """An index written before the setting (no fingerprint; overlap starting mid-row) is re-chunked by
    the next ``update``: only the chunk the table fix moves is replaced, the others keep vectors."""
    idx, _ = _index(tmp_path)
    _vectors(idx)
    heron = idx.conn.execute(
        "SELECT k.id, k.char_start FROM chunks k JOIN documents d ON d.hash = k.hash "
        "WHERE d.path LIKE '%heron%' AND k.seq = 1"
    ).fetchone()
    with idx.transaction() as c:  # what the old rule stored: the overlap start mid-row
        c.execute("UPDATE chunks SET char_start = char_start + 28 WHERE id = ?", (heron[0],))
        c.execute("DELETE FROM meta WHERE key = 'chunker_fingerprint'")
    assert idx.stored_chunker_fingerprint() == LEGACY_FINGERPRINT
    before = idx.conn.execute("SELECT count(*) FROM vectors").fetchone()[0]
    idx.update()
    assert idx.stored_chunker_fingerprint() == chunker_fingerprint()
    assert _stored(idx) == _expected(idx, "breakpoints")
    assert idx.conn.execute("SELECT count(*) FROM vectors").fetchone()[0] == before - 1
    assert (
        not idx.conn.execute("SELECT 1 FROM vectors WHERE chunk_id = ?", (heron[0],)).fetchone()
        or idx.conn.execute("SELECT char_start FROM chunks WHERE id = ?", (heron[0],)).fetchone() is None
    )


def test_cli_update_chunker_status_and_bad_name(tmp_path, cli_run):
    root = tmp_path / "notes"
    root.mkdir()
    for n in ("projects/heron-kubernetes-migration.md", "howto/kubernetes-basics.md"):
        (root / Path(n).name).write_text((CORPUS / n).read_text(encoding="utf-8"), encoding="utf-8")
    assert "2 new" in cli_run("collection", "add", str(root), "--name", "kb").output
    out = cli_run("update", "--chunker", "headings").output
    assert re.search(r"re-chunked 2 file\(s\) with headings \(was breakpoints/v2/", out), out
    assert "(headings/v1/" in cli_run("status").output
    assert "re-chunked" not in cli_run("update").output  # the setting is kept
    bad = cli_run("update", "--chunker", "words", ok=False)
    assert bad.exit_code != 0 and "words" in bad.output and "fences-and-tables" in bad.output
    other = tmp_path / "more"
    other.mkdir()
    (other / "x.md").write_text("# X\n\nshort\n", encoding="utf-8")
    out = cli_run("collection", "add", str(other), "--name", "more", "--chunker", "fences-and-tables").output
    assert "re-chunked" in out and "with fences-and-tables (was headings/v1/" in out and "1 new" in out
    assert "(fences-and-tables/v1/" in cli_run("status").output


def test_pipeline_config_chunker_stays_out_of_the_key_and_lab_refuses_a_mismatch(tmp_path):
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.pipeline.lab import Lab

    assert "chunker" not in PipelineConfig().to_dict()
    assert PipelineConfig(chunker="headings").to_dict()["chunker"] == "headings"
    with pytest.raises(ConfigError, match="option 'chunker': 'x'"):
        PipelineConfig(chunker="x")
    idx, _ = _index(tmp_path, names=("reference/api-error-codes.md",))
    Lab(idx, None, PipelineConfig(chunker="breakpoints"))
    with pytest.raises(ConfigError, match="update --chunker headings"):
        Lab(idx, None, PipelineConfig(chunker="headings"))
    idx.set_chunker("headings")
    Lab(idx, None, PipelineConfig(chunker="headings"))
