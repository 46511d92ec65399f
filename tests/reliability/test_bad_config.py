"""Bad configuration and missing pieces: one clear line, exit 1, no traceback; ``--debug`` shows it.

Each case runs through the real CLI group (click's runner, in-process); one case also runs as a
subprocess to check the actual stderr with and without ``--debug``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess

import numpy as np
import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.errors import QmdlabError

from .conftest import cli_cmd, cli_env


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("QMDLAB_HOME", str(tmp_path / "home"))
    for var in ("QMDLAB_INDEX", "QMDLAB_DEBUG", "QMDLAB_PRESET", "QMDLAB_EMBED_MODEL", "QMDLAB_MAX_DOCUMENTS"):
        monkeypatch.delenv(var, raising=False)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# Pasta\n\nboil the pasta\n", encoding="utf-8")
    (notes / "b.md").write_text("# Git\n\ngit rebase\n", encoding="utf-8")
    idx = tmp_path / "idx"
    res = CliRunner().invoke(cli, ["--index", str(idx), "collection", "add", str(notes), "--name", "kb"])
    assert res.exit_code == 0, res.output
    return {"idx": idx, "tmp": tmp_path, "mp": monkeypatch}


def fails(env, *args, contains: tuple[str, ...] = (), **envvars):
    """Run ``qmdlab --index IDX ARGS``; assert one ``error:`` line naming ``contains`` and exit 1;
    then the same with ``--debug``: the original exception propagates (the traceback is shown)."""
    for k, v in envvars.items():
        env["mp"].setenv(k, v)
    runner = CliRunner()
    res = runner.invoke(cli, ["--index", str(env["idx"]), *args])
    assert res.exit_code == 1, (args, res.output, res.exception)
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), res.stderr
    assert "Traceback" not in res.output and "Traceback" not in res.stderr
    for c in contains:
        assert c in err[0], (c, err[0])
    dbg = runner.invoke(cli, ["--index", str(env["idx"]), "--debug", *args])
    assert dbg.exit_code == 1 and isinstance(dbg.exception, QmdlabError), dbg.exception
    return err[0]


def test_unknown_collection(env):
    for args in (
        ["update", "-c", "nope"],
        ["search", "pasta", "-c", "nope"],
        ["ls", "nope"],
        ["embed", "--preset", "fake", "-c", "nope"],
    ):
        fails(env, *args, contains=("unknown collection 'nope'", "known: kb", "qmdlab collection list"))


@pytest.mark.extra("llama")  # a local model file is read through llama.cpp
def test_missing_model_file(env):
    fails(
        env,
        "embed",
        contains=("/nonexistent.gguf", "does not exist", "QMDLAB_EMBED_MODEL"),
        QMDLAB_EMBED_MODEL="/nonexistent.gguf",
    )
    fails(env, "vsearch", "pasta", contains=("/nonexistent.gguf",), QMDLAB_EMBED_MODEL="/nonexistent.gguf")


@pytest.mark.extra("llama")  # a local model file is read through llama.cpp
def test_corrupt_gguf(env):
    bad = env["tmp"] / "random.gguf"
    bad.write_bytes(np.random.default_rng(0).bytes(4096))
    fails(env, "embed", "--embed-model", str(bad), contains=(str(bad), "not a GGUF file"))
    assert bad.read_bytes()[:4] != b"GGUF"  # the file was not "repaired" or deleted


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python is not installed; a GGUF header with a garbage body only fails inside it",
)
def test_gguf_magic_with_garbage_body(env):
    bad = env["tmp"] / "truncated.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + np.random.default_rng(1).bytes(2048))
    fails(env, "embed", "--embed-model", str(bad), contains=(str(bad),))
    assert bad.exists()


def test_stale_vectors_of_another_dimension(env):
    from qmdlab.models import load_models
    from qmdlab.store import Index

    fp = load_models("fake").embedder.fingerprint
    with Index(env["idx"]) as idx:
        todo = idx.chunks_needing_vectors(fp)
        idx.store_vectors(todo["chunk_id"].to_list()[:1], np.ones((1, 5), dtype=np.float32), fp)  # 5-d, stale
    fails(env, "vsearch", "pasta", "--preset", "fake", contains=("dims", "5-d", "qmdlab embed -f"))
    fails(env, "embed", "--preset", "fake", contains=("5-d", "qmdlab embed -f"))
    # the pipeline degrades instead of failing: BM25 only, with a note
    res = CliRunner().invoke(cli, ["--index", str(env["idx"]), "query", "pasta", "--preset", "fake", "--trace-json"])
    assert res.exit_code == 0, res.output
    assert "vector lists skipped" in res.output and "kb/a.md" in res.output


def test_malformed_collections_yaml(env):
    (env["idx"] / "collections.yaml").write_text(
        "collections:\n  - {name: kb, root: /x\n  - oops: [\n", encoding="utf-8"
    )
    for args in (["update"], ["collection", "list"], ["search", "pasta", "-c", "kb"]):
        fails(env, *args, contains=("collections.yaml:", "malformed YAML", "fix or delete the file"))


def test_malformed_pipeline_config(env):
    bad = env["tmp"] / "pipe.yaml"
    bad.write_text("fusion: rrf\nweights: [1, 2\n", encoding="utf-8")
    fails(env, "query", "pasta", "--preset", "fake", "--config", str(bad), contains=("pipe.yaml",))
    unknown = env["tmp"] / "unknown.yaml"
    unknown.write_text("rrf: 60\n", encoding="utf-8")
    fails(env, "query", "pasta", "--preset", "fake", "--config", str(unknown), contains=("'rrf'", "rrf_k"))


@pytest.mark.extra("eval")  # qmdlab eval checks its metrics against ranx
def test_malformed_jsonl_at_line_n(env):
    suite = env["tmp"] / "suite"
    suite.mkdir()
    (suite / "queries.jsonl").write_text(
        '{"qid": "1", "query": "pasta", "qrels": {"kb/a.md": 1}}\n\n'
        '{"qid": "2", "query": "git", "qrels": {"kb/b.md": 1}}\n'
        '{"qid": "3", "query": \n',
        encoding="utf-8",
    )
    (suite / "docs.jsonl").write_text('{"id": "kb/a.md", "text": "pasta"}\n', encoding="utf-8")
    fails(
        env,
        "eval",
        str(suite),
        "--format",
        "jsonl",
        "--preset",
        "fake",
        contains=(f"{suite / 'queries.jsonl'}:4:", "invalid JSON"),
    )
    data = env["tmp"] / "train.jsonl"
    data.write_text(
        '{"query": "q", "output": [["lex", "a"]]}\n{"query": "q2", "output": [["sparse", "x"]]}\n', encoding="utf-8"
    )
    if importlib.util.find_spec("qmdlab.training.data") is not None:
        fails(
            env,
            "train",
            "prepare",
            "--data",
            str(data),
            "--out",
            str(env["tmp"] / "out"),
            contains=(f"{data}:2:", "'sparse'"),
        )


def test_corrupt_index_file(env):
    bad = env["tmp"] / "badidx"
    bad.mkdir()
    (bad / "index.sqlite").write_bytes(b"this is not sqlite" * 100)
    res = CliRunner().invoke(cli, ["--index", str(bad), "ls"])
    assert res.exit_code == 1 and res.stderr.count("\n") == 1
    assert "not a usable qmdlab index" in res.stderr and "pass another --index" in res.stderr
    assert (bad / "index.sqlite").read_bytes() == b"this is not sqlite" * 100  # never overwritten


def test_bad_capacity_setting(env):
    fails(env, "update", contains=("$QMDLAB_MAX_DOCUMENTS='lots'", "not a number"), QMDLAB_MAX_DOCUMENTS="lots")


@pytest.mark.slow
def test_real_process_traceback_only_with_debug(env, tmp_path):
    e = cli_env(tmp_path / "home")
    args = ("search", "pasta", "-c", "nope")
    plain = subprocess.run(cli_cmd(env["idx"], *args), env=e, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 1
    assert plain.stderr.splitlines() == [plain.stderr.strip()] and plain.stderr.startswith("error: unknown collection")
    dbg = subprocess.run(cli_cmd(env["idx"], "--debug", *args), env=e, capture_output=True, text=True, timeout=120)
    assert dbg.returncode == 1 and "Traceback (most recent call last)" in dbg.stderr
    assert "qmdlab.errors.ConfigError: unknown collection 'nope'" in dbg.stderr
    # QMDLAB_DEBUG=1 is the same switch (in-process: the exception propagates instead of one line)
    res = CliRunner(env={"QMDLAB_DEBUG": "1"}).invoke(cli, ["--index", str(env["idx"]), *args])
    assert res.exit_code == 1 and isinstance(res.exception, QmdlabError) and res.stderr == ""
    assert os.environ.get("QMDLAB_DEBUG") is None
