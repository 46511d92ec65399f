"""Crash safety: SIGKILL ``qmdlab update`` and ``qmdlab embed`` at random points.

One harness run (sizes from the profile in ``conftest.CRASH``; the CI profile makes ≥ 20 real
kills, ``QMDLAB_FUZZ_PROFILE=deep`` makes 80 on 4,000 files):

1. A generated corpus of small markdown files in several collections (each collection is one
   ``update`` transaction, so kills land before, between and inside commits).
2. Kill ``update`` again and again. Before each attempt the harness edits the corpus the way a
   user would (rewrites, new files, deletions, renames) so every run has work. The kill comes
   either at a random time or right after a random amount of committed progress (watched
   through a read-only connection), then a random extra delay.
3. Kill ``embed --preset fake`` (small batches: one transaction each) the same way.
4. After *every* kill: the DB opens as an :class:`~qmdlab.store.Index`, ``PRAGMA
   integrity_check`` is ok, FTS rows equal the active documents (content included), no orphan
   rows, and every user file is byte-identical to what the harness last wrote (sha256).
5. Reruns of ``update`` and ``embed`` complete, and the index then equals a clean build of
   the same files in a fresh index (documents, content, chunks, vectors).

A "kill" is only counted when the process was still running when SIGKILL arrived.
"""
from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from click.testing import CliRunner

from qmdlab.cli import cli

from .conftest import CRASH, PROFILE, check_consistency, checksums, cli_cmd, cli_env, make_corpus, visible_state

pytestmark = pytest.mark.slow


def _progress(db: Path, sql: str) -> float:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return conn.execute(sql).fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return -1  # not created yet / schema not there yet


def _kill_run(args: list[str], env: dict, rng: random.Random, *, db: Path, progress_sql: str,
              typical_s: float) -> tuple[bool, float, str]:
    """Start a CLI run and SIGKILL it; returns (killed while running, delay, how the point was picked)."""
    start_progress = _progress(db, progress_sql)
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    if rng.random() < 0.5:
        how = "time"
        deadline = t0 + rng.uniform(0.05, 1.05 * typical_s)
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
    else:
        how = "progress"
        extra = rng.uniform(0.0, min(0.25, typical_s / 4))
        limit = t0 + 3 * typical_s + 5
        while proc.poll() is None and time.monotonic() < limit:
            if _progress(db, progress_sql) != start_progress:
                time.sleep(extra)
                break
            time.sleep(0.01)
    alive = proc.poll() is None
    if alive:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    proc.stderr.close()
    if not alive:
        assert proc.returncode == 0, f"run failed on its own (not killed): {err[-2000:]}"
    assert "Traceback" not in err and "database is locked" not in err, err[-2000:]
    return alive, time.monotonic() - t0, how


def _edit_corpus(roots: list[Path], rng: random.Random, n_new: list[int]) -> None:
    """What a user does between runs: rewrite, add, delete and rename a few files."""
    files = sorted(p for r in roots for p in r.rglob("*.md"))
    for p in rng.sample(files, k=min(len(files), 8)):
        p.write_text(p.read_text(encoding="utf-8") + f"\nedited {rng.random()}\n", encoding="utf-8")
    for _ in range(3):
        n_new[0] += 1
        r = rng.choice(roots)
        (r / f"new{n_new[0]:04d}.md").write_text(f"# New {n_new[0]}\n\nfresh pasta rebase text {rng.random()}\n",
                                                 encoding="utf-8")
    victims = rng.sample(files, k=2)
    victims[0].unlink()
    victims[1].rename(victims[1].with_name("moved-" + victims[1].name))


def _inproc(index: Path, *args: str) -> str:
    """A run that is not killed goes through the same CLI code in-process (no interpreter start)."""
    res = CliRunner().invoke(cli, ["--index", str(index), *args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def test_sigkill_update_and_embed_keeps_the_index_consistent(tmp_path, monkeypatch):
    rng = random.Random(20260410 if PROFILE == "ci" else None)
    home = tmp_path / "home"
    env = cli_env(home)
    monkeypatch.setenv("QMDLAB_HOME", str(home))
    corpus = tmp_path / "corpus"
    roots = make_corpus(corpus, CRASH["files"], CRASH["collections"], seed=7)
    idx = tmp_path / "idx"
    db = idx / "index.sqlite"
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

    kills = {"update": 0, "embed": 0}
    attempts = {"update": 0, "embed": 0}
    n_new = [0]
    docs_sql = "SELECT total(mtime) + count(*) FROM documents"  # changes with every committed collection
    # update: each attempt has work because the corpus was just edited
    while kills["update"] < CRASH["update_kills"]:
        attempts["update"] += 1
        assert attempts["update"] <= 4 * CRASH["update_kills"], f"too few kills landed: {kills}"
        _edit_corpus(roots, rng, n_new)
        if rng.random() < 0.3:  # sometimes a big change: a whole batch of new files
            extra = make_corpus(tmp_path / "extra", 60, 1, seed=attempts["update"])[0]
            dest = rng.choice(roots) / f"batch{attempts['update']}"
            extra.rename(dest)
        before = checksums(corpus)
        killed, took, _ = _kill_run(cli_cmd(idx, "update", "--no-progress"), env, rng, db=db,
                                    progress_sql=docs_sql, typical_s=update_s)
        kills["update"] += killed
        if not killed:  # it finished first: aim earlier next time (runs after edits are shorter)
            update_s = took
        assert checksums(corpus) == before, "qmdlab changed a user file"
        check_consistency(db)
        from qmdlab.store import Index

        with Index(idx) as opened:  # opens without error, reads work
            opened.documents()

    # embed: the fake preset's fingerprint is fixed, so new and edited files create the chunks
    # that still need vectors.
    vec_sql = "SELECT count(*) FROM vectors"
    _inproc(idx, "update", "--no-progress")
    while kills["embed"] < CRASH["embed_kills"]:
        attempts["embed"] += 1
        assert attempts["embed"] <= 4 * CRASH["embed_kills"], f"too few kills landed: {kills}"
        if _progress(db, "SELECT count(*) FROM chunks k WHERE NOT EXISTS "
                         "(SELECT 1 FROM vectors v WHERE v.chunk_id = k.id)") < 40:
            # little left to embed: give the next run real work (new, changed files)
            extra = make_corpus(tmp_path / "extra", 120, 1, seed=1000 + attempts["embed"])[0]
            extra.rename(rng.choice(roots) / f"ebatch{attempts['embed']}")
            _edit_corpus(roots, rng, n_new)
            _inproc(idx, "update", "--no-progress")
        before = checksums(corpus)
        killed, took, _ = _kill_run(cli_cmd(idx, "embed", "--preset", "fake", "--batch-size", "4",
                                            "--no-progress"), env, rng, db=db, progress_sql=vec_sql,
                                    typical_s=embed_s)
        kills["embed"] += killed
        if not killed:  # it finished first: aim earlier next time
            embed_s = took
        assert checksums(corpus) == before, "qmdlab changed a user file"
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
    assert kills["update"] + kills["embed"] >= 20
    print(f"\ncrash harness ({PROFILE}): {kills['update']} update kills in {attempts['update']} attempts, "
          f"{kills['embed']} embed kills in {attempts['embed']} attempts; final index "
          f"{counts['documents']} document rows, {counts['chunks']} chunks, {counts['vectors']} vectors")
