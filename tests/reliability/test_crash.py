"""Crash safety: SIGKILL ``qmdlab update`` and ``qmdlab embed`` and count only kills that land mid-write.

One harness run (sizes from the profile in ``conftest.CRASH``):

1. A generated corpus of small markdown files in several collections (each collection is one
   ``update`` transaction).
2. Kill ``update`` again and again. Before each attempt the harness edits the corpus the way a
   user would (rewrites, new files, deletions, renames) so every run has work. The child runs
   with ``$QMDLAB_TEST_EVENTS`` (:mod:`qmdlab.store.testhooks`): the store appends ``begin``,
   ``write``, ``commit-start`` and ``commit`` lines, unbuffered, so after the kill the log says
   where it landed (:func:`conftest.kill_landed`). The kill comes either at a random time or
   right after a random number of ``write`` events, plus a small random delay.
3. Only kills whose last event is ``begin``/``write`` (a transaction open, ``COMMIT`` not yet
   issued) count as *mid-write*; the CI profile needs >= 20 of them, ``make fuzz`` >= 80. The
   WAL file is also read right after each kill (:func:`conftest.wal_frames`): frames written by
   the transaction that never committed are counted and reported.
4. After *every* kill: the collections whose transactions committed (``commit update:<name>``
   events) match the files on disk, and every later collection is exactly as before the run
   (the open transaction was rolled back); the DB opens as an :class:`~qmdlab.store.Index`,
   ``PRAGMA integrity_check`` is ok, FTS rows equal the active documents (content included), no
   orphan rows, and every user file is byte-identical to what the harness last wrote (sha256).
5. Kill ``embed --preset fake`` (one transaction per batch of 4): the stored vectors grow by
   exactly the committed batches. Its transactions last microseconds, so random kills rarely land
   inside one; ``test_kill_points.py`` kills it there deterministically.
6. Reruns of ``update`` and ``embed`` complete, and the index then equals a clean build of
   the same files in a fresh index (documents, content, chunks, vectors).
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli

from .conftest import (
    CRASH,
    PROFILE,
    check_consistency,
    checksums,
    cli_cmd,
    cli_env,
    kill_landed,
    make_corpus,
    read_events,
    visible_state,
    wal_frames,
)

# the deep profile (`make fuzz`: 4,000 files, 80 mid-write kills) runs longer than the suite's 900 s limit
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600 if PROFILE == "deep" else 900)]


def _query(db: Path, sql: str, args: tuple = ()) -> list[tuple]:
    """Rows of a read-only query ([] when the database or schema is not there yet)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return []


def _n_writes(events_path: Path) -> int:
    """``write`` events logged so far by the running child."""
    try:
        return events_path.read_bytes().count(b"write ")
    except FileNotFoundError:
        return 0


class Kill:
    """What one attempt did: whether SIGKILL hit a live process, where it landed, WAL evidence."""

    def __init__(self, alive: bool, took: float, how: str, landed: str, events: list, wal_uncommitted: int):
        self.alive, self.took, self.how, self.landed = alive, took, how, landed
        self.events, self.wal_uncommitted = events, wal_uncommitted

    @property
    def commits(self) -> int:
        return sum(1 for kind, _ in self.events if kind == "commit")

    def committed(self, prefix: str) -> set[str]:
        """Names of the transactions labelled ``<prefix><name>`` that committed (``update:c1`` → ``c1``).

        By label, not by count: ``update`` also commits bookkeeping transactions (the stat
        digest of an unchanged collection, a re-chunk) and skips an unchanged collection
        without any, so the n-th commit is not the n-th collection."""
        return {label[len(prefix) :] for kind, label in self.events if kind == "commit" and label.startswith(prefix)}

    def at_commit(self, prefix: str) -> str | None:
        """The name of the transaction whose ``COMMIT`` was in flight when the kill landed."""
        if self.landed != "at-commit" or not self.events[-1][1].startswith(prefix):
            return None
        return self.events[-1][1][len(prefix) :]


def _kill_run(
    args: list[str],
    env: dict,
    rng: random.Random,
    *,
    db: Path,
    events_path: Path,
    typical_s: float,
    typical_writes: int,
) -> Kill:
    """Start a CLI run with the event log on, SIGKILL it, and classify where the kill landed."""
    events_path.unlink(missing_ok=True)
    proc = subprocess.Popen(
        args, env={**env, "QMDLAB_TEST_EVENTS": str(events_path)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    t0 = time.monotonic()
    if rng.random() < 0.3:
        how = "time"
        deadline = t0 + rng.uniform(0.05, 1.05 * typical_s)
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.005)
    else:
        how = "events"
        target = rng.randint(1, max(1, typical_writes))
        limit = t0 + 3 * typical_s + 10
        while proc.poll() is None and time.monotonic() < limit:
            if _n_writes(events_path) >= target:
                time.sleep(rng.uniform(0.0, 0.02))
                break
            time.sleep(0.002)
    alive = proc.poll() is None
    if alive:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    proc.stderr.close()
    if not alive:
        assert proc.returncode == 0, f"run failed on its own (not killed): {err[-2000:]}"
    assert "Traceback" not in err and "database is locked" not in err, err[-2000:]
    events = read_events(events_path)
    landed = kill_landed(events) if alive else "finished"
    wal = wal_frames(db) if alive else None  # before anything opens the database
    return Kill(alive, time.monotonic() - t0, how, landed, events, wal.uncommitted if wal else 0)


def _edit_corpus(roots: list[Path], rng: random.Random, n_new: list[int]) -> None:
    """What a user does between runs: rewrite, add, delete and rename a few files."""
    files = sorted(p for r in roots for p in r.rglob("*.md"))
    for p in rng.sample(files, k=min(len(files), 8)):
        p.write_text(p.read_text(encoding="utf-8") + f"\nedited {rng.random()}\n", encoding="utf-8")
    for _ in range(3):
        n_new[0] += 1
        r = rng.choice(roots)
        (r / f"new{n_new[0]:04d}.md").write_text(
            f"# New {n_new[0]}\n\nfresh pasta rebase text {rng.random()}\n", encoding="utf-8"
        )
    victims = rng.sample(files, k=2)
    victims[0].unlink()
    victims[1].rename(victims[1].with_name("moved-" + victims[1].name))


def _inproc(index: Path, *args: str) -> str:
    """A run that is not killed goes through the same CLI code in-process (no interpreter start)."""
    res = CliRunner().invoke(cli, ["--index", str(index), *args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def _documents_of(db: Path, coll: str) -> list[tuple]:
    return _query(
        db, "SELECT path, hash, mtime, size, active FROM documents WHERE collection = ? ORDER BY path", (coll,)
    )


def _active_paths(db: Path, coll: str) -> set[str]:
    return {r[0] for r in _query(db, "SELECT path FROM documents WHERE collection = ? AND active = 1", (coll,))}


def _disk_paths(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*.md")}


def test_sigkill_update_and_embed_keeps_the_index_consistent(tmp_path, monkeypatch):
    rng = random.Random(20260410 if PROFILE == "ci" else None)
    home = tmp_path / "home"
    env = cli_env(home)
    monkeypatch.setenv("QMDLAB_HOME", str(home))
    corpus = tmp_path / "corpus"
    roots = make_corpus(corpus, CRASH["files"], CRASH["collections"], seed=7)
    idx = tmp_path / "idx"
    db = idx / "index.sqlite"
    events_path = tmp_path / "events.log"
    for r in roots:
        _inproc(idx, "collection", "add", str(r), "--name", r.name, "--no-update")

    # how long a run takes on this (shared, possibly busy) machine: interpreter start + the work
    t0 = time.monotonic()
    subprocess.run(cli_cmd(idx, "--help"), env=env, capture_output=True, check=True)
    startup_s = time.monotonic() - t0
    t0 = time.monotonic()
    _inproc(idx, "update", "--no-progress")
    update_s = startup_s + time.monotonic() - t0
    t0 = time.monotonic()
    _inproc(idx, "embed", "--preset", "fake", "--batch-size", "4", "--no-progress")
    embed_s = startup_s + time.monotonic() - t0

    landed: dict[str, Counter] = {"update": Counter(), "embed": Counter()}
    how_mid: Counter = Counter()
    wal_mid = 0  # mid-write kills that left uncommitted frames in the WAL
    n_new = [0]
    attempts = 0
    writes = 10
    while landed["update"]["mid-write"] < CRASH["midwrite_kills"]:
        attempts += 1
        # about 2 in 5 kills land mid-write (the rest between transactions, at start-up, or after the
        # run finished): the cap leaves room for a slow or busy machine without hiding a harness that
        # never lands one
        assert attempts <= 6 * CRASH["midwrite_kills"] + 10, f"too few kills landed mid-write: {dict(landed['update'])}"
        _edit_corpus(roots, rng, n_new)
        if rng.random() < 0.3:  # sometimes a big change: a whole batch of new files
            extra = make_corpus(tmp_path / "extra", 60, 1, seed=attempts)[0]
            dest = rng.choice(roots) / f"batch{attempts}"
            extra.rename(dest)
        before = checksums(corpus)
        snapshot = {r.name: _documents_of(db, r.name) for r in roots}
        k = _kill_run(
            cli_cmd(idx, "update", "--no-progress"),
            env,
            rng,
            db=db,
            events_path=events_path,
            typical_s=update_s,
            typical_writes=writes,
        )
        landed["update"][k.landed] += 1
        if k.landed == "mid-write":
            how_mid[k.how] += 1
            wal_mid += k.wal_uncommitted > 0
        if not k.alive:  # it finished first: aim earlier next time (runs after edits are shorter)
            update_s = k.took
            writes = max(1, sum(1 for kind, _ in k.events if kind == "write"))
        assert checksums(corpus) == before, "qmdlab changed a user file"
        # atomicity per collection: committed transactions are complete, the rest untouched; a kill
        # at COMMIT (after `commit-start`, before `commit`) may have gone either way, never half
        done = {r.name for r in roots} if not k.alive else k.committed("update:")
        for r in roots:
            complete = _active_paths(db, r.name) == _disk_paths(r)
            untouched = _documents_of(db, r.name) == snapshot[r.name]
            if r.name in done:
                assert complete, f"committed collection {r.name} is incomplete"
            elif r.name == k.at_commit("update:"):
                assert complete or untouched, f"collection {r.name} half-committed at COMMIT"
            else:
                assert untouched, f"collection {r.name} changed although its transaction never committed ({k.landed})"
        check_consistency(db)
        from qmdlab.store import Index

        with Index(idx) as opened:  # opens without error, reads work
            opened.documents()

    # embed: the fake preset's fingerprint is fixed, so new and edited files create the chunks
    # that still need vectors.
    _inproc(idx, "update", "--no-progress")
    embed_kills = 0
    e_attempts = 0
    # what `embed` will embed: chunks of *active* documents without a vector. Chunks of deleted or
    # replaced documents stay in the table until they are collected, and counting them would make a
    # run look longer than it is (a kill aimed past its last write, and no new work to kill).
    todo_sql = (
        "SELECT count(DISTINCT k.id) FROM documents d JOIN chunks k ON k.hash = d.hash WHERE d.active = 1 "
        "AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.chunk_id = k.id)"
    )
    while embed_kills < CRASH["embed_kills"]:
        e_attempts += 1
        # runs after the first are short (tens of chunks), so many finish before the kill: room for that
        assert e_attempts <= 10 * CRASH["embed_kills"], f"too few embed kills: {embed_kills} ({dict(landed['embed'])})"
        if _query(db, todo_sql)[0][0] < 40:
            # little left to embed: give the next run real work (new, changed files)
            extra = make_corpus(tmp_path / "extra", 120, 1, seed=1000 + e_attempts)[0]
            extra.rename(rng.choice(roots) / f"ebatch{e_attempts}")
            _edit_corpus(roots, rng, n_new)
            _inproc(idx, "update", "--no-progress")
        before = checksums(corpus)
        n_before = _query(db, "SELECT count(*) FROM vectors")[0][0]
        todo = _query(db, todo_sql)[0][0]
        k = _kill_run(
            cli_cmd(idx, "embed", "--preset", "fake", "--batch-size", "4", "--no-progress"),
            env,
            rng,
            db=db,
            events_path=events_path,
            typical_s=embed_s,
            typical_writes=max(1, todo // 4),
        )
        embed_kills += k.alive
        landed["embed"][k.landed] += 1
        if not k.alive:  # it finished first: aim earlier next time
            embed_s = k.took
        assert checksums(corpus) == before, "qmdlab changed a user file"
        grown = _query(db, "SELECT count(*) FROM vectors")[0][0] - n_before
        if k.alive:  # exactly the committed batches of 4 are stored (the last one may be shorter);
            # a kill at COMMIT may or may not have committed that one more batch
            commits = {k.commits} | ({k.commits + 1} if k.landed == "at-commit" else set())
            ok = [c for c in commits if (grown == 0 if c == 0 else 4 * (c - 1) < grown <= 4 * c)]
            assert ok, f"{grown} vectors stored after {k.commits} committed batches ({k.landed})"
        check_consistency(db)

    # reruns complete ...
    before = checksums(corpus)
    for args in (("update", "--no-progress"), ("embed", "--preset", "fake", "--no-progress")):
        res = subprocess.run(cli_cmd(idx, *args), env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    counts = check_consistency(db)
    # ... and equal a clean build of the same files
    clean = tmp_path / "clean"
    for r in roots:
        _inproc(clean, "collection", "add", str(r), "--name", r.name, "--no-update")
    _inproc(clean, "update", "--no-progress")
    _inproc(clean, "embed", "--preset", "fake", "--no-progress")
    got, want = visible_state(db), visible_state(clean / "index.sqlite")
    for table in want:
        assert got[table] == want[table], f"{table} differs from a clean build"
    assert len(want["documents"]) >= CRASH["files"] and len(want["vectors"]) == len(want["chunks"])
    assert checksums(corpus) == before
    assert landed["update"]["mid-write"] >= CRASH["midwrite_kills"]
    print(
        f"\ncrash harness ({PROFILE}): update: {attempts} attempts, kills landed {dict(landed['update'])} "
        f"(mid-write by {dict(how_mid)}; {wal_mid} of them left uncommitted WAL frames); "
        f"embed: {e_attempts} attempts, {dict(landed['embed'])}; final index {counts['documents']} document rows, "
        f"{counts['chunks']} chunks, {counts['vectors']} vectors"
    )
