"""qmd's command line runs unchanged: ``--index`` after the verb, qmd's options a verb does not
have ignored with a note, qmd's exit codes (usage errors and no-match 1), a docid without ``#``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.qmd_argv import _index_option, _take_out


@pytest.fixture
def kb(tmp_path, notes):
    """An index named by directory, with the notes as collection ``kb``; returns its path."""
    idx_dir = str(tmp_path / "idx")
    res = CliRunner().invoke(cli, ["--index", idx_dir, "collection", "add", str(notes), "--name", "kb"])
    assert res.exit_code == 0, res.output
    return idx_dir


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), env={"QMDLAB_INDEX": None, **(env or {})})


def test_index_after_the_verb_is_the_global_option(kb, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no project index here; without --index the default index is empty
    res = invoke("search", "rebase", "--index", kb, "--format", "files")
    assert res.exit_code == 0, res.output
    assert ",qmd://kb/git.md" in res.output
    res = invoke("search", "--index=" + kb, "pasta", "--json")
    assert json.loads(res.stdout)[0]["file"] == "qmd://kb/cooking/pasta.md"
    # after --, it is a query word
    res = invoke("--index", kb, "search", "--", "--index")
    assert res.exit_code == 0 and "No results." in res.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("search", "rebase", "--no-rerank"),
        ("search", "rebase", "-C", "40"),
        ("search", "rebase", "--explain"),
        ("search", "rebase", "--intent", "version control", "--full-path"),
        ("ls", "--json"),
        ("collection", "list", "--json"),
        ("get", "kb/git.md", "--full"),
        ("status", "--verbose"),
    ],
)
def test_qmds_options_are_ignored_with_a_note(kb, args):
    res = invoke("--index", kb, *args)
    assert res.exit_code == 0, res.output
    dropped = [a for a in args[1:] if a.startswith("-")]
    for opt in dropped:
        assert f"note: ignoring {opt}" in res.stderr
    assert "40" not in res.stderr.replace("ignoring -C 40", "")  # the value went with its option
    if args[0] == "search":
        assert "kb/git.md" in res.stdout  # the query itself was not changed by the dropped options


def test_options_qmdlab_has_are_still_checked(kb):
    res = invoke("--index", kb, "search", "rebase", "-n", "zero")
    assert res.exit_code == 1 and "'zero' is not a valid integer" in res.output
    res = invoke("--index", kb, "nosuchverb")
    assert res.exit_code == 1 and "No such command" in res.output


def test_query_words_are_joined_as_qmd_joins_them(kb):
    one = invoke("--index", kb, "search", "git rebase", "--json").stdout
    assert invoke("--index", kb, "search", "git", "rebase", "--json").stdout == one


@pytest.mark.parametrize("verb", ["search", "vsearch", "query"])
def test_an_empty_query_is_a_usage_error(kb, verb):
    for args in ([verb], [verb, ""], [verb, "  "]):
        res = invoke("--index", kb, *args)
        assert res.exit_code == 1, (args, res.output)
        assert f"give a query: qmdlab {verb}" in res.output


def test_multi_get_exit_codes_follow_qmd(kb):
    res = invoke("--index", kb, "multi-get", "kb/nothing/*")
    assert res.exit_code == 1 and "No files matched pattern: kb/nothing/*" in res.stderr
    res = invoke("--index", kb, "multi-get", "#abcdef")
    assert res.exit_code == 1 and "no document" in res.stderr
    # a list goes on past a name it cannot find, as qmd's
    res = invoke("--index", kb, "multi-get", "kb/git.md,kb/missing.md", "--json")
    assert res.exit_code == 0 and "no document 'kb/missing.md'" in res.stderr
    assert [d["file"] for d in json.loads(res.stdout)] == ["qmd://kb/git.md"]


def test_a_docid_without_hash_resolves(kb):
    listing = invoke("--index", kb, "ls", "kb").stdout
    docid = next(line.split("\t")[1] for line in listing.splitlines() if line.startswith("kb/git.md"))
    bare = docid.lstrip("#")
    res = invoke("--index", kb, "get", bare, "--no-header")
    assert res.exit_code == 0 and "Use git rebase -i" in res.stdout
    res = invoke("--index", kb, "multi-get", bare, "--json")
    assert json.loads(res.stdout)[0]["file"] == "qmd://kb/git.md"
    assert invoke("--index", kb, "get", "abcdef0").exit_code == 1  # six hex digits that name nothing


def test_take_out_splits_up_to_the_double_dash():
    tokens = ["search", "--index", "a", "-n", "5", "--index=b", "--", "--index", "c"]
    kept, taken = _take_out(tokens, lambda i: _index_option(tokens, i))
    assert kept == ["search", "-n", "5", "--", "--index", "c"]
    assert taken == ["--index", "a", "--index=b"]
    last = ["rebase", "--index"]  # no value after it: not an --index option to move
    assert _take_out(last, lambda i: _index_option(last, i)) == (last, [])
