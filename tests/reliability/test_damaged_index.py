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
            assert res.exit_code == 0 or _one_line_error(res), (args, res.stderr, res.exception)
    finally:
        holder.close()
