"""Odd arguments get an answer or one line naming the problem, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.search.filters import MAX_TAGS
from qmdlab.store import Index

from .conftest import cli_env, make_corpus


@pytest.fixture
def index(tmp_path, monkeypatch):
    for k, v in cli_env(tmp_path / "home").items():
        monkeypatch.setenv(k, v)
    (root,) = make_corpus(tmp_path / "kb", 20)
    with Index.open(str(tmp_path / "idx")) as idx:
        idx.add_collection("c0", root)
        idx.update()
    res = CliRunner().invoke(cli, ["--index", str(tmp_path / "idx"), "embed", "--preset", "fake", "--no-progress"])
    assert res.exit_code == 0, res.output
    return tmp_path / "idx"


def _run(index, *args):
    return CliRunner().invoke(cli, ["--index", str(index), *args])


def _one_line(res, *words) -> bool:
    return (
        res.exit_code == 1
        and isinstance(res.exception, SystemExit)
        and res.stderr.count("\n") == 1
        and all(w in res.stderr for w in words)
    )


def test_bytes_that_are_not_utf8_in_a_search_are_dropped(index):
    res = _run(index, "search", "--json", "alpha \udcff\udcfe beta")
    assert res.exit_code == 0, (res.output, res.exception)
    assert res.stdout == _run(index, "search", "--json", "alpha  beta").stdout


class Utf8Embedder:
    """The fake embedder behind a tokenizer that, like a real one, needs encodable text."""

    def __init__(self, inner):
        self.inner, self.model_id, self.fingerprint = inner, inner.model_id, inner.fingerprint

    def embed_query(self, text):
        text.encode("utf-8")
        return self.inner.embed_query(text)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_bytes_that_are_not_utf8_in_a_vector_search_are_dropped(index):
    from qmdlab.mcp_server.backend import McpBackend
    from qmdlab.models import load_models
    from qmdlab.models.base import ModelSet

    fake = load_models("fake")
    backend = McpBackend(str(index), models=ModelSet(Utf8Embedder(fake.embedder), None, None))
    try:
        _, got = backend.single_leg("vsearch", "docker \udcff\udcfe sqlite", limit=3)
        _, want = backend.single_leg("vsearch", "docker  sqlite", limit=3)
        assert got["results"] and [r["docno"] for r in got["results"]] == [r["docno"] for r in want["results"]]
    finally:
        backend.index.close()


@pytest.mark.parametrize("args", [("get", "c0/\udcffx.md"), ("query", "--preset", "fake", "alpha \udcff")])
def test_bytes_that_are_not_utf8_elsewhere_get_an_answer_or_one_line(index, args):
    res = _run(index, *args)
    assert res.exit_code == 0 or _one_line(res, "not UTF-8"), (args, res.output, res.exception)


def test_a_huge_result_count_is_all_results(index):
    res = _run(index, "search", "-n", "99999999999999999999", "--json", "alpha")
    assert res.exit_code == 0 or _one_line(res, "too large"), (res.output, res.exception)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_min_match_must_be_finite(index, value):
    res = _run(index, "search", "--mode", "msm", "--min-match", value, "alpha")
    assert _one_line(res, f"--min-match {float(value)!r}", "finite"), (res.output, res.exception)


def test_too_many_tags_name_the_limit(index):
    tags = [a for i in range(MAX_TAGS + 1) for a in ("--tag", f"t{i}")]
    res = _run(index, "search", *tags, "alpha")
    assert _one_line(res, "--tag", f"at most {MAX_TAGS}"), (res.output, res.exception)
    same = [a for _ in range(2 * MAX_TAGS) for a in ("--tag", "alpha")]  # repeats count once
    assert _run(index, "search", *same, "alpha").exit_code == 0


def test_a_real_argv_with_invalid_utf8_bytes(index, tmp_path):
    """What a shell passes: raw bytes in argv (decoded by Python with surrogateescape)."""
    env = dict(os.environ, QMDLAB_INDEX=str(index))
    for argv in ([b"search", b"alpha \xff\xfe"], [b"get", b"c0/\xff.md"]):
        proc = subprocess.run(
            [os.fsencode(sys.executable), b"-m", b"qmdlab.cli", *argv], env=env, capture_output=True, timeout=120
        )
        err = proc.stderr.decode("utf-8", "replace")
        assert "Traceback" not in err and proc.returncode in (0, 1), err
        if proc.returncode == 1:
            assert err.count("\n") == 1, err


def test_a_binary_collections_yaml_is_named_in_one_line(index):
    (index / "collections.yaml").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    res = _run(index, "collection", "list")
    assert _one_line(res, "collections.yaml: not UTF-8 text", "fix or delete the file"), (res.output, res.exception)
