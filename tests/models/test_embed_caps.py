"""``embed --timeout`` (a clean, resumable stop), ``--max-docs-per-batch``, ``--max-batch-mb``; ``pull --refresh``."""

from __future__ import annotations

import pytest

from qmdlab.models.batching import Deadline, plan_batches


@pytest.fixture
def indexed(tmp_path, cli_run, qmdlab_home):
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(5):  # one chunk each
        (notes / f"n{i}.md").write_text(f"# Note {i}\n\nheron number {i}\n", encoding="utf-8")
    cli_run("collection", "add", str(notes), "--name", "notes")
    return cli_run


def _vectors(run):
    from qmdlab.models import load_models
    from qmdlab.store import Index

    with Index.open(run.index_dir) as idx:
        fp = load_models("fake").embedder.fingerprint
        return idx.vector_fingerprints().get(fp, (0, 0))[1], idx.chunks_needing_vectors(fp).height


def test_plan_batches_caps():
    docs = ["a", "a", "a", "b", "c", "c"]
    texts = ["x" * 10] * 6
    assert plan_batches(docs, texts, batch_size=4) == [(0, 4), (4, 6)]
    assert plan_batches(docs, texts, batch_size=32, max_docs=1) == [(0, 3), (3, 4), (4, 6)]
    assert plan_batches(docs, texts, batch_size=32, max_bytes=25) == [(0, 2), (2, 4), (4, 6)]
    assert plan_batches(["a"], ["é" * 20], batch_size=32, max_bytes=5) == [(0, 1)]  # one big chunk: its own batch
    assert plan_batches([], [], batch_size=3) == []
    # every chunk lands in exactly one batch, in order
    spans = plan_batches(docs, texts, batch_size=2, max_docs=2, max_bytes=15)
    assert [i for a, b in spans for i in range(a, b)] == list(range(6))
    with pytest.raises(ValueError):
        plan_batches(docs, texts, batch_size=0)


def test_deadline_uses_its_clock():
    now = [100.0]
    d = Deadline(5, clock=lambda: now[0])
    assert not d.passed()
    now[0] = 105.0
    assert d.passed()


def test_embed_timeout_stops_between_batches_and_resumes(indexed, monkeypatch):
    from qmdlab.models import batching

    calls = iter([False, False, True])  # two batches, then time is up
    monkeypatch.setattr(batching.Deadline, "passed", lambda self: next(calls, True))
    res = indexed("embed", "--preset", "fake", "--batch-size", "2", "--timeout", "60", "--no-progress")
    assert "stopped after" in res.output and "embedded 4 of 5 chunks" in res.output
    assert "run `qmdlab embed` again to embed the other 1" in res.output
    assert _vectors(indexed) == (4, 1)  # the finished batches are stored
    monkeypatch.undo()
    res = indexed("embed", "--preset", "fake", "--no-progress")
    assert "embedded 1 chunks" in res.output and _vectors(indexed) == (5, 0)


def test_embed_timeout_is_minutes_as_in_qmd_and_zero_is_no_limit(indexed):
    """qmd's ``--timeout <minutes>`` (0 = no limit); ``90s``/``2h`` name their unit; a word is refused."""
    from qmdlab.commands.models import parse_timeout

    assert (parse_timeout("30"), parse_timeout("90s"), parse_timeout("2h")) == (1800.0, 90.0, 7200.0)
    res = indexed("embed", "--preset", "fake", "--timeout", "0", "--no-progress")
    assert "embedded 5 chunks" in res.output and _vectors(indexed) == (5, 0)
    bad = indexed("embed", "--preset", "fake", "--timeout", "soon", ok=False)
    assert bad.exit_code == 1 and "--timeout" in bad.output and "give minutes (30)" in bad.output


def test_embed_batch_caps_set_the_number_of_batches(indexed):
    res = indexed("embed", "--preset", "fake", "--max-docs-per-batch", "2", "--no-progress")
    assert "embedded 5 chunks" in res.output and "3 batches" in res.output
    res = indexed("embed", "-f", "--preset", "fake", "--max-batch-mb", "0.00001", "--no-progress")
    assert "5 batches" in res.output  # 10 bytes per batch: one chunk each
    assert _vectors(indexed) == (5, 0)
    bad = indexed("embed", "--preset", "fake", "--max-batch-mb", "0", ok=False)
    assert bad.exit_code == 1 and "--max-batch-mb" in bad.output


def test_pull_refresh_is_passed_to_the_hf_check(tmp_path, cli_run, qmdlab_home, monkeypatch):
    from qmdlab.models import registry

    seen = []
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 16)

    def fake_resolve(ref, *, refresh=False, progress=False):
        seen.append((ref, refresh))
        return model

    monkeypatch.setattr(registry, "resolve_path", fake_resolve)
    args = ("pull", "--preset", "fake", "--embed-model", "hf:org/repo/e.gguf")
    cli_run(*args)
    cli_run(*args, "--refresh")
    assert seen == [("hf:org/repo/e.gguf", False), ("hf:org/repo/e.gguf", True)]
