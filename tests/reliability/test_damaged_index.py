"""A damaged index: every verb answers with one line (how to rebuild it), and no writer writes.

The damage is real bytes in the database file: 50 seeded bit flips (what a failing disk does),
and zeroed table pages (what SQLite reports as "database disk image is malformed").
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.store import Index

from .conftest import cli_env, make_corpus

READERS = [
    ("search", "alpha"),
    ("ls",),
    ("ls", "c0"),
    ("get", "c0/d0/n00000.md"),
    ("multi-get", "c0/**/*.md"),
    ("status",),
    ("query", "--preset", "fake", "alpha beta"),
    ("vsearch", "--preset", "fake", "alpha"),
]
WRITERS = [("update", "--no-progress"), ("embed", "--preset", "fake", "-f", "--no-progress"), ("cleanup",)]
MESSAGE = "not a usable qmdlab index"


def _build(tmp_path: Path) -> Path:
    (root,) = make_corpus(tmp_path / "kb", 60)
    index = tmp_path / "idx"
    with Index.open(str(index)) as idx:
        idx.add_collection("c0", root)
        idx.update()
    res = CliRunner().invoke(cli, ["--index", str(index), "embed", "--preset", "fake", "--no-progress"])
    assert res.exit_code == 0, res.output
    conn = sqlite3.connect(index / "index.sqlite")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return index


def _flip_bits(db: Path, n: int, seed: int) -> None:
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    rng = random.Random(seed)
    for _ in range(n):
        at = rng.randrange(page, len(data))  # the header page stays, so the file still opens as SQLite
        data[at] ^= 1 << rng.randrange(8)
    db.write_bytes(bytes(data))


def _zero_pages(db: Path, tables: tuple[str, ...]) -> None:
    conn = sqlite3.connect(db)
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    roots = [
        r[0]
        for r in conn.execute(
            f"SELECT rootpage FROM sqlite_master WHERE name IN ({','.join('?' * len(tables))})", tables
        )
    ]
    conn.close()
    data = bytearray(db.read_bytes())
    for r in roots:
        data[(r - 1) * page : r * page] = b"\x5a" * page
    db.write_bytes(bytes(data))


def _damaged(db: Path) -> bool:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("PRAGMA quick_check").fetchone()[0] != "ok"
    except sqlite3.DatabaseError:
        return True
    finally:
        conn.close()


def _run(index: Path, args: tuple[str, ...]):
    return CliRunner().invoke(cli, ["--index", str(index), *args])


def _one_line_error(res) -> bool:
    return (
        res.exit_code == 1
        and isinstance(res.exception, SystemExit)
        and res.stderr.count("\n") == 1
        and MESSAGE in res.stderr
        and "`qmdlab update` and `qmdlab embed`" in res.stderr
    )


@pytest.fixture
def env(tmp_path, monkeypatch):
    for k, v in cli_env(tmp_path / "home").items():
        monkeypatch.setenv(k, v)
    return tmp_path


@pytest.mark.parametrize("damage", ["bitflips", "zeroed-pages"])
def test_every_verb_answers_a_damaged_index_with_one_line_and_no_writer_writes(env, damage):
    index = _build(env)
    db = index / "index.sqlite"
    if damage == "bitflips":
        _flip_bits(db, 50, seed=3)
    else:
        _zero_pages(db, ("content", "documents_fts_data", "vectors"))
    assert _damaged(db)  # the precondition: SQLite itself sees the damage
    for args in READERS:
        res = _run(index, args)
        assert res.exit_code == 0 or _one_line_error(res), (args, res.stderr, res.exception)
    before = db.read_bytes()
    (env / "kb" / "c0" / "d0" / "n00000.md").write_text("# changed\n\nnew words here\n")  # update has work to do
    for args in WRITERS:
        res = _run(index, args)
        assert _one_line_error(res), (args, res.output, res.exception)
        assert db.read_bytes() == before, args  # refused before writing anything


def test_zeroed_content_pages_fail_search_and_get_with_the_rebuild_line(env):
    index = _build(env)
    _zero_pages(index / "index.sqlite", ("content", "documents_fts_data"))
    for args in (("search", "alpha"), ("get", "c0/d0/n00000.md"), ("query", "--preset", "fake", "alpha")):
        res = _run(index, args)
        assert _one_line_error(res), (args, res.output, res.exception)


def test_the_rebuild_the_message_gives_works(env):
    index = _build(env)
    db = index / "index.sqlite"
    _zero_pages(db, ("content",))
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        p.unlink(missing_ok=True)
    assert _run(index, ("update", "--no-progress")).exit_code == 0
    assert _run(index, ("embed", "--preset", "fake", "--no-progress")).exit_code == 0
    res = _run(index, ("search", "--json", "alpha"))
    assert res.exit_code == 0 and json.loads(res.stdout)


def test_stdio_mcp_server_on_a_damaged_index_ends_with_one_line(env):
    index = _build(env)
    _zero_pages(index / "index.sqlite", ("documents",))
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    proc = subprocess.run(
        [sys.executable, "-m", "qmdlab.cli", "--index", str(index), "mcp"],
        input=json.dumps(init) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(env / "home", QMDLAB_PRESET="fake"),
    )
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    if proc.returncode == 1:
        assert MESSAGE in proc.stderr and proc.stderr.strip().count("\n") == 0, proc.stderr


def test_a_wal_deleted_under_a_running_reader_gives_one_line_or_an_answer(env):
    index = _build(env)
    db = index / "index.sqlite"
    holder = Index.open(str(index))  # a long-running process (a server) keeps the index open
    try:
        holder.documents()
        with holder.transaction() as c:  # a commit that lives in the WAL until a checkpoint
            c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('probe', 'x')")
        wal = Path(f"{db}-wal")
        assert wal.exists()
        wal.unlink()
        for args in READERS + [("update", "--no-progress")]:
            res = _run(index, args)
            # the advice is to stop the process that holds the index, never to remove the index
            assert res.exit_code == 0 or _stop_the_process(res), (args, res.stderr, res.exception)
    finally:
        holder.close()
    # stopped, the holder wrote its last commit back: everything answers and nothing was lost
    for args in READERS + [("update", "--no-progress")]:
        res = _run(index, args)
        assert res.exit_code == 0, (args, res.stderr)
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE key = 'probe'").fetchone() == ("x",)
    conn.close()


def _stop_the_process(res) -> bool:
    return (
        res.exit_code == 1
        and res.stderr.count("\n") == 1
        and "stop that process" in res.stderr
        and "qmdlab mcp --stop" in res.stderr
        and "remove" not in res.stderr.replace("Do not remove the index", "")
    )


# -- damage confined to an index b-tree: `PRAGMA quick_check` passes it, integrity_check does not --
def _small(tmp_path: Path, n: int = 3) -> tuple[Path, Path]:
    """An embedded index of ``n`` notes: every SQLite index of it fits in one page."""
    root = tmp_path / "kb"
    root.mkdir()
    for i in range(n):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nalpha beta {i}\n", encoding="utf-8")
    index = tmp_path / "idx"
    with Index.open(str(index)) as idx:
        idx.add_collection("c0", root)
        idx.update()
    res = _run(index, ("embed", "--preset", "fake", "--no-progress"))
    assert res.exit_code == 0, res.output
    conn = sqlite3.connect(index / "index.sqlite")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return root, index


def _empty_index_btree(db: Path, name: str) -> None:
    """Make the (one-page) SQLite index ``name`` an empty leaf: the table keeps its rows, the index
    forgets them — the damage the probe made, which ``quick_check`` does not see."""
    conn = sqlite3.connect(db)
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    conn.close()
    data = bytearray(db.read_bytes())
    at = (root - 1) * page
    assert data[at] == 0x0A, "the index must fit in one leaf page for this damage"
    data[at : at + page] = bytes(page)
    data[at] = 0x0A  # an index leaf page with no cells
    data[at + 5 : at + 7] = (page % 65536).to_bytes(2, "big")  # cell content starts at the page's end
    db.write_bytes(bytes(data))


def _checks(db: Path) -> tuple[str, str]:
    conn = sqlite3.connect(db)
    try:
        return (
            conn.execute("PRAGMA quick_check").fetchone()[0],
            conn.execute("PRAGMA integrity_check(1)").fetchone()[0],
        )
    finally:
        conn.close()


def test_writers_refuse_an_index_whose_damage_quick_check_misses(env):
    """The probe: damage confined to SQLite's indexes passed ``quick_check``, so ``embed -f`` stored a
    duplicate (chunk_id, fingerprint) row, ``status`` called the index healthy and ``collection add`` /
    ``context add`` wrote into it. Every writer runs ``integrity_check`` before its first write."""
    root, index = _small(env)
    db = index / "index.sqlite"
    conn = sqlite3.connect(db)
    (vec_index,) = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'vectors'"
    ).fetchone()
    vectors_before = conn.execute("SELECT count(*) FROM vectors NOT INDEXED").fetchone()[0]
    conn.close()
    _empty_index_btree(db, vec_index)
    quick, integrity = _checks(db)
    assert quick == "ok" and integrity != "ok", (quick, integrity)  # the precondition: only integrity_check sees it
    config = (index / "collections.yaml").read_bytes()
    before = db.read_bytes()
    other = env / "other"
    other.mkdir()
    (other / "x.md").write_text("# x\n", encoding="utf-8")
    for args in (
        ("embed", "--preset", "fake", "-f", "--no-progress"),
        ("collection", "add", str(other), "--name", "other", "--no-update"),
        ("context", "add", "c0", "a context"),
        ("status",),
    ):
        res = _run(index, args)
        assert _one_line_error(res), (args, res.output, res.exception)
        assert "integrity check" in res.stderr, res.stderr
    assert db.read_bytes() == before and (index / "collections.yaml").read_bytes() == config
    conn = sqlite3.connect(db)
    dupes = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM vectors NOT INDEXED GROUP BY chunk_id, fingerprint HAVING count(*) > 1)"
    ).fetchone()[0]
    assert dupes == 0 and conn.execute("SELECT count(*) FROM vectors NOT INDEXED").fetchone()[0] == vectors_before
    conn.close()


def test_a_lookup_through_a_damaged_index_names_the_damage_not_a_near_miss(env):
    """``multi-get``/``get`` of a listed document whose index entry is gone answered "no document X;
    did you mean X"; it gives the rebuild line."""
    _, index = _small(env)
    db = index / "index.sqlite"
    _empty_index_btree(db, "sqlite_autoindex_documents_1")  # UNIQUE (collection, path)
    assert _checks(db)[0] == "ok"
    for args in (("multi-get", "c0/n1.md,c0/n2.md"), ("get", "c0/n1.md")):
        res = _run(index, args)
        assert "did you mean" not in res.output + res.stderr, (args, res.output, res.stderr)
        assert _one_line_error(res), (args, res.output, res.stderr)
