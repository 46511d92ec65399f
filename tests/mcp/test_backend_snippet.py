"""The MCP backend's snippet fallback (a final row the pipeline's ``results`` table lacks).

The branch is rare — results are normally built by ``Lab.query`` — and once imported a helper
that did not exist; this test takes it on purpose, with a real index and no model.
"""

from __future__ import annotations

import polars as pl

from qmdlab.mcp_server.backend import McpBackend
from qmdlab.pipeline.results import snippet
from qmdlab.pipeline.trace import SCHEMAS, Trace
from qmdlab.store import Index

BODY = "# Pasta\n\nBoil water.\n\n## Sauce\n\nTomato and basil sauce.\n"


def test_result_without_a_results_row_gets_the_shared_snippet(tmp_path, qmdlab_home):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "pasta.md").write_text(BODY, encoding="utf-8")
    idx = Index.open(tmp_path / "idx")
    idx.add_collection("notes", notes)
    idx.update(["notes"])
    final = pl.DataFrame(
        {
            "qid": ["q"],
            "docno": ["notes/pasta.md"],
            "fused_rank": [1],
            "position_score": [1.0],
            "blend_weight": [1.0],
            "rerank_score": [None],
            "final_score": [0.5],
            "final_rank": [1],
        },
        schema=SCHEMAS["final"],
    )
    trace = Trace(final=final)  # empty results table: the fallback branch
    (row,) = McpBackend(idx)._results(trace, "tomato basil", None, explain=False)
    expected = snippet(BODY, "tomato basil")
    # qmd's shape: line = the best line, the snippet opened by its @@ header and numbered
    assert (row["line"], row["snippet_line"]) == (expected.best_line, expected.line)
    header, _, text = row["snippet"].partition("\n")
    assert header.startswith(f"@@ -{expected.line},") and text.split("\n")[0] == f"{expected.line}: "
    assert "Tomato and basil sauce." in row["snippet"]
    assert row["heading_path"] == ["Pasta", "Sauce"]
