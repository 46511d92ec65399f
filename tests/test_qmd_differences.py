"""qmd's documented commands against ``qmdlab``: each is accepted (click parses it) or is a row of
``docs/qmd-differences.md``; every switch the document offers to restore qmd's behaviour parses too.
The page is generated from the conformance table of ``tests/test_qmd_conformance.py`` (its
deviation rows), which also asserts the behaviour of the rows that match qmd's.

``QMD_COMMANDS`` is taken from qmd 2.8.3's ``src/cli/qmd.ts`` help text and its README's examples:
``(command line after "qmd", the document's row for it or None)``. A row names a deviation even
when the command parses (a default that differs, say), so a row key may sit on an accepted command.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "qmd-differences.md"

QMD_COMMANDS: list[tuple[str, str | None]] = [
    # search
    ("query 'how does auth work'", None),
    ("query $'lex: CAP theorem\\nvec: consistency'", None),
    ("query -n 10 --min-score 0.3 'API design patterns'", None),
    ("query --json --explain 'quarterly reports'", None),
    ("query 'expand: quarterly reports'", None),
    ("query --explain --csv 'quarterly reports'", "--explain (csv, xml, files)"),
    ("query --intent 'web page load times' 'slow pages'", None),
    ("query --no-rerank q", None),
    ("query -C 20 q", None),
    ("query --candidate-limit 20 q", None),
    ("query --all --files --min-score 0.4 'error handling'", None),
    ("query --format json q", None),
    ("query -c notes -c docs q", None),
    ("query --line-numbers q", None),
    ("query --full-path q", "--full-path"),
    ("query --no-gpu q", "--no-gpu"),
    ("search 'project timeline'", "title"),
    ("search API -c notes", "qmd search -n"),
    ("search --json -n 10 authentication", "snippet line"),
    ("search --md --full 'error handling'", None),
    ("search --csv q", "snippet lines"),
    ("search --xml q", None),
    ("search --all --files --min-score 0.3 API", None),
    ("search --line-numbers q", None),
    ("search --json --line-numbers q", "--line-numbers (json, md, xml)"),
    ("search --json q", "score (json, --files)"),
    ("search --format cli q", "--format cli"),
    ("--index work search --json q", "file ?index=NAME"),
    ("search --full-path q", "--full-path"),
    ("vsearch 'how to deploy'", "qmd vsearch --min-score"),
    ("vsearch --intent 'deploy to prod' 'how to deploy'", "vsearch --intent (expansion)"),
    ("vector-search 'how to deploy'", "qmd vector-search"),
    ("deep-search 'quarterly planning'", "qmd deep-search"),
    ("--index work search 'quarterly reports'", None),
    # documents
    ("get notes/meeting.md", "qmd get line numbers"),
    ("get qmd://notes/meeting.md", None),
    ("get '#abc123'", None),
    ("get notes/meeting.md:50 -l 100", None),
    ("get notes/meeting.md:120:40", None),
    ("get '#abc123:120:40'", None),
    ("get notes/meeting.md --from 50", None),
    ("get notes/meeting.md --no-line-numbers", "get final newline"),
    ("get docs/api-reference.md --full", "qmd get --full"),
    ("get notes/meeting.md --full-path", "--full-path"),
    ("multi-get 'journals/2025-05*.md'", "multi-get order"),
    ("multi-get 'doc1.md, doc2.md, #abc123'", None),
    ("multi-get 'docs/*.md' --max-bytes 20480", None),
    ("multi-get 'docs/*.md' --json", None),
    ("multi-get 'docs/*.md' -l 5", None),
    ("multi-get 'docs/*.md' --no-line-numbers", None),
    ("multi-get 'docs/*.md' --format xml", None),
    ("multi-get 'docs/*.md' --full-path", "--full-path"),
    ("ls", None),
    ("ls notes", "ls rows"),
    ("ls notes/2024", None),
    ("ls qmd://notes/2024", None),
    # collections and contexts
    ("collection add ~/notes --name notes", "qmd collection add (built-in exclusions)"),
    ("collection add . --mask '**/*.md'", None),
    ("collection add . --glob '**/*.md'", None),
    ("collection list", None),
    ("collection remove notes", None),
    ("collection rm notes", None),
    ("collection rename old new", None),
    ("collection mv old new", None),
    ("collection show notes", None),
    ("collection info notes", None),
    ("collection update-cmd wiki 'git pull --ff-only'", "qmd update (update commands)"),
    ("collection update-cmd wiki", None),
    ("collection set-update wiki 'git pull'", None),
    ("collection include archive", None),
    ("collection exclude archive", None),
    ("collection help", "qmd collection help"),
    ("context add qmd://notes 'Personal notes and ideas'", None),
    ("context add qmd://journals/2024 'Context for 2024 journals'", "context prefixes"),
    ("context add / 'Global context for all collections'", None),
    ("context add 'Context for current directory'", None),
    ("context add ~/notes/2024 'Context for 2024 journals'", None),
    ("context list", None),
    ("context rm qmd://journals/2024", None),
    ("context remove /", None),
    # maintenance
    ("init", "qmd init"),
    ("status", "status layout"),
    ("update", None),
    ("update --pull", None),
    ("embed", "embed --timeout (default)"),
    ("embed --timeout 30", None),
    ("embed -f", None),
    ("embed -c notes", None),
    ("embed --max-docs-per-batch 64", "qmd embed --max-docs-per-batch / --max-batch-mb"),
    ("embed --max-batch-mb 64", "qmd embed --max-docs-per-batch / --max-batch-mb"),
    ("embed --chunk-strategy auto", "qmd embed --chunk-strategy"),
    ("cleanup", None),
    ("cleanup --dry-run", None),
    ("pull", None),
    ("pull --refresh", None),
    ("pull --progress", None),
    ("doctor", None),
    ("trust", "qmd trust"),
    ("trust list", "qmd trust"),
    ("trust revoke", "qmd trust"),
    # agents
    ("mcp", None),
    ("mcp --http", None),
    ("mcp --http --port 8080", None),
    ("mcp --http --host 0.0.0.0", None),
    ("mcp --http --daemon", "qmd mcp --http --daemon"),
    ("mcp stop", None),
    ("skills list", "qmd skills"),
    ("skills get qmd --full", "qmd skills"),
    ("skills path", "qmd skills"),
    ("skill show", None),
    ("skill install", "qmd skill install"),
    ("skill install --global", "qmd skill install"),
    ("skill install --yes", "qmd skill install"),
    ("skill install -f", "qmd skill install"),
    ("--skill", "qmd --skill"),
    # benchmarks
    ("bench src/bench/fixtures/example.json", "qmd bench"),
    ("bench my-fixture.json --json", "qmd bench"),
    ("bench my-fixture.json -c my-collection", "qmd bench"),
    # global
    ("--version", None),
    ("-v", None),
    ("--help", None),
]
# keys of rows about a config file or environment rather than a command line
CONFIG_ROWS = {
    "editor_uri",
    "index.yml",
    "INDEX_PATH",
    "XDG_CACHE_HOME",
    "QMD_SQLITE_BUSY_TIMEOUT (default)",
    "QMD_ALLOWED_ORIGINS=* and a wildcard bind",
    "QMD_EMBED_CONTEXT_SIZE / QMD_RERANK_CONTEXT_SIZE / QMD_EXPAND_CONTEXT_SIZE",
}


def doc_rows() -> dict[str, str]:
    """``{first cell without backticks: whole row}`` of the document's table."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 4:
            rows[cells[0].replace("`", "")] = line
    return rows


def test_parses_rejects_what_click_rejects(click_accepts):
    parses = click_accepts
    assert parses(["search", "q", "-n", "3"]) == (True, "")
    assert parses(["search", "q", "--no-such-flag"])[0]  # an option a verb lacks is ignored, as qmd ignores it
    assert not parses(["no-such-verb"])[0]
    assert not parses(["collection"])[0]  # a group needs its verb
    assert parses(["trust"]) == (True, "")  # this one runs without one
    assert not parses(["get"])[0]  # a missing argument


@pytest.mark.parametrize("line, row", QMD_COMMANDS, ids=[c for c, _ in QMD_COMMANDS])
def test_qmd_command_is_accepted_or_listed(line, row, click_accepts):
    ok, why = click_accepts(shlex.split(line.replace("$'", "'")))
    rows = doc_rows()
    if row is not None:
        assert row in rows, f"qmd {line}: the row {row!r} is missing from {DOC.name}"
    assert ok or row is not None, f"`qmdlab {line}` is rejected ({why}) and no row of {DOC.name} names it"


def test_every_row_is_about_a_listed_command_or_setting():
    used = {row for _, row in QMD_COMMANDS if row} | CONFIG_ROWS
    # rows about the MCP server's tools and the REST routes come from the conformance table, not a command line
    stale = sorted(k for k in set(doc_rows()) - used if not k.startswith(("MCP ", "REST ", "POST ", "GET ")))
    assert not stale, f"rows of {DOC.name} no qmd command in QMD_COMMANDS refers to: {stale}"
    assert len(doc_rows()) >= 20


def test_most_qmd_commands_are_accepted(click_accepts):
    accepted = [line for line, _ in QMD_COMMANDS if click_accepts(shlex.split(line.replace("$'", "'")))[0]]
    assert len(accepted) >= 0.8 * len(QMD_COMMANDS), sorted(set(c for c, _ in QMD_COMMANDS) - set(accepted))


PLACEHOLDERS = {"N": "8181"}


def restore_commands() -> list[str]:
    out = []
    for line in doc_rows().values():
        restore = line.strip().strip("|").split("|")[-1]
        for snippet in re.findall(r"`(qmdlab [^`]+)`", restore):
            out.append(snippet)
    return out


def test_every_restore_switch_parses(click_accepts):
    cmds = restore_commands()
    assert len(cmds) >= 15
    for snippet in cmds:
        argv = [PLACEHOLDERS.get(w, w) for w in shlex.split(snippet.replace("[", "").replace("]", ""))[1:]]
        ok, why = click_accepts(argv)
        assert ok, f"{DOC.name} offers `{snippet}`, which qmdlab rejects: {why}"
