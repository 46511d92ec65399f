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
    assert np.allclose(two.embed_query("heron"), one.embed_query("heron"), atol=1e-6)
    two.release()
    one.release()
