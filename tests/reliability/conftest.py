"""Helpers for the reliability suite: generated corpora, checksums, CLI subprocesses,
a canonical dump of an index and its consistency checks, and the fuzz/crash profiles.

Profiles (``QMDLAB_FUZZ_PROFILE``): ``ci`` (default, what ``make test`` runs: small corpora,
the fewest kills and examples that still prove the property) and ``deep`` (``make fuzz``:
thousands of files, many more kills, ≥ 1000 hypothesis examples per fuzz target).
"""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, settings

PROFILE = os.environ.get("QMDLAB_FUZZ_PROFILE", "ci").strip().lower() or "ci"
if PROFILE not in ("ci", "deep"):
    raise pytest.UsageError(f"QMDLAB_FUZZ_PROFILE={PROFILE!r}: use 'ci' or 'deep'")

#: hypothesis examples per fuzz target
FUZZ_EXAMPLES = {"ci": 40, "deep": 1000}[PROFILE]
settings.register_profile(
    "qmdlab-ci",
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
settings.register_profile(
    "qmdlab-deep",
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)

#: crash harness sizes: files in the generated corpus, SIGKILLs of `update` that must land
#: inside a write transaction (counted from the store's event log, see
#: ``qmdlab.store.testhooks``), and SIGKILLs of `embed` (any point: its transactions last
#: microseconds, so its mid-write crashes come from the deterministic kill points of
#: ``test_kill_points.py``)
CRASH = {
    "ci": {"files": 400, "collections": 3, "midwrite_kills": 20, "embed_kills": 5},
    "deep": {"files": 4000, "collections": 4, "midwrite_kills": 80, "embed_kills": 30},
}[PROFILE]

WORDS = (
    "alpha beta gamma delta rebase merge branch commit pasta sqlite search docker network kernel "
    "module tokyo garden python rust vector index query token chunk fence heading"
).split()


def fuzz_settings(**kw):
    """The active hypothesis settings (profile + overrides)."""
    base = settings.get_profile("qmdlab-deep" if PROFILE == "deep" else "qmdlab-ci")
    return settings(base, **kw)


def make_corpus(root: Path, n: int, collections: int = 1, seed: int = 0) -> list[Path]:
    """``n`` small markdown files spread over ``collections`` folders ``c0 … c{k-1}``; returns the roots."""
    rng = random.Random(seed)
    roots = [root / f"c{i}" for i in range(collections)]
    for i in range(n):
        d = roots[i % collections] / f"d{(i // collections) % 17}"
        d.mkdir(parents=True, exist_ok=True)
        body = [f"# Note {i}", ""]
        for s in range(rng.randint(1, 4)):
            body += [f"## Part {s}", " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 120))), ""]
        if rng.random() < 0.2:
            body = ["---", f"tags: [{rng.choice(WORDS)}]", "---"] + body
        (d / f"n{i:05d}.md").write_text("\n".join(body), encoding="utf-8")
    return roots


def checksums(root: Path) -> dict[str, str]:
    """sha256 of every regular file under ``root`` (symlinks recorded by target, never followed)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(os.fsencode(root)):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, os.fsencode(root)).decode("utf-8", "surrogateescape")
            if os.path.islink(p):
                out[rel] = "link:" + os.readlink(p).decode("utf-8", "surrogateescape")
            elif os.path.isfile(p):
                try:
                    with open(p, "rb") as f:
                        out[rel] = hashlib.sha256(f.read()).hexdigest()
                except PermissionError:
                    st = os.stat(p)
                    out[rel] = f"unreadable:{st.st_size}:{st.st_mtime_ns}"
            else:
                out[rel] = "special"
    return out


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("QMDLAB_INDEX", None)
    env.pop("QMDLAB_DEBUG", None)
    env.update({"QMDLAB_HOME": str(home), "PYTHONUNBUFFERED": "1"}, **extra)
    return env


def cli_cmd(index: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "qmdlab.cli", "--index", str(index), *args]


def run_cli(index: Path, *args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(cli_cmd(index, *args), env=env, capture_output=True, text=True, timeout=timeout)


def connect(db: Path) -> sqlite3.Connection:
    """A plain connection with the FTS helper function registered (as :class:`Index` does)."""
    from qmdlab.store.schema import FTS_FUNCTION
    from qmdlab.terms import space_cjk

    conn = sqlite3.connect(db, timeout=30)
    conn.create_function(FTS_FUNCTION, 1, space_cjk, deterministic=True)
    return conn


def check_consistency(db: Path) -> dict[str, int]:
    """Assert the invariants a crash must never break; returns row counts.

    - ``PRAGMA integrity_check`` is ``ok`` and FTS5's own ``integrity-check`` passes;
    - the FTS rows are exactly the active documents, with the right filepath and body;
    - no orphans: every document's content exists, every chunk's content exists, every vector's chunk exists;
    - every content hash that has a body has its chunks (``seq`` 0 … n-1, no gap).
    """
    conn = connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        conn.execute("INSERT INTO documents_fts(documents_fts) VALUES ('integrity-check')")
        active = {r[0] for r in conn.execute("SELECT id FROM documents WHERE active = 1")}
        fts = {r[0] for r in conn.execute("SELECT rowid FROM documents_fts")}
        assert fts == active, f"FTS rows {len(fts)} != active documents {len(active)}"
        bad = conn.execute(
            "SELECT count(*) FROM documents d JOIN documents_fts f ON f.rowid = d.id JOIN content c ON c.hash = d.hash "
            "WHERE f.filepath IS NOT qmdlab_fts_text(d.collection || '/' || d.path) "
            "OR f.body IS NOT qmdlab_fts_text(c.body) OR f.title IS NOT qmdlab_fts_text(d.title)"
        ).fetchone()[0]
        assert bad == 0, f"{bad} FTS rows disagree with their documents"
        assert (
            conn.execute("SELECT count(*) FROM documents WHERE hash NOT IN (SELECT hash FROM content)").fetchone()[0]
            == 0
        )
        assert (
            conn.execute("SELECT count(*) FROM chunks WHERE hash NOT IN (SELECT hash FROM content)").fetchone()[0] == 0
        )
        assert (
            conn.execute("SELECT count(*) FROM vectors WHERE chunk_id NOT IN (SELECT id FROM chunks)").fetchone()[0]
            == 0
        )
        gaps = conn.execute(
            "SELECT count(*) FROM content c LEFT JOIN (SELECT hash, count(*) n, max(seq) m, min(seq) lo "
            "FROM chunks GROUP BY hash) k ON k.hash = c.hash "
            "WHERE k.n IS NULL OR k.m != k.n - 1 OR k.lo != 0"
        ).fetchone()[0]
        assert gaps == 0, f"{gaps} content rows without a complete chunk sequence"
        return {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("documents", "content", "chunks", "vectors")
        }
    finally:
        conn.close()


def visible_state(db: Path) -> dict[str, list[tuple]]:
    """What a user can observe, independent of row ids: active documents, their content,
    chunks and vectors. (A vanished file leaves an inactive row, which a clean build of the
    same files never has, so inactive rows are compared by :func:`check_consistency` only.)"""
    conn = connect(db)
    try:
        docs = conn.execute(
            "SELECT collection, path, title, hash, mtime, size, metadata, tags, date FROM documents "
            "WHERE active = 1 ORDER BY 1, 2"
        ).fetchall()
        live = "(SELECT hash FROM documents WHERE active = 1)"
        content = conn.execute(f"SELECT hash, body FROM content WHERE hash IN {live} ORDER BY 1").fetchall()
        chunks = conn.execute(
            "SELECT hash, seq, char_start, char_end, line_start, line_end, heading_path FROM chunks "
            f"WHERE hash IN {live} ORDER BY 1, 2"
        ).fetchall()
        vectors = conn.execute(
            "SELECT k.hash, k.seq, v.fingerprint, v.dim, v.blob FROM vectors v JOIN chunks k ON k.id = v.chunk_id "
            f"WHERE k.hash IN {live} ORDER BY 1, 2, 3"
        ).fetchall()
        return {"documents": docs, "content": content, "chunks": chunks, "vectors": vectors}
    finally:
        conn.close()


# -- crash evidence: the store's event log and the WAL file ----------------------------------
def read_events(path: Path) -> list[tuple[str, str]]:
    """``(kind, label)`` lines of a ``$QMDLAB_TEST_EVENTS`` log (see :mod:`qmdlab.store.testhooks`)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="ascii").splitlines():
        parts = line.split()
        if len(parts) == 3:  # a torn last line cannot happen (one os.write per line), but be strict
            out.append((parts[0], parts[1]))
    return out


def kill_landed(events: list[tuple[str, str]]) -> str:
    """Where a SIGKILL landed, from the event log of the killed process.

    ``start-up`` (no transaction had begun: interpreter start, imports, scanning),
    ``mid-write`` (the last event is ``begin`` or ``write``: a transaction was open and its
    ``COMMIT`` not yet issued), ``at-commit`` (``COMMIT`` issued, outcome unknown: not counted
    as mid-write) or ``between`` (after a commit or rollback: between transactions or after
    the last one).

    >>> kill_landed([]), kill_landed([("begin", "txn"), ("write", "update.file")])
    ('start-up', 'mid-write')
    >>> kill_landed([("begin", "txn"), ("commit-start", "txn")]), kill_landed([("commit", "txn")])
    ('at-commit', 'between')
    """
    if not events:
        return "start-up"
    last = events[-1][0]
    if last in ("begin", "write"):
        return "mid-write"
    return "at-commit" if last == "commit-start" else "between"


class WalState(NamedTuple):
    """Frames of the current WAL generation: committed and after the last commit (uncommitted)."""

    committed: int
    uncommitted: int


def wal_frames(db: Path) -> WalState:
    """Count the frames in ``<db>-wal`` that belong to the current WAL generation.

    Read right after a SIGKILL, before any connection opens the database (recovery would
    discard them). A frame belongs to the generation when its salts equal the header's
    (frames left over from before a WAL reset carry older salts); a frame with a non-zero
    "database size" field is a commit record. Frames after the last commit record were
    written by a transaction that never committed. (Checksums are not verified: a torn last
    frame still counts as uncommitted, which it is.)
    """
    wal = Path(str(db) + "-wal")
    if not wal.exists():
        return WalState(0, 0)
    data = wal.read_bytes()
    if len(data) < 32:
        return WalState(0, 0)
    magic, _version, page_size, _seq, salt1, salt2 = struct.unpack(">IIIIII", data[:24])
    if magic not in (0x377F0682, 0x377F0683):
        return WalState(0, 0)
    frame = 24 + page_size
    last_commit, n = 0, 0
    off = 32
    while off + 24 <= len(data):
        _page, db_size, s1, s2 = struct.unpack(">IIII", data[off : off + 16])
        if (s1, s2) != (salt1, salt2):
            break
        n += 1
        if db_size:
            last_commit = n
        off += frame
    return WalState(last_commit, n - last_commit)


@pytest.fixture
def rel_home(tmp_path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home
