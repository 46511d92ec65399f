"""Deterministic crashes *inside* a transaction: ``$QMDLAB_TEST_KILL_AT=<label>:<n>``.

The store SIGKILLs itself the n-th time it passes a kill point (between two statements of
one write transaction, :mod:`qmdlab.store.testhooks`). After each crash the index opens, is
consistent, holds exactly what it held before the transaction began (nothing of the open
transaction is visible), and a re-run completes and equals a clean build.
"""

from __future__ import annotations

import signal
import subprocess

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.store.testhooks import parse_kill_at

from .conftest import (
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


def _inproc(index, *args: str) -> str:
    res = CliRunner().invoke(cli, ["--index", str(index), *args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def _crash(index, env, events, kill_at: str, *args: str) -> subprocess.CompletedProcess:
    res = subprocess.run(
        cli_cmd(index, *args),
        env={**env, "QMDLAB_TEST_EVENTS": str(events), "QMDLAB_TEST_KILL_AT": kill_at},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == -signal.SIGKILL, (res.returncode, res.stderr[-2000:])
    return res


def _clean_build(tmp_path, roots, embed: bool):
    clean = tmp_path / "clean"
    for r in roots:
        _inproc(clean, "collection", "add", str(r), "--name", r.name, "--no-update")
    _inproc(clean, "update", "--no-progress")
    if embed:
        _inproc(clean, "embed", "--preset", "fake", "--no-progress")
    return visible_state(clean / "index.sqlite")


def test_kill_between_statements_of_an_update_transaction(tmp_path, monkeypatch):
    env = cli_env(tmp_path / "home")
    monkeypatch.setenv("QMDLAB_HOME", str(tmp_path / "home"))
    roots = make_corpus(tmp_path / "corpus", 300, 1, seed=3)
    idx, events = tmp_path / "idx", tmp_path / "events.log"
    db = idx / "index.sqlite"
    _inproc(idx, "collection", "add", str(roots[0]), "--name", "c0", "--no-update")
    _inproc(idx, "update", "--no-progress")
    before = visible_state(db)
    # a second, bigger generation of the files: rewrites and new files, so the next update's one
    # transaction carries enough pages to spill into the WAL before its COMMIT
    for p in sorted(roots[0].rglob("*.md"))[::2]:
        p.write_text(p.read_text(encoding="utf-8") + "\n" + "rewritten sqlite pasta text " * 400, encoding="utf-8")
    extra = make_corpus(tmp_path / "extra", 200, 1, seed=4)[0]
    extra.rename(roots[0] / "more")
    files = checksums(tmp_path / "corpus")

    _crash(idx, env, events, "update.file:240", "update", "--no-progress")
    log = read_events(events)
    assert kill_landed(log) == "mid-write" and log[0] == ("begin", f"update:{roots[0].name}")
    assert sum(kind == "write" for kind, _ in log) == 240 and not any(k == "commit" for k, _ in log)
    wal = wal_frames(db)
    print(f"\nkill at update.file:240: {wal.uncommitted} uncommitted WAL frames after {wal.committed} committed")
    assert wal.uncommitted > 0, "the transaction was meant to spill uncommitted pages into the WAL"

    assert checksums(tmp_path / "corpus") == files
    check_consistency(db)
    assert visible_state(db) == before  # the open transaction left nothing behind
    _inproc(idx, "update", "--no-progress")  # a re-run completes ...
    check_consistency(db)
    assert visible_state(db) == _clean_build(tmp_path, roots, embed=False)  # ... and equals a clean build


def test_kill_inside_an_embed_batch_transaction(tmp_path, monkeypatch):
    env = cli_env(tmp_path / "home")
    monkeypatch.setenv("QMDLAB_HOME", str(tmp_path / "home"))
    roots = make_corpus(tmp_path / "corpus", 40, 2, seed=5)
    idx, events = tmp_path / "idx", tmp_path / "events.log"
    db = idx / "index.sqlite"
    for r in roots:
        _inproc(idx, "collection", "add", str(r), "--name", r.name, "--no-update")
    _inproc(idx, "update", "--no-progress")
    n_chunks = check_consistency(db)["chunks"]
    assert n_chunks > 12

    _crash(idx, env, events, "vectors.batch:3", "embed", "--preset", "fake", "--batch-size", "4", "--no-progress")
    log = read_events(events)
    assert kill_landed(log) == "mid-write" and log[-1] == ("write", "vectors.batch")
    assert [k for k, _ in log].count("commit") == 2  # two batches committed, the third was open
    counts = check_consistency(db)
    assert counts["vectors"] == 8  # exactly the two committed batches of 4
    _inproc(idx, "embed", "--preset", "fake", "--batch-size", "4", "--no-progress")
    assert check_consistency(db)["vectors"] == n_chunks
    assert visible_state(db) == _clean_build(tmp_path, roots, embed=True)


def test_bad_kill_spec_is_a_one_line_error_and_rolls_back(tmp_path):
    env = cli_env(tmp_path / "home")
    roots = make_corpus(tmp_path / "corpus", 5, 1, seed=6)
    idx = tmp_path / "idx"
    res = subprocess.run(
        cli_cmd(idx, "collection", "add", str(roots[0]), "--name", "c0"),
        env={**env, "QMDLAB_TEST_KILL_AT": "update.file"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "$QMDLAB_TEST_KILL_AT='update.file': expected '<label>:<n>'" in res.stderr
    assert check_consistency(idx / "index.sqlite")["documents"] == 0
    with pytest.raises(Exception, match="n >= 1"):
        parse_kill_at("vectors.batch:0")


def test_update_commits_are_labelled_by_collection(tmp_path, monkeypatch):
    # The crash harness maps commits to collections by label: an unchanged collection commits
    # nothing (stat-only path) and bookkeeping transactions commit too, so counting commits in
    # collection order blamed the wrong collection (CI, stop 24: "c2 changed although its
    # transaction never committed" after c0 was skipped).
    monkeypatch.setenv("QMDLAB_HOME", str(tmp_path / "home"))
    roots = make_corpus(tmp_path / "corpus", 30, 3, seed=5)
    idx = tmp_path / "idx"
    for r in roots:
        _inproc(idx, "collection", "add", str(r), "--name", r.name, "--no-update")
    _inproc(idx, "update", "--no-progress")
    victim = sorted(roots[1].rglob("*.md"))[0]
    victim.write_text(victim.read_text(encoding="utf-8") + "\nchanged\n", encoding="utf-8")
    events = tmp_path / "events.log"
    monkeypatch.setenv("QMDLAB_TEST_EVENTS", str(events))
    _inproc(idx, "update", "--no-progress")
    log = read_events(events)
    commits = [label for kind, label in log if kind == "commit"]
    assert [c for c in commits if c.startswith("update:")] == [f"update:{roots[1].name}"], log
    assert ("begin", f"update:{roots[0].name}") not in log and ("begin", f"update:{roots[2].name}") not in log
