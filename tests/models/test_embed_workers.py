"""An embedder's side-by-side contexts give the vectors one context gives, in the texts' order."""

from __future__ import annotations

import numpy as np
import pytest

from qmdlab.models.llama_embed import embed_workers

pytestmark = pytest.mark.extra("llama")

DOCS = [(f"note {i}", f"{word} " * (3 + i)) for i, word in enumerate("heron kettle basalt violin quartz".split())]


def test_default_workers_follow_the_threads():
    assert embed_workers(2, {}) == 2 and embed_workers(8, {}) == 2 and embed_workers(1, {}) == 1
    assert embed_workers(2, {"QMDLAB_EMBED_WORKERS": "3"}) == 3
    with pytest.raises(Exception, match="QMDLAB_EMBED_WORKERS"):
        embed_workers(2, {"QMDLAB_EMBED_WORKERS": "two"})


def test_two_contexts_equal_one(require):
    from qmdlab.models import load_models, packaged

    require(packaged.is_ready("all-minilm-l6-v2"), "MiniLM is not pulled: `qmdlab pull --preset offline-mini`")
    one = load_models("offline-mini", expand="none", rerank="none", n_threads=2, idle_timeout=None).embedder
    two = load_models("offline-mini", expand="none", rerank="none", n_threads=2, idle_timeout=None).embedder
    one.workers, one.llamas = 1, one.llamas[:1]
    assert two.workers == 2 and len(two.llamas) == 2
    a, b = one.embed_documents(DOCS), two.embed_documents(DOCS)
    assert a.shape == b.shape == (5, one.dim)
    np.testing.assert_allclose(a, b, atol=1e-6)  # the same vectors, each in its text's place
    assert not np.allclose(a[0], a[1])  # the texts differ, so a shuffled order would show
    with two.llamas[0].use() as llm:
        assert llm.n_threads == 1  # its share while the two contexts embedded side by side
    assert np.allclose(two.embed_query("heron"), one.embed_query("heron"), atol=1e-6)
    with two.llamas[0].use() as llm:
        assert llm.n_threads == 2  # a single text (a query) runs on every thread
    np.testing.assert_allclose(two.embed_documents(DOCS), a, atol=1e-6)  # and the texts on their share again
    with two.llamas[1].use() as other:
        assert llm.n_threads == other.n_threads == 1
    two.release()
    one.release()


def test_loading_two_contexts_leaves_stdout_alone(tmp_path, require):
    """llama-cpp-python points stdout/stderr at /dev/null while it loads a model: two contexts loading
    at once once left the process's stdout there for good (``qmdlab embed`` printed nothing)."""
    import os
    import subprocess
    import sys

    from qmdlab.models import packaged

    require(packaged.is_ready("all-minilm-l6-v2"), "MiniLM is not pulled: `qmdlab pull --preset offline-mini`")
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(6):
        (notes / f"n{i}.md").write_text(f"# Note {i}\n\nText about topic {i}.\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QMDLAB_")}
    env.update(QMDLAB_HOME=str(tmp_path / "home"), QMDLAB_EMBED_WORKERS="2", QMDLAB_THREADS="2")
    cli = [sys.executable, "-m", "qmdlab.cli"]
    subprocess.run([*cli, "collection", "add", str(notes), "--name", "n"], env=env, check=True, capture_output=True)
    done = subprocess.run(
        [*cli, "embed", "--preset", "offline-mini", "--batch-size", "2", "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("embedded 6 chunks"), (done.stdout, done.stderr[-500:])
