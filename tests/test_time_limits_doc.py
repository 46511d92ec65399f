"""docs/time-limits.md names every time limit with its default: each default is checked against the
code, and every time field of the pipeline config and the HTTP server's limits, and every
``…TIMEOUT…``/``…WAIT…`` constant of qmdlab, has a row."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path

from qmdlab.mcp_server import daemon, http
from qmdlab.mcp_server.http import HttpLimits
from qmdlab.mcp_server.stdio import _DrainingStdio
from qmdlab.models._http import DEFAULT_TIMEOUT, MAX_TIMEOUT
from qmdlab.models._llama import DEFAULT_IDLE_TIMEOUT
from qmdlab.pipeline.budget import DRAIN_TIMEOUT_S
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.store.index import BUSY_TIMEOUT_S
from qmdlab.store.limits import QUERY_TIME_BUDGET_MS
from qmdlab.store.trust import DEFAULT_TIMEOUT_S as UPDATE_COMMAND_TIMEOUT_S

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "time-limits.md"


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
        "largest QMDLAB_HTTP_TIMEOUT": MAX_TIMEOUT,
        "idle unload": DEFAULT_IDLE_TIMEOUT,
        "busy timeout": BUSY_TIMEOUT_S,
        "query timeout": limits.query_timeout_s,
        "header timeout": limits.header_timeout_s,
        "body timeout": limits.body_timeout_s,
        "keep-alive": limits.keep_alive_s,
        "MCP session idle": limits.session_idle_s,
        "model calls at exit": DRAIN_TIMEOUT_S,
        "update command": UPDATE_COMMAND_TIMEOUT_S,
        "/health index wait": http.HEALTH_LOCK_WAIT_S,
        "stdio drain": inspect.signature(_DrainingStdio).parameters["drain_timeout"].default,
        "daemon start": daemon.START_TIMEOUT_S,
        "daemon stop": daemon.STOP_TIMEOUT_S,
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


#: Every module constant of qmdlab named ``…TIMEOUT…`` or ``…WAIT…`` → the row that gives it.
TIME_CONSTANTS = {
    "qmdlab.pipeline.budget.DRAIN_TIMEOUT_S": "model calls at exit",
    "qmdlab.models._llama.DEFAULT_IDLE_TIMEOUT": "idle unload",
    "qmdlab.models._http.DEFAULT_TIMEOUT": "QMDLAB_HTTP_TIMEOUT",
    "qmdlab.models._http.MAX_TIMEOUT": "largest QMDLAB_HTTP_TIMEOUT",
    "qmdlab.store.trust.DEFAULT_TIMEOUT_S": "update command",
    "qmdlab.store.index.BUSY_TIMEOUT_S": "busy timeout",
    "qmdlab.mcp_server.http.BODY_TIMEOUT_S": "body timeout",
    "qmdlab.mcp_server.http.HEADER_TIMEOUT_S": "header timeout",
    "qmdlab.mcp_server.http.QUERY_TIMEOUT_S": "query timeout",
    "qmdlab.mcp_server.http.HEALTH_LOCK_WAIT_S": "/health index wait",
    "qmdlab.mcp_server.daemon.START_TIMEOUT_S": "daemon start",
    "qmdlab.mcp_server.daemon.STOP_TIMEOUT_S": "daemon stop",
}


def test_every_time_constant_has_a_row():
    """A new ``…TIMEOUT…``/``…WAIT…`` constant in qmdlab needs a row on the page (and an entry above)."""
    found = set()
    for path in sorted((REPO / "qmdlab").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for name in re.findall(r"^([A-Z_]*(?:TIMEOUT|WAIT)[A-Z_]*)\s*(?::[^=\n]*)?=", path.read_text("utf-8"), re.M):
            found.add(f"{module}.{name}")
    assert found == set(TIME_CONSTANTS), f"time constants without a row: {sorted(found - set(TIME_CONSTANTS))}"
    rows = _rows()
    for dotted, row in TIME_CONSTANTS.items():
        module, _, name = dotted.rpartition(".")
        value = getattr(importlib.import_module(module), name)
        assert row in rows and _number(rows[row]) == float(value), (dotted, row)
