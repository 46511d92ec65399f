"""docs/time-limits.md names every time limit with its default: each default is checked against the
code, and every time field of the pipeline config and the HTTP server's limits has a row."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from qmdlab.mcp_server.http import HttpLimits
from qmdlab.models._http import DEFAULT_TIMEOUT
from qmdlab.models._llama import DEFAULT_IDLE_TIMEOUT
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.store.index import BUSY_TIMEOUT_S
from qmdlab.store.limits import QUERY_TIME_BUDGET_MS

DOC = Path(__file__).resolve().parents[1] / "docs" / "time-limits.md"


def _rows() -> dict[str, str]:
    """limit name (the first cell, without backticks) → its default cell."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("limit", "---"):
            rows[cells[0].strip("`")] = cells[2]
    return rows


def _number(cell: str) -> float:
    m = re.match(r"`([0-9.]+)`", cell)
    assert m, f"default cell {cell!r} does not start with a backticked number"
    return float(m.group(1))


def test_every_default_matches_the_code():
    limits, cfg = HttpLimits(), PipelineConfig()
    expected = {
        "budget_s": cfg.budget_s,
        "stage_budget_s": cfg.stage_budget_s,
        "QMDLAB_QUERY_BUDGET_MS": QUERY_TIME_BUDGET_MS,
        "QMDLAB_HTTP_TIMEOUT": DEFAULT_TIMEOUT,
        "idle unload": DEFAULT_IDLE_TIMEOUT,
        "busy timeout": BUSY_TIMEOUT_S,
        "query timeout": limits.query_timeout_s,
        "header timeout": limits.header_timeout_s,
        "body timeout": limits.body_timeout_s,
        "keep-alive": limits.keep_alive_s,
        "MCP session idle": limits.session_idle_s,
    }
    rows = _rows()
    assert set(rows) == set(expected)
    for name, value in expected.items():
        assert _number(rows[name]) == float(value), name


def test_every_time_field_has_a_row():
    text = DOC.read_text(encoding="utf-8")
    cfg_fields = [f.name for f in dataclasses.fields(PipelineConfig) if f.name.endswith("budget_s")]
    http_fields = [f.name for f in dataclasses.fields(HttpLimits) if f.name.endswith("_s")]
    assert cfg_fields == ["stage_budget_s", "budget_s"]
    for name in cfg_fields + [f"HttpLimits.{n}" for n in http_fields]:
        assert f"`{name}`" in text, name
