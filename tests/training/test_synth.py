"""Domain synthesis with a scripted teacher over a real index: sampling, gate filtering, output."""

from __future__ import annotations

import pytest

from qmdlab.training.data import load_examples
from qmdlab.training.synth import EXPAND_PROMPT, SynthConfig, run_synth

GOOD = (
    "hyde: Rotate the database password in the vault, then restart the api pods so they pick it up.\n"
    "lex: rotate database password\nlex: vault password rotation\n"
    "vec: how do I rotate the database password"
)


def scripted_teacher(prompt: str) -> str:
    if prompt.startswith("Here is a passage"):
        return '1. rotate database password\n2. "weekly groceries list"\nSure, here you go!'
    query = prompt.rsplit("Query: ", 1)[1].strip()
    if query == "rotate database password":
        return GOOD + "\n\nQuery: another one\nlex: junk"
    return "Here are expansions:\nlex: groceries"


@pytest.fixture
def index(tmp_path, qmdlab_home):
    from qmdlab.store import Index

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ops.md").write_text(
        "# Ops\n\n" + "To rotate the database password, update the vault entry and "
        "restart the api deployment so the new secret is read. " * 2
    )
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("notes", notes)
    idx.update()
    return idx


def test_synth_keeps_only_gated_high_scoring_examples(tmp_path, index):
    out = tmp_path / "synth" / "synth.jsonl"
    cfg = SynthConfig(collection="notes", output=str(out), n_passages=5, few_shot=0)
    stats = run_synth(cfg, teacher=scripted_teacher, index=index)
    assert stats["passages"] == 1 and stats["queries"] == 2
    assert stats["kept"] == 1 and stats["gate"] == 1
    exs = load_examples(out)
    assert [e.query for e in exs] == ["rotate database password"]
    assert exs[0].category == "synth" and [t for t, _ in exs[0].output] == ["hyde", "lex", "lex", "vec"]
    # a second run appends nothing new: the query is already in the file
    again = run_synth(cfg, teacher=scripted_teacher, index=index)
    assert again["duplicates"] == 1 and again["total_in_file"] == 1


def test_synth_needs_a_collection(index):
    from qmdlab.errors import ConfigError

    with pytest.raises(ConfigError):
        run_synth(SynthConfig(collection=""), teacher=scripted_teacher, index=index)


def test_expand_prompt_carries_examples_and_query():
    text = EXPAND_PROMPT.format(examples="Query: a\nlex: a\n\n", passage="P", query="q")
    assert text.endswith("Query: q\n") and "lex: a" in text
