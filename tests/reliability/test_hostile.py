"""A hostile corpus: every odd file is either indexed or skipped with a counted reason.

Nothing may crash, hang (a fifo is never opened, symlink loops are not followed) or touch the
files. The expected outcome of each file is stated next to it; the test compares the
update report's per-reason counts and the indexed docnos with those expectations exactly.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from qmdlab.store import Index
from qmdlab.store.breakpoints import find_code_fences

from .conftest import check_consistency, checksums, cli_cmd, cli_env

BIG = 50 * 1024 * 1024


def _build(root: Path, outside: Path) -> tuple[dict[str, str | None], list[str]]:
    """Write the hostile files; returns {name: expected skip reason or None (indexed)} and notes."""
    root.mkdir(parents=True)
    outside.mkdir(parents=True)
    exp: dict[str, str | None] = {}
    notes: list[str] = []

    def put(name: str, data: bytes, reason: str | None) -> None:
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        exp[name] = reason

    put("binary.md", bytes(range(256)) * 64, "binary")
    put("png-named.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + os.urandom(2000), "binary")
    put("latin1.md", "# Café\n\nna\xefve caf\xe9\n".encode("latin-1"), "utf8")
    put("utf16.md", "# Über Straße\n\nUTF-16 kernel notes\n".encode("utf-16"), None)  # BOM + LE
    put("utf16be.md", b"\xfe\xff" + "# Big endian\n\nzebra text\n".encode("utf-16-be"), None)
    put("utf8-bom.md", b"\xef\xbb\xbf# Bom\n\nbom text\n", None)
    put("empty.md", b"", "empty")
    put("whitespace.md", b"  \n\t\n\r\n   ", "empty")
    put("long-line.md", (b"word " * 400_000) + b"tailword\n", None)  # one 2 MB line
    deep = "".join(f"{'#' * (1 + i % 6)} Level {i}\n\ntext {i}\n" for i in range(3000))
    put("deep-headings.md", (deep + "####### seven hashes is no heading\n").encode(), None)
    fence = "# Code\n\nintro\n```python\n" + "x = 1  # code line\n" * 800  # never closed
    put("unterminated-fence.md", fence.encode(), None)
    put("nul-late.md", b"# Late NUL\n\n" + b"a" * 9000 + b"\x00tail\n", None)  # NUL after the first 8 KiB
    with open(root / "huge.md", "wb") as f:  # 50 MB of markdown, never read (size cap)
        f.truncate(BIG)
        f.seek(0)
        f.write(b"# Huge\n\n")
    exp["huge.md"] = "large"
    put("ok.md", b"# Fine\n\nplain pasta note\n", None)

    # links
    (outside / "secret.md").write_text("# Outside\n\nsecret outside text\n")
    os.symlink(outside / "secret.md", root / "escape.md")
    exp["escape.md"] = "symlink"
    os.symlink(outside, root / "escape-dir")  # a directory link out of the collection
    os.symlink("loop-b.md", root / "loop-a.md")
    os.symlink("loop-a.md", root / "loop-b.md")
    exp["loop-a.md"] = exp["loop-b.md"] = "symlink"
    os.symlink("nowhere.md", root / "broken.md")
    exp["broken.md"] = "symlink"
    os.symlink("ok.md", root / "inside-link.md")
    exp["inside-link.md"] = None
    (root / "sub").mkdir()
    os.symlink("..", root / "sub" / "up")  # a directory loop
    (root / "sub" / "x.md").write_text("# X\n\nin sub\n")
    exp["sub/x.md"] = None
    (root / "dir.md").mkdir()  # a directory that matches the mask: not a file, not counted

    # names
    put("new\nline.md", b"# Newline name\n", "name")
    put("tab\tname.md", b"# Tab name\n", "name")
    with open(os.path.join(os.fsencode(root), b"caf\xe9.md"), "wb") as f:  # not UTF-8
        f.write(b"# latin-1 name\n")
    exp["caf\udce9.md"] = "name"
    put("東京 notes.md", "# 東京\n\n東京大学\n".encode(), None)  # unusual but fine
    os.mkfifo(root / "pipe.md")  # opening it would block forever
    exp["pipe.md"] = "unreadable"
    if os.geteuid() != 0:
        put("no-perms.md", b"# Secret\n", "unreadable")
        os.chmod(root / "no-perms.md", 0)
    else:
        notes.append(
            "running as root: chmod 000 does not stop root, so no-perms.md is not part of this run "
            "(test_unreadable_file_is_skipped_not_fatal covers the path by injection)"
        )
    return exp, notes


@pytest.fixture
def hostile(tmp_path):
    root = tmp_path / "coll"
    exp, notes = _build(root, tmp_path / "outside")
    yield root, exp, notes
    for p in root.rglob("*"):  # let pytest clean up
        if not p.is_symlink() and p.is_file():
            os.chmod(p, 0o644)


@pytest.mark.slow
def test_hostile_corpus_each_file_indexed_or_skipped_with_a_reason(tmp_path, hostile):
    root, exp, notes = hostile
    before = checksums(root)
    before_outside = checksums(tmp_path / "outside")
    with Index(tmp_path / "idx") as idx:
        idx.add_collection("h", root)
        rep = idx.update()
        want_skips: dict[str, int] = {}
        for reason in exp.values():
            if reason:
                want_skips[reason] = want_skips.get(reason, 0) + 1
        assert rep.skip_counts() == want_skips
        assert rep.scanned == len(exp) and rep.new + rep.skipped == rep.scanned
        indexed = set(idx.documents()["docno"])
        assert indexed == {f"h/{n}" for n, r in exp.items() if r is None}
        # every skipped path is listed printably with its reason
        listed = dict(rep.skipped_paths)
        assert listed["h/new\\nline.md"] == "name" and listed["h/caf\\xe9.md"] == "name"
        assert all("\n" not in p for p in listed)
        # decoded text is searchable; nothing else leaked in
        from qmdlab.search import bm25_search

        assert [h.docno for h in bm25_search(idx, "über straße")] == ["h/utf16.md"]
        assert [h.docno for h in bm25_search(idx, "zebra")] == ["h/utf16be.md"]
        assert bm25_search(idx, "secret outside") == []
        assert idx.get("h/utf8-bom.md").body == "# Bom\n\nbom text\n"
        # chunks of the odd-but-indexed files keep their invariants
        ch = idx.chunks()
        for docno in ("h/long-line.md", "h/deep-headings.md", "h/unterminated-fence.md"):
            body = idx.get(docno).body
            rows = ch.filter(ch["docno"] == docno).sort("seq")
            assert rows["char_start"][0] == 0 and rows["char_end"][-1] == len(body)
            assert all(s <= e_prev for s, e_prev in zip(rows["char_start"][1:], rows["char_end"][:-1]))
            assert rows["text"].to_list() == [body[s:e] for s, e in zip(rows["char_start"], rows["char_end"])]
            for e in rows["char_end"][:-1]:
                assert not any(fs < e < fe for fs, fe in find_code_fences(body))
        assert ch.filter(ch["docno"] == "h/long-line.md").height > 500
        # a second update changes nothing and still counts the same skips
        rep2 = idx.update()
        assert rep2.new == 0 and rep2.unchanged == rep.new and rep2.skip_counts() == want_skips
    check_consistency(tmp_path / "idx" / "index.sqlite")
    assert checksums(root) == before and checksums(tmp_path / "outside") == before_outside
    for n in notes:
        print(n)


@pytest.mark.slow
def test_hostile_corpus_through_the_cli(tmp_path, hostile):
    root, exp, _ = hostile
    env = cli_env(tmp_path / "home")
    idx = tmp_path / "idx"
    res = subprocess.run(
        cli_cmd(idx, "collection", "add", str(root), "--name", "h", "--no-update"),
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    res = subprocess.run(cli_cmd(idx, "update", "--no-progress"), env=env, capture_output=True, timeout=300)
    out, err = res.stdout.decode("utf-8", "replace"), res.stderr.decode("utf-8", "replace")
    assert res.returncode == 0, err
    assert "Traceback" not in err
    assert "skipped by reason: " in out
    reasons = dict(x.rsplit(" ", 1) for x in out.split("skipped by reason: ")[1].splitlines()[0].split(", "))
    assert {k: int(v) for k, v in reasons.items()} == {
        r: sum(1 for v in exp.values() if v == r) for r in {v for v in exp.values() if v}
    }
    assert "skipped (name): h/caf\\xe9.md" in out
    from click.testing import CliRunner

    from qmdlab.cli import cli

    for q in ('"unterminated', "NEAR(", "kernel*", "^x:y", "über", ""):  # same CLI code, in-process
        r = CliRunner(env={"QMDLAB_HOME": env["QMDLAB_HOME"]}).invoke(cli, ["--index", str(idx), "search", q])
        # an empty query is a usage error (exit 1, as qmd's); every other one runs
        assert r.exit_code == (1 if q == "" else 0), (q, r.output)
        assert r.exception is None or isinstance(r.exception, SystemExit), (q, r.output)
    assert "h/utf16.md" in CliRunner().invoke(cli, ["--index", str(idx), "search", "über"]).output


def test_unreadable_file_is_skipped_not_fatal(tmp_path, monkeypatch):
    """A file whose read fails (permissions, vanished) is skipped as ``unreadable``; a file that
    was indexed before keeps its indexed version. Injected so it also runs as root."""
    root = tmp_path / "c"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha\n")
    (root / "b.md").write_text("# B\n\nbeta\n")
    from qmdlab.store import scan

    real_open = os.open

    def deny(path, *args, **kwargs):  # the scanner opens files with os.open (scan.read_file)
        if Path(os.fsdecode(path)).name in ("b.md", "c.md"):
            raise PermissionError(13, "Permission denied", os.fsdecode(path))
        return real_open(path, *args, **kwargs)

    with Index(tmp_path / "idx") as idx:
        idx.add_collection("c", root)
        assert idx.update().new == 2
        (root / "b.md").write_text("# B\n\nbeta changed\n")
        (root / "c.md").write_text("# C\n\ngamma\n")
        monkeypatch.setattr(scan.os, "open", deny)
        rep = idx.update()
        monkeypatch.undo()
        assert rep.skip_counts() == {"unreadable": 2} and rep.vanished == 0
        assert set(idx.documents()["docno"]) == {"c/a.md", "c/b.md"}
        assert idx.get("c/b.md").body == "# B\n\nbeta\n"  # the old version stays searchable
        rep = idx.update()  # readable again: picked up
        assert rep.changed == 1 and rep.new == 1
        assert idx.get("c/b.md").body == "# B\n\nbeta changed\n"


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root ignores file permissions (chmod 000 is still readable), "
    "so a real unreadable file cannot be made; the injected test covers it",
)
def test_chmod_000_file_is_skipped(tmp_path):
    root = tmp_path / "c"
    root.mkdir()
    (root / "ok.md").write_text("# ok\n")
    p = root / "locked.md"
    p.write_text("# locked\n")
    p.chmod(0)
    try:
        with Index(tmp_path / "idx") as idx:
            idx.add_collection("c", root)
            rep = idx.update()
        assert rep.skip_counts() == {"unreadable": 1} and rep.new == 1
    finally:
        p.chmod(0o644)
