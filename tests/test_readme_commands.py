"""Every ``qmdlab …`` command in the docs' shell blocks parses against the CLI, and the cheap ones run.

The commands are read from the fenced shell blocks (```` ```bash ````, ```` ```sh ````, unlabelled …)
of README.md, docs/*.md and qmdlab/training/README.md: line continuations joined, ``$`` prompts and
trailing ``# comments`` dropped, ``&&``/``;``/``|`` chains split, ``VAR=value`` prefixes skipped.
Each is checked by click's own parser, level by level (``make_context`` on the root group, then on
each sub-command with ``resilient_parsing=False``): the command path exists, every option exists
on that command, each takes the values it is given; an option the command does not have fails here
although the CLI itself drops it with a note (qmd's leniency is for qmd's scripts, not for the docs).
The verbs that need no model and no network (collections, search, get, status, ls, context, update)
then run for real, in the README's order, on a copy of the bundled corpus under a temporary
``QMDLAB_HOME``. Every shell block of the README is valid bash, and its llama.cpp build flags are the
Makefile's.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from qmdlab.cli import cli

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "qmdlab" / "training" / "README.md"]
SHELL = {"", "bash", "sh", "shell", "console", "zsh"}
CHAINS = {";", "&&", "||", "|", "&"}

RUN = {("collection", "add"), ("search",), ("get",), ("status",), ("ls",), ("context", "add"), ("update",)}
"""Command paths run for real: no model, no network, seconds on the bundled corpus."""


def shell_blocks(text: str) -> list[tuple[int, list[str]]]:
    """``(first line number, lines)`` of each fenced block whose language is a shell (or none)."""
    blocks, lang, start, lines = [], None, 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        fence = re.match(r"^\s*```\s*([\w+-]*)", line)
        if fence and lang is None:
            lang, start, lines = fence.group(1).lower(), number + 1, []
        elif fence:
            if lang in SHELL:
                blocks.append((start, lines))
            lang = None
        elif lang is not None:
            lines.append(line)
    return blocks


def commands(text: str) -> list[tuple[int, list[str]]]:
    """``(line number, argv after "qmdlab")`` of every qmdlab command in the shell blocks of ``text``."""
    found = []
    for start, lines in shell_blocks(text):
        joined, pending, first = [], "", None
        for offset, line in enumerate(lines):
            first = start + offset if first is None else first
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            joined.append((first, pending + line))
            pending, first = "", None
        for number, line in joined:
            line = re.sub(r"^\s*\$\s+", "", line)
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split, lexer.commenters = True, "#"
            segment: list[str] = []
            for token in [*lexer, ";"]:
                if token not in CHAINS:
                    segment.append(token)
                    continue
                while segment and re.match(r"^\w+=", segment[0]):  # VAR=value qmdlab …
                    segment.pop(0)
                if segment and segment[0] == "qmdlab":
                    found.append((number, [t for t in segment[1:] if not t.startswith((">", "<"))]))
                segment = []
    return found


def _doc_commands() -> list[tuple[str, list[str]]]:
    return [
        (f"{path.relative_to(REPO)}:{number}", argv)
        for path in DOCS
        if path.exists()
        for number, argv in commands(path.read_text(encoding="utf-8"))
    ]


DOC_COMMANDS = _doc_commands()


@pytest.fixture(name="strict_parse")
def strict_parse_fixture(click_parse):
    """``click_parse``, with an option the command does not have as the usage error it would be without
    qmd's leniency (:mod:`qmdlab.qmd_argv` drops it with a note; a document must not rely on that)."""
    from qmdlab.qmd_argv import qmd_argv

    def parse(argv: list[str]):
        _, notes = qmd_argv(cli, click.Context(cli, info_name="qmdlab"), argv)
        if notes:
            raise click.UsageError(f"No such option: {notes[0].removeprefix('note: ignoring ')}")
        return click_parse(argv)

    return parse


def test_commands_are_read_as_a_shell_reads_them():
    text = "\n".join(
        [
            "```bash",
            "$ qmdlab search 'x y' -n 3   # top 3",
            "qmdlab update \\",
            "    --allow-vanish && qmdlab status",
            "QMDLAB_PRESET=fake qmdlab ls | head > out.txt",
            "```",
            "```python",
            "qmdlab.query('x')",
            "```",
        ]
    )
    assert commands(text) == [
        (2, ["search", "x y", "-n", "3"]),
        (3, ["update", "--allow-vanish"]),
        (3, ["status"]),
        (5, ["ls"]),
    ]


def test_the_docs_have_commands():
    where = {w.split(":")[0] for w, _ in DOC_COMMANDS}
    assert len(DOC_COMMANDS) > 30 and {"README.md", "qmdlab/training/README.md"} <= where


@pytest.mark.parametrize(("where", "argv"), DOC_COMMANDS, ids=[f"{w} {' '.join(a)}" for w, a in DOC_COMMANDS])
def test_doc_command_parses(where, argv, monkeypatch, strict_parse):
    monkeypatch.chdir(REPO)  # the docs' relative paths (data/corpus, qmdlab/training/configs/…) are the repository's
    try:
        strict_parse(argv)
    except click.UsageError as err:
        pytest.fail(f"{where}: qmdlab {shlex.join(argv)}: {err.format_message()}", pytrace=False)


def test_parse_catches_what_a_doc_can_get_wrong(strict_parse):
    parse = strict_parse
    with pytest.raises(click.UsageError, match="No such command"):
        parse(["serch", "x"])
    with pytest.raises(click.UsageError, match="No such option"):
        parse(["query", "x", "--expand-modle", "m.gguf"])
    with pytest.raises(click.UsageError, match="requires an argument"):
        parse(["search", "x", "-n"])
    with pytest.raises(click.UsageError, match="Got unexpected extra argument"):
        parse(["status", "extra"])
    assert parse(["collection", "add", "data/corpus", "--name", "notes"])[0] == ("collection", "add")


def test_cheap_doc_commands_run(tmp_path, qmdlab_home, monkeypatch, click_parse):
    monkeypatch.chdir(REPO)
    cheap = [(where, argv, path) for where, argv in DOC_COMMANDS if (path := click_parse(argv)[0]) in RUN]
    shutil.copytree(REPO / "data" / "corpus", tmp_path / "data" / "corpus")
    monkeypatch.chdir(tmp_path)  # data/corpus is the copy: nothing is written beside the repository's
    monkeypatch.setenv("QMDLAB_PRESET", "fake")  # nothing here loads a model; if one did, a fake
    ran = []
    for where, argv, path in cheap:
        res = CliRunner().invoke(cli, argv)
        assert res.exit_code == 0, f"{where}: qmdlab {shlex.join(argv)} exited {res.exit_code}: {res.output}"
        ran.append(path)
    assert {("collection", "add"), ("search",), ("get",), ("status",)} <= set(ran)


def test_every_readme_shell_block_is_valid_bash():
    """What a reader pastes into a shell parses there: quotes closed, continuations joined (``bash -n``)."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    text = (REPO / "README.md").read_text(encoding="utf-8")
    for start, lines in shell_blocks(text):
        r = subprocess.run([bash, "-n"], input="\n".join(lines) + "\n", capture_output=True, text=True)
        assert r.returncode == 0, f"README.md:{start}: not valid bash: {r.stderr.strip()}"


def makefile_x86_64_cmake_args(makefile: str) -> list[str]:
    """The Makefile's ``LLAMA_CMAKE_ARGS`` for x86_64 (continuation lines joined), as a list of flags."""
    joined = re.sub(r"\\\n", " ", makefile)
    block = joined.split("ifeq ($(ARCH),x86_64)", 1)[1].split("\nelse", 1)[0]
    (line,) = [x for x in block.splitlines() if re.match(r"\s*LLAMA_CMAKE_ARGS\s*\??=", x)]
    return line.split("=", 1)[1].split()


def test_makefile_flags_are_read_as_make_reads_them():
    makefile = (
        "ifeq ($(ARCH),x86_64)\nLLAMA_CMAKE_ARGS ?= -DA=ON \\\n  -DB=OFF\nelse\nLLAMA_CMAKE_ARGS ?= -DC=1\nendif\n"
    )
    assert makefile_x86_64_cmake_args(makefile) == ["-DA=ON", "-DB=OFF"]


def test_the_llama_flags_are_written_once_in_the_makefile():
    """The README's manual llama.cpp step is the Makefile's own target (the flags and the CPU-variant
    patch live there, written once); ``make llama-cmake-args`` prints the flags it builds with."""
    readme = re.sub(r"\\\n", " ", (REPO / "README.md").read_text(encoding="utf-8"))
    assert not re.findall(r'CMAKE_ARGS="', readme), "the README should not repeat the Makefile's llama.cpp flags"
    assert "make install-llama" in readme
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^install-llama: llama-wheel$", makefile, re.M)
    if shutil.which("make") and os.uname().machine == "x86_64":
        printed = subprocess.run(["make", "-s", "llama-cmake-args"], cwd=REPO, capture_output=True, text=True).stdout
        assert printed.split() == makefile_x86_64_cmake_args(makefile)
