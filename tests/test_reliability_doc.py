"""docs/RELIABILITY.md restates code: its capacity table gives each limit's default and variable
(:mod:`qmdlab.store.limits`), its warning share, and the ``QMDLAB_*`` variables it (and the other
design pages) mention are ones :data:`qmdlab.environment.ENVIRONMENT` documents."""

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
