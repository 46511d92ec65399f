"""CLI verbs of the models area with the fake preset: models, pull, embed (resumable), vsearch."""

import numpy as np
import pytest
from click.testing import CliRunner

import qmdlab.models as models_pkg
from qmdlab.cli import cli
from qmdlab.models import KeywordEmbedder, ModelSet

DOCS = {
    "git-rebase.md": "# Git rebase\n\nRebase a branch onto main with git rebase.\n",
    "docker.md": "# Docker\n\nRun a docker server with a network.\n",
    "sqlite.md": "# SQLite\n\nThe database keeps an index and a cache.\n",
}


@pytest.fixture
def index_dir(tmp_path, qmdlab_home, monkeypatch):
    for var in ("QMDLAB_PRESET", "QMDLAB_EMBED_MODEL", "QMDLAB_EXPAND_MODEL", "QMDLAB_RERANK_MODEL"):
        monkeypatch.delenv(var, raising=False)
    from qmdlab.store import Index

    notes = tmp_path / "notes"
    notes.mkdir()
    for name, body in DOCS.items():
        (notes / name).write_text(body)
    idx_dir = tmp_path / "idx"
    with Index.open(str(idx_dir)) as idx:
        idx.add_collection("notes", notes)
        idx.update()
    return idx_dir


def run(*args):
    res = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return res


def test_models_lists_roles(index_dir):
    res = run("models", "--preset", "fake", "--rerank-model", "none")
    assert res.exit_code == 0
    assert res.output.splitlines()[0] == "preset: fake"
    assert "embed   fake:keyword" in res.output and "rerank  none (stage disabled)" in res.output


def test_pull_fake_is_a_noop(index_dir):
    res = run("pull", "--preset", "fake")
    assert res.exit_code == 0 and res.output.strip().endswith("preset fake: ready")


def test_pull_skips_a_served_role_and_fetches_the_rest(index_dir):
    res = run("pull", "--preset", "fake", "--embed-model", "http://127.0.0.1:9/v1#nomic-embed-text")
    assert res.exit_code == 0, res.output
    assert "embed   http://127.0.0.1:9/v1#nomic-embed-text: served over HTTP, nothing to fetch" in res.output
    assert res.output.strip().endswith("preset fake: ready")


def test_embed_then_vsearch(index_dir):
    res = run("--index", str(index_dir), "embed", "--preset", "fake", "--no-progress")
    assert res.exit_code == 0, res.output
    assert res.output.startswith("embedded 3 chunks with fake:keyword/40")
    again = run("--index", str(index_dir), "embed", "--preset", "fake", "--no-progress")
    assert again.output.startswith("all chunks already embedded")
    forced = run("--index", str(index_dir), "embed", "-f", "--preset", "fake", "--no-progress")
    assert forced.output.startswith("embedded 3 chunks")
    res = run("--index", str(index_dir), "vsearch", "git rebase branch", "--preset", "fake", "--format", "files")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0].split(",")[2] == "qmd://notes/git-rebase.md"


def test_embed_is_resumable_after_a_crash(index_dir, monkeypatch):
    from qmdlab.store import Index

    class Crashy(KeywordEmbedder):
        calls = 0

        def embed_documents(self, docs):
            Crashy.calls += 1
            if Crashy.calls == 2:
                raise RuntimeError("killed mid-run")
            return super().embed_documents(docs)

    emb = Crashy(["git", "docker", "database"])
    monkeypatch.setattr(models_pkg, "load_models", lambda *a, **k: ModelSet(emb, None, None))
    with pytest.raises(RuntimeError, match="killed"):
        run("--index", str(index_dir), "embed", "--batch-size", "1", "--no-progress")
    with Index.open(str(index_dir)) as idx:
        assert idx.chunks_needing_vectors(emb.fingerprint).height == 2  # the first batch survived
    res = run("--index", str(index_dir), "embed", "--batch-size", "1", "--no-progress")
    assert res.output.startswith("embedded 2 chunks")
    with Index.open(str(index_dir)) as idx:
        vm = idx.vector_matrix(emb.fingerprint)
        assert vm.matrix.shape == (3, 3)
        np.testing.assert_allclose(np.linalg.norm(vm.matrix, axis=1), 1.0, rtol=1e-6)


def test_vsearch_before_embed_is_a_one_line_error(index_dir):
    res = CliRunner().invoke(cli, ["--index", str(index_dir), "vsearch", "git", "--preset", "fake"])
    assert res.exit_code == 1
    assert res.output.startswith("error: ") and "embed" in res.output and res.output.count("\n") == 1
