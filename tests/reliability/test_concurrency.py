"""Concurrent access: readers while a writer updates, and two writers at once.

The index runs in WAL mode with a 30 s busy timeout; opening an existing index writes nothing,
so a reader never queues behind a writer. These tests run a real ``qmdlab update`` subprocess
as the writer and prove that readers in other processes and threads never see an error (in
particular no "database is locked"), only complete states (each collection appears all at
once: one transaction per collection), and that two concurrent updates serialise: every file
is indexed exactly once and the result equals one update.
"""

from __future__ import annotations

import subprocess
import threading
import time

import numpy as np
import pytest
from click.testing import CliRunner

from qmdlab.cli import cli

from .conftest import check_consistency, checksums, cli_cmd, cli_env, make_corpus, visible_state

pytestmark = pytest.mark.slow

N_FILES = 450
COLLS = 3


def _setup(tmp_path, monkeypatch, n=N_FILES):
    home = tmp_path / "home"
    monkeypatch.setenv("QMDLAB_HOME", str(home))
    roots = make_corpus(tmp_path / "corpus", n, COLLS, seed=3)
    idx = tmp_path / "idx"
    for r in roots:
        res = CliRunner().invoke(
            cli, ["--index", str(idx), "collection", "add", str(r), "--name", r.name, "--no-update"]
        )
        assert res.exit_code == 0, res.output
    return roots, idx, cli_env(home)


def test_readers_never_see_locks_or_partial_collections_while_a_writer_updates(tmp_path, monkeypatch):
    """Reader threads (BM25, vector search, the traced pipeline) and a CLI ``search`` process run
    while a ``qmdlab update`` process indexes three collections."""
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.pipeline.lab import Lab
    from qmdlab.search import bm25_search, vector_search
    from qmdlab.store import Index

    roots, idx, env = _setup(tmp_path, monkeypatch)
    per_coll = N_FILES // COLLS
    # an embedded first state, so vector search has something to read during the update
    with Index(idx) as first:
        first.update(collections=[roots[0].name])
        todo = first.chunks_needing_vectors("fp")
        first.store_vectors(todo["chunk_id"].to_list(), np.ones((todo.height, 4), dtype=np.float32), "fp")
    before = checksums(tmp_path / "corpus")
    writer = subprocess.Popen(
        cli_cmd(idx, "update", "--no-progress"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    errors: list[str] = []
    seen_counts: set[int] = set()
    reads = [0]

    def reader(k: int) -> None:
        try:
            while writer.poll() is None:
                with Index(idx) as r:  # a fresh open each round: opening must not wait for the writer
                    hits = bm25_search(r, "pasta OR rebase kernel", limit=5)
                    assert all(h.docno.split("/")[0] in {x.name for x in roots} for h in hits)
                    assert len(vector_search(r, np.ones(4), fingerprint="fp", limit=3)) == 3
                    trace = Lab(r, None, PipelineConfig(rerank=False, expand=False)).query("pasta kernel")
                    assert trace.final.height > 0
                    n = r.documents().height
                    seen_counts.add(n)
                    reads[0] += 1
        except Exception as err:  # noqa: BLE001 - every failure is reported
            errors.append(f"reader {k}: {type(err).__name__}: {err}")

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    cli_reads = 0
    while cli_reads == 0 or writer.poll() is None:  # a reader in another process, through the CLI
        res = subprocess.run(cli_cmd(idx, "search", "pasta", "-n", "3"), env=env, capture_output=True, text=True)
        if res.returncode != 0 or res.stderr.strip():
            errors.append(f"cli search: rc={res.returncode} {res.stderr.strip()}")
        cli_reads += 1
    for t in threads:
        t.join(timeout=120)
    out, err = writer.communicate(timeout=120)
    assert writer.returncode == 0, err
    assert errors == []
    assert "locked" not in err
    assert reads[0] > 0 and cli_reads > 0
    # only whole collections ever became visible
    assert seen_counts <= {per_coll * k for k in range(1, COLLS + 1)}, seen_counts
    assert checksums(tmp_path / "corpus") == before
    check_consistency(idx / "index.sqlite")


def test_two_concurrent_updates_serialise(tmp_path, monkeypatch):
    roots, idx, env = _setup(tmp_path, monkeypatch)
    procs = [
        subprocess.Popen(
            cli_cmd(idx, "update", "--no-progress"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "locked" not in err and "Traceback" not in err
    summaries = [out.splitlines()[0] for out, _ in outs]
    new = [int(s.split(": ")[1].split(" new")[0]) for s in summaries]
    unchanged = [int(s.split(" unchanged")[0].rsplit(" ", 1)[1]) for s in summaries]
    # every file was indexed by exactly one of the two; the other saw it as unchanged
    assert sum(new) == N_FILES and sum(unchanged) == N_FILES, summaries
    check_consistency(idx / "index.sqlite")
    # the result equals a single, uncontended update
    clean = tmp_path / "clean"
    for r in roots:
        assert (
            CliRunner().invoke(cli, ["--index", str(clean), "collection", "add", str(r), "--name", r.name]).exit_code
            == 0
        )
    assert visible_state(idx / "index.sqlite") == visible_state(clean / "index.sqlite")


def test_threads_sharing_one_index_object(tmp_path, monkeypatch):
    """One Index used by a writer thread and reader threads (the MCP server's situation)."""
    from qmdlab.search import bm25_search
    from qmdlab.store import Index

    roots, idx_dir, _ = _setup(tmp_path, monkeypatch, n=150)
    errors: list[str] = []
    with Index(idx_dir) as idx:
        done = threading.Event()

        def read() -> None:
            try:
                while not done.is_set():
                    bm25_search(idx, "pasta", limit=3)
                    idx.documents()
                    idx.chunks(["c0/d0/n00000.md"])
            except Exception as err:  # noqa: BLE001
                errors.append(f"{type(err).__name__}: {err}")

        readers = [threading.Thread(target=read) for _ in range(3)]
        for t in readers:
            t.start()
        rep = idx.update()
        (roots[0] / "late.md").write_text("# Late\n\npasta\n", encoding="utf-8")
        rep2 = idx.update()
        time.sleep(0.05)
        done.set()
        for t in readers:
            t.join(timeout=60)
    assert errors == []
    assert rep.new == 150 and rep2.new == 1 and rep2.unchanged == 150
