"""``update --watch``: real file changes under a collection reach the index within seconds, a failing
pass is reported and retried, and the watcher never writes the notes.

Every wait is on the watcher's own pass events (:meth:`Watcher.wait_for_pass`), with a deadline."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from qmdlab.store import Index
from qmdlab.store.watch import Watcher

from .conftest import snapshot

#: The longest a change may take to reach the index.
WITHIN_S = 5.0


def active(idx: Index) -> set[str]:
    return set(idx.documents()["docno"].to_list())


def body(idx: Index, docno: str) -> str:
    return idx.get(docno).body


@pytest.fixture(params=["native", "polling"])
def watching(request, tmp_path, notes):
    """A watcher over collection ``kb`` in a thread (its own Index, as a server would), and its index dir."""
    idx_dir = str(tmp_path / "idx")
    with Index.open(idx_dir) as idx:
        idx.add_collection("kb", notes)
        idx.update()
    ready = threading.Event()
    box: dict = {}

    def run() -> None:
        with Index.open(idx_dir) as idx:
            w = Watcher(idx, debounce=0.2, poll=request.param == "polling", retry=0.2)
            box["watcher"] = w
            ready.set()
            w.run()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(10)
    w = box["watcher"]
    assert w.wait_for_pass(0, WITHIN_S) is not None  # the pass at start
    yield w, idx_dir, notes
    w.stop.set()
    thread.join(10)
    assert not thread.is_alive()


def change_seen(w: Watcher, idx_dir: str, check, passes_before: int) -> None:
    """Wait (on pass events, at most WITHIN_S) until ``check(index)`` holds."""
    import time

    deadline = time.monotonic() + WITHIN_S
    seen = passes_before
    while True:
        with Index.open(idx_dir) as idx:
            if check(idx):
                return
        left = deadline - time.monotonic()
        assert left > 0, f"not in the index within {WITHIN_S} s; passes: {w.passes}"
        p = w.wait_for_pass(seen, left)
        assert p is not None, f"no pass within {WITHIN_S} s"
        assert p.error is None, p.error
        seen += 1


def test_created_changed_moved_and_deleted_notes_reach_the_index(watching):
    w, idx_dir, notes = watching
    n = len(w.passes)
    (notes / "new.md").write_text("# New\n\nA heron at dawn.\n", encoding="utf-8")
    change_seen(w, idx_dir, lambda idx: "kb/new.md" in active(idx), n)

    n = len(w.passes)
    (notes / "new.md").write_text("# New\n\nA kingfisher at noon.\n", encoding="utf-8")
    change_seen(w, idx_dir, lambda idx: "kingfisher" in body(idx, "kb/new.md"), n)

    n = len(w.passes)
    (notes / "new.md").rename(notes / "cooking" / "moved.md")
    change_seen(w, idx_dir, lambda idx: {"kb/cooking/moved.md"} <= active(idx) - {"kb/new.md"}, n)

    n = len(w.passes)
    (notes / "cooking" / "moved.md").unlink()
    change_seen(w, idx_dir, lambda idx: "kb/cooking/moved.md" not in active(idx), n)
    assert all(p.error is None for p in w.passes)


def test_a_burst_of_changes_is_one_pass(tmp_path, notes):
    with Index.open(str(tmp_path / "idx")) as idx:
        idx.add_collection("kb", notes)
        w = Watcher(idx, debounce=0.3)
        for i in range(20):
            w.mark("kb")
        assert w._next_burst() == {"kb"}  # waits for 0.3 s of quiet, then one set of collections
        p = w.run_pass({"kb"})
        assert p.error is None and p.report is not None and p.report.new == 4


def test_a_failing_pass_is_reported_and_retried(tmp_path, notes):
    with Index.open(str(tmp_path / "idx")) as idx:
        idx.add_collection("kb", notes)
        failures: list = []
        calls = {"n": 0}
        real_update = idx.update

        def flaky(*a, **k):
            calls["n"] += 1
            if calls["n"] == 1:
                raise OSError(28, "No space left on device")
            return real_update(*a, **k)

        idx.update = flaky  # type: ignore[method-assign]
        w = Watcher(idx, debounce=0.1, retry=0.05, on_error=failures.append)
        first = w.run_pass({"kb"})
        assert first.error is not None and failures == [first]
        w._settle(first, {"kb"})  # retried until a pass succeeds
        assert w.passes[-1].error is None and w.passes[-1].report.new == 4 and calls["n"] == 2


def test_update_watch_command_stops_cleanly_and_leaves_notes_alone(tmp_path, notes):
    """The verb as a user runs it: a process that picks up a note, then stops on SIGTERM with status 0."""
    before = snapshot(notes)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QMDLAB_")}
    env["QMDLAB_HOME"] = str(tmp_path / "home")
    idx_dir = str(tmp_path / "idx")
    cli = [sys.executable, "-m", "qmdlab.cli", "--index", idx_dir]
    subprocess.run([*cli, "collection", "add", str(notes), "--name", "kb"], env=env, check=True, capture_output=True)
    proc = subprocess.Popen(
        [*cli, "update", "--watch", "--debounce", "0.2"], env=env, stderr=subprocess.PIPE, text=True, bufsize=1
    )
    try:
        lines = []
        for line in proc.stderr:  # the first pass's report: the watcher is running
            lines.append(line)
            if line.startswith("watch: kb:"):
                break
        Path(notes / "late.md").write_text("# Late\n\nAn owl at dusk.\n", encoding="utf-8")
        for line in proc.stderr:
            lines.append(line)
            if "1 new" in line:
                break
        assert any("1 new" in line for line in lines), lines
        proc.terminate()
        assert proc.wait(10) == 0
        assert "watch: stopped after" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    (notes / "late.md").unlink()
    assert snapshot(notes) == before


def test_embed_without_watch_is_a_usage_error(tmp_path, notes):
    from click.testing import CliRunner

    from qmdlab.cli import cli

    res = CliRunner().invoke(cli, ["--index", str(tmp_path / "idx"), "update", "--embed"])
    assert res.exit_code == 1 and "--embed goes with --watch" in res.output


def test_mcp_watch_keeps_the_served_index_fresh_and_embeds(tmp_path, notes):
    """``qmdlab mcp --http --watch --embed`` (fake models): a note written while the server runs is
    indexed and embedded, then found by a REST query; the server stops on SIGTERM with status 0."""
    import json
    import signal
    import socket
    import time
    import urllib.request

    env = {k: v for k, v in os.environ.items() if not k.startswith("QMDLAB_")}
    env.update(QMDLAB_HOME=str(tmp_path / "home"), QMDLAB_PRESET="fake")
    idx_dir = str(tmp_path / "idx")
    cli = [sys.executable, "-m", "qmdlab.cli", "--index", idx_dir]
    subprocess.run([*cli, "collection", "add", str(notes), "--name", "kb"], env=env, check=True, capture_output=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [*cli, "mcp", "--http", "--port", str(port), "--watch", "--embed", "--debounce", "0.2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    lines: list[str] = []

    def read_until(text: str) -> None:
        for line in proc.stderr:
            lines.append(line)
            if text in line:
                return
        raise AssertionError(f"server ended before {text!r}: {lines}")

    try:
        read_until("watch: embedded")  # the first pass indexed and embedded the notes
        (notes / "heron.md").write_text("# Heron\n\nvector embedding python\n", encoding="utf-8")
        read_until("1 new")
        read_until("watch: embedded 1 chunk")
        # the watcher's passes run beside the server's start: wait until it answers /health
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    assert r.status == 200
                break
            except OSError:  # refused until uvicorn listens
                assert proc.poll() is None, lines
                assert time.monotonic() < deadline, f"the server did not answer /health: {lines}"
                time.sleep(0.2)
        # a vector search only: the new chunk is found through the vector just stored (the fake embedder
        # places texts by its vocabulary's words)
        body = json.dumps({"searches": [{"type": "vec", "query": "vector embedding python"}], "limit": 3}).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/query", body, {"content-type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            files = [res["file"] for res in json.loads(r.read())["results"]]
        assert "qmd://kb/heron.md" in files, files
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, lines
