"""A five-document index embedded with the keyword fake, for exact pipeline rankings."""

from __future__ import annotations

from pathlib import Path

import pytest

from qmdlab.models.fakes import KeywordEmbedder

DOCS = {
    "git-rebase.md": "# Git rebase\n\nRebase replays each commit onto another branch.\n\nUse git rebase -i to squash.\n",
    "git-merge.md": "# Git merge\n\nMerge joins two branch tips with a merge commit.\n",
    "pasta.md": "# Cooking pasta\n\nBoil water, add salt, cook the pasta.\n",
    "sqlite.md": "---\ntags: [search, db]\n---\n# SQLite search\n\nFull text search with bm25 in sqlite.\n",
    "docker.md": "---\ntags: [ops]\n---\n# Docker network\n\nContainers talk over a bridge network.\n",
}
VOCAB = ["git", "rebase", "merge", "branch", "commit", "pasta", "sqlite", "search", "docker", "network"]


def build_index(root: Path, *, embed: bool = True):
    from qmdlab.store import Index

    src = root / "notes"
    src.mkdir(parents=True)
    for name, text in DOCS.items():
        (src / name).write_text(text, encoding="utf-8")
    idx = Index(root / "index")
    idx.add_collection("notes", src)
    idx.update()
    embedder = KeywordEmbedder(VOCAB)
    if embed:
        todo = idx.chunks_needing_vectors(embedder.fingerprint)
        mat = embedder.embed_documents(list(zip(todo["title"].to_list(), todo["text"].to_list())))
        idx.store_vectors(todo["chunk_id"].to_list(), mat, embedder.fingerprint)
    return idx, embedder


@pytest.fixture
def small_index(tmp_path):
    idx, embedder = build_index(tmp_path)
    yield idx, embedder
    idx.close()


@pytest.fixture
def small_index_no_vectors(tmp_path):
    idx, embedder = build_index(tmp_path, embed=False)
    yield idx, embedder
    idx.close()


@pytest.fixture(scope="module")
def module_index(tmp_path_factory):
    """The same index, shared by a module's tests (for hypothesis: built once)."""
    idx, embedder = build_index(tmp_path_factory.mktemp("pipeline-index"))
    yield idx, embedder
    idx.close()
