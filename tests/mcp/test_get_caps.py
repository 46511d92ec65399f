"""The MCP ``get`` and ``multi_get`` tools' ``maxChars`` (caps on result text):
the text is cut by :func:`qmdlab.search.navigate.cap_text`, saying how much was left out and the
line to read on from, as ``jump_to_ref``/``read_chunks`` do; no cap by default."""

from __future__ import annotations

import pytest

from qmdlab.mcp_server.backend import McpBackend
from qmdlab.search.navigate import cap_text
from qmdlab.store import Index

BODY = "# Long\n\n" + "\n".join(f"row {i} " + "y" * 40 for i in range(1, 61)) + "\n"


@pytest.fixture
def backend(tmp_path, qmdlab_home):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "long.md").write_text(BODY, encoding="utf-8")
    (notes / "short.md").write_text("# Short\n\nTiny.\n", encoding="utf-8")
    idx = Index.open(tmp_path / "idx")
    idx.add_collection("notes", notes)
    idx.update(["notes"])
    yield McpBackend(idx)
    idx.close()


def test_get_max_chars_caps_the_text_like_cap_text(backend):
    _, whole = backend.get("notes/long.md", line_numbers=False)
    assert whole["text"] == BODY.rstrip("\n") and not whole["truncated"]  # no cap by default
    _, d = backend.get("notes/long.md", line_numbers=False, max_chars=200)
    assert d["text"] == cap_text(BODY.rstrip("\n"), 200, read_on=("notes/long.md", 1)).text
    assert d["truncated"] and d["text"].endswith("read on with `qmdlab get notes/long.md:7`]")
    assert (d["line_start"], d["line_end"]) == (1, 6)  # the closing note is not a line of the document
    # a line range keeps its own first line for the read-on line; a text under the cap is untouched
    _, d = backend.get("notes/long.md:20:10", line_numbers=False, max_chars=100)
    assert d["text"].startswith("row 18 ") and "read on with `qmdlab get notes/long.md:22`" in d["text"]
    _, d = backend.get("notes/long.md:20:2", line_numbers=False, max_chars=1000)
    assert d["text"].count("\n") == 1 and "more characters" not in d["text"]
    # line numbers are part of the capped text
    text, d = backend.get("notes/long.md", max_chars=120)  # numbered by default, as qmd: `N: line`
    assert d["text"].startswith("1: # Long\n2: \n3: row 1 ")
    assert "more characters" in text


def test_multi_get_max_chars_caps_each_document(backend):
    _, data = backend.multi_get("notes/*.md", line_numbers=False, max_chars=50)
    docs = {x["docno"]: x for x in data["documents"]}
    assert docs["notes/long.md"]["truncated"]
    assert docs["notes/long.md"]["text"] == cap_text(BODY.rstrip("\n"), 50, read_on=("notes/long.md", 1)).text
    assert docs["notes/short.md"]["text"] == "# Short\n\nTiny." and not docs["notes/short.md"]["truncated"]
    _, data = backend.multi_get("notes/*.md", line_numbers=False)
    assert {x["docno"]: x["text"] for x in data["documents"]}["notes/long.md"] == BODY.rstrip("\n")
