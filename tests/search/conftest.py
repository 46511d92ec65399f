"""A tiny indexed corpus for search tests."""

from __future__ import annotations

import pytest

from qmdlab.store import Index

CORPUS = {
    "git-rebase.md": "---\ntags: [git, howto]\ndate: 2024-03-05\n---\n# Git rebase\n\nRewrite history with rebase.\n",
    "git-merge.md": "---\ntags: [git]\ndate: 2023-01-10\n---\n# Merging\n\nA merge keeps history; rebase rewrites it.\n",
    "pasta.md": "---\ntags: [food]\ndate: 2024-06-01\n---\n# Pasta\n\nBoil water. The pasta needs salt.\n",
    "multi-agent.md": "# Agents\n\nMulti-agent systems coordinate many agents.\n",
    "tokyo.md": "# 東京メモ\n\n東京大学の講義ノート。\n",
    "other/notes.md": "# Misc\n\nnothing about version control here\n",
}


@pytest.fixture
def corpus_index(tmp_path) -> Index:
    root = tmp_path / "kb"
    for rel, body in CORPUS.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body, encoding="utf-8")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("kb", root)
    idx.update()
    yield idx
    idx.close()
