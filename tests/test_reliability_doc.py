"""docs/RELIABILITY.md restates code: its capacity table gives each limit's default and variable
(:mod:`qmdlab.store.limits`), its warning share, and the ``QMDLAB_*`` variables it (and the other
design pages) mention are ones :data:`qmdlab.environment.ENVIRONMENT` documents. Its skip reasons,
HTTP and parser limit tables, reading and creating verbs, integrity-check size and the crash and
fuzz harness sizes are the code's too."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qmdlab.environment import ENVIRONMENT
from qmdlab.store import limits

DOCS = Path(__file__).resolve().parents[1] / "docs"
RELIABILITY = DOCS / "RELIABILITY.md"
#: The capacity table's first column → the limit's kind in qmdlab.store.limits.
KINDS = {
    "active documents": "documents",
    "chunks": "chunks",
    "vector matrix": "vector_bytes",
    "per-query time": "query_ms",
}
UNIT = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}


def _capacity_rows() -> dict[str, list[str]]:
    lines = RELIABILITY.read_text(encoding="utf-8").split("## Capacity limits", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| limit |"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def _amount(text: str) -> float:
    """``250,000`` → 250000; ``4 GiB (float32)`` → 4 * 2**30; ``30,000 ms`` → 30000."""
    m = re.match(r"([\d,.]+)\s*(KiB|MiB|GiB)?", text)
    assert m, text
    return float(m[1].replace(",", "")) * UNIT.get(m[2] or "", 1)


def test_the_capacity_table_is_the_limits_module():
    rows = _capacity_rows()
    assert sorted(KINDS[r] for r in rows) == sorted(limits.DEFAULTS), f"capacity table rows: {list(rows)}"
    for name, (default, variable, _) in rows.items():
        kind = KINDS[name]
        assert _amount(default) == limits.DEFAULTS[kind], (
            f"{name}: the doc says {default}, the code {limits.DEFAULTS[kind]}"
        )
        assert variable.strip("`") == limits.ENV[kind], f"{name}: the doc says {variable}, the code {limits.ENV[kind]}"


def test_the_warning_share_is_the_code():
    m = re.search(r"At (\d+) % of a limit", RELIABILITY.read_text(encoding="utf-8"))
    assert m and int(m[1]) / 100 == limits.WARN_FRACTION


@pytest.mark.parametrize("page", ["RELIABILITY.md", "design.md", "ARCHITECTURE.md"])
def test_every_variable_a_page_names_is_documented(page):
    names = set(re.findall(r"QMDLAB_[A-Z][A-Z0-9_]*[A-Z0-9]", (DOCS / page).read_text(encoding="utf-8")))
    unknown = sorted(n for n in names if n not in ENVIRONMENT)
    assert not unknown, f"docs/{page} names variables qmdlab.environment.ENVIRONMENT does not list: {unknown}"


def _table_after(heading: str, first_header: str) -> list[list[str]]:
    """The cells of each row of the first table under ``## heading`` whose header starts ``| first_header |``."""
    lines = RELIABILITY.read_text(encoding="utf-8").split(f"## {heading}", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split(" | ")])
    return rows


def _count(text: str) -> float:
    """The first number of a cell: ``1 MiB`` → 2**20, ``10,000 characters`` → 10000."""
    return _amount(re.search(r"[\d,.]+\s*(?:KiB|MiB|GiB)?", text)[0])


def test_the_skip_reasons_are_the_updates():
    from qmdlab.store.scan import DEFAULT_MAX_BYTES
    from qmdlab.store.update import UPDATE_SKIP_REASONS

    rows = _table_after("Files that cannot be indexed", "reason")
    assert [r[0].strip("`") for r in rows] == list(UPDATE_SKIP_REASONS)
    large = next(r for r in rows if r[0] == "`large`")
    assert _count(large[1]) == DEFAULT_MAX_BYTES


def _assert_counts(rows: dict[str, str], code: dict[str, int], table: str) -> None:
    """Every row named in ``code`` is in the doc's ``table`` and states the code's number."""
    for name, value in code.items():
        assert name in rows, f"docs/RELIABILITY.md's {table} has no row {name!r}"
        assert _count(rows[name]) == value, f"{name}: the doc says {rows[name]}, the code {value}"


def test_the_http_limits_are_the_servers():
    from qmdlab.mcp_server import http
    from qmdlab.search import filters, lexical

    rows = {r[0]: r[1] for r in _table_after("The HTTP server", "limit")}
    code = {
        "request body, every endpoint": http.MAX_BODY_BYTES,
        "time to receive a body": http.BODY_TIMEOUT_S,
        "time to send a whole request head": http.HEADER_TIMEOUT_S,
        "idle kept-alive connection": http.KEEP_ALIVE_S,
        "request head size": http.MAX_HEADER_BYTES,
        "MCP session without a request": http.SESSION_IDLE_S,
        "MCP sessions open at once": http.MAX_SESSIONS,
        "one `/query`": http.QUERY_TIMEOUT_S,
        "query text (BM25)": lexical.MAX_QUERY_CHARS,
        "a term repeated in the query": lexical.MAX_TERM_REPEAT,
        "required tags (`--tag`, `tags`)": filters.MAX_TAGS,
    }
    _assert_counts(rows, code, "HTTP table")
    (queued,) = [v for k, v in rows.items() if k.startswith("searches in flight")]
    assert _count(queued) == http.MAX_QUEUED_QUERIES
    assert re.search(rf"{lexical.MAX_QUERY_TERMS} distinct terms", rows["query text (BM25)"])


def test_the_parser_limits_are_the_limits_module():
    rows = {r[0]: r[1] for r in _table_after("Parser limits", "input")}
    code = {
        "a note's front matter block": limits.MAX_FRONT_MATTER_BYTES,
        "its YAML nodes, aliases counted expanded": limits.MAX_FRONT_MATTER_NODES,
        "its nesting": limits.MAX_YAML_DEPTH,
        "its tags": limits.MAX_TAGS,
        "`collections.yaml`, qmd's `index.yml`": limits.MAX_CONFIG_BYTES,
        "a glob (mask, ignore, `multi-get` pattern, an MCP agent's `multi_get`)": limits.MAX_GLOB_CHARS,
        "qmd's `{a,b}` in a pattern": limits.MAX_BRACE_EXPANSIONS,
        "wildcards in one glob that can backtrack": limits.MAX_GLOB_BACKTRACKING,
    }
    _assert_counts(rows, code, "parser-limit table")
    nodes = rows["`collections.yaml`, qmd's `index.yml`"].split(", ")[1]
    assert _count(nodes) == limits.MAX_CONFIG_NODES


def test_the_verb_lists_are_the_stores():
    from qmdlab.store.index import CREATING_VERBS, READ_ONLY_VERBS

    text = RELIABILITY.read_text(encoding="utf-8").replace("\n", " ")
    creating, reading = re.search(r"Only (.*?) creates an index\. Reading verbs \((.*?)\) open", text).groups()
    assert set(re.findall(r"`([^`]+)`", creating)) == CREATING_VERBS

    def verbs(part: str) -> set[str]:
        out = set()
        for v in re.findall(r"`([^`]+)`", part):
            head, _, rest = v.rpartition(" ")
            out |= {f"{head} {r}".strip() for r in rest.split("/")}
        return out

    assert verbs(reading) == READ_ONLY_VERBS, f"doc {sorted(verbs(reading))}, code {sorted(READ_ONLY_VERBS)}"


def test_the_integrity_check_size_is_the_indexes():
    from qmdlab.store.index import INTEGRITY_CHECK_MAX_BYTES

    m = re.search(r"for databases up to ([\d,]+ [KMG]iB)", RELIABILITY.read_text(encoding="utf-8"))
    assert m and _amount(m[1]) == INTEGRITY_CHECK_MAX_BYTES


def test_the_crash_and_fuzz_profiles_are_the_harnesses():
    import ast

    source = (Path(__file__).resolve().parent / "reliability" / "conftest.py").read_text(encoding="utf-8")
    crash = ast.literal_eval(re.search(r"^CRASH = (\{.*?\})\[PROFILE\]", source, re.M | re.S)[1])
    fuzz = ast.literal_eval(re.search(r"^FUZZ_EXAMPLES = (\{.*?\})\[PROFILE\]", source, re.M)[1])
    text = RELIABILITY.read_text(encoding="utf-8").replace("\n", " ")
    m = re.search(r"≥ (\d+) kills \(CI profile, ([\d,]+) files\) or ≥ (\d+) \(`make fuzz`, ([\d,]+) files\)", text)
    assert m, "docs/RELIABILITY.md should give the crash harness's kill counts and corpus sizes"
    assert (int(m[1]), _amount(m[2])) == (crash["ci"]["midwrite_kills"], crash["ci"]["files"])
    assert (int(m[3]), _amount(m[4])) == (crash["deep"]["midwrite_kills"], crash["deep"]["files"])
    m = re.search(r"`make test` runs (\d+) examples per target; `make fuzz` .*? runs ([\d,]+) per target", text)
    assert m and (int(m[1]), _amount(m[2])) == (fuzz["ci"], fuzz["deep"])
