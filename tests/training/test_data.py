"""Data schema, validation, dedupe, split, TRL records and the shared prompt rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qmdlab.errors import DataFormatError
from qmdlab.training.data import SEED_PATH, dedupe, load_examples, prepare, split, to_sft_record
from qmdlab.training.render import qwen3_prompt, render_prompt
from qmdlab.training.reward import score_expansion

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(
    "line,problem",
    [
        ('{"query": "q", "output": [["lex", "a"]]', "invalid JSON"),
        ('["not", "an", "object"]', "expected a JSON object"),
        ('{"query": "  ", "output": [["lex", "a"]]}', '"query" must be a non-empty string'),
        ('{"query": "q", "output": []}', '"output" must be a non-empty list'),
        ('{"query": "q", "output": [["bm25", "a"]]}', "type 'bm25' is not one of"),
        ('{"query": "q", "output": [["lex", "a\\nb"]]}', "text must be one non-empty line"),
        ('{"query": "q", "output": [["lex"]]}', "expected a [type, text] pair"),
        ('{"query": "q", "output": [["lex", "a"]], "intent": 3}', '"intent" must be a string'),
    ],
)
def test_validation_names_file_and_line(tmp_path, line, problem):
    path = tmp_path / "bad.jsonl"
    good = '{"query": "ok", "output": [["lex", "ok"]]}'
    path.write_text(good + "\n\n" + line + "\n")
    with pytest.raises(DataFormatError) as err:
        load_examples(path)
    assert str(err.value).startswith(f"{path}:3: ")
    assert problem in str(err.value)


def test_fixture_dedupe_and_split_are_stable():
    exs = load_examples(FIXTURES / "mini.jsonl")
    assert len(exs) == 8
    unique = dedupe(exs)
    assert [e.query for e in unique].count("git rebase onto main") == 1
    assert "Git rebase onto MAIN" not in [e.query for e in unique]
    tr1, ev1 = split(unique, eval_fraction=0.3, seed=3)
    tr2, ev2 = split(unique, eval_fraction=0.3, seed=3)
    assert (tr1, ev1) == (tr2, ev2) and len(ev1) == 2 and len(tr1) == 5
    assert not {e.query for e in tr1} & {e.query for e in ev1}
    assert split(unique, eval_fraction=0.3, seed=4) != (tr1, ev1)


def test_prepare_writes_schema_and_trl_files(tmp_path):
    info = prepare(FIXTURES / "mini.jsonl", tmp_path, eval_fraction=0.2, seed=0)
    assert info["n_read"] == 8 and info["n_duplicates"] == 1 and info["n_train"] + info["n_eval"] == 7
    rows = [json.loads(x) for x in (tmp_path / "sft_train.jsonl").read_text().splitlines()]
    assert len(rows) == info["n_train"]
    assert all(r["completion"][0]["content"].startswith("hyde: ") for r in rows)
    assert all(r["chat_template_kwargs"] == {"enable_thinking": False} for r in rows)
    assert len(load_examples(tmp_path / "train.jsonl")) == info["n_train"]


def test_completion_orders_hyde_lex_vec():
    ex = load_examples(FIXTURES / "mini.jsonl")[1]  # stored as lex, vec, hyde
    types = [line.split(":")[0] for line in to_sft_record(ex)["completion"][0]["content"].splitlines()]
    assert types == ["hyde", "lex", "vec"]


def test_seed_dataset_follows_the_format_rules():
    if not SEED_PATH.exists():
        pytest.skip(f"{SEED_PATH} not present")
    exs = load_examples(SEED_PATH)
    assert len(dedupe(exs)) >= 150
    cats = {e.category for e in exs}
    assert len(cats) >= 5, cats
    low = []
    for e in exs:
        types = [t for t, _ in e.output]
        assert types.count("hyde") == 1, e.query
        assert 1 <= types.count("lex") <= 3 and 1 <= types.count("vec") <= 3, e.query
        hyde = next(x for t, x in e.output if t == "hyde")
        assert 50 <= len(hyde) <= 200, (e.query, len(hyde))
        s = score_expansion(e.query, e.completion)
        assert s.gate is None, (e.query, s.gate)
        if s.total < 0.7:
            low.append((e.query, round(s.total, 2)))
    # the seed data is what SFT imitates: the shared rubric should rate nearly all of it highly
    assert len(low) <= len(exs) // 10, low


@pytest.fixture(scope="module")
def qwen3_tokenizer():
    from qmdlab.training.tiny import load_qwen3_tokenizer

    try:
        return load_qwen3_tokenizer()
    except Exception as err:  # the package is a test/setup dependency
        pytest.skip(f"Qwen3 tokenizer unavailable: {err}")


@pytest.mark.slow  # loading the 11 MB tokenizer (and transformers) takes seconds
@pytest.mark.parametrize("query,intent", [("git rebase", None), ("数据库备份", None), ("jaguar", "the car")])
def test_raw_prompt_equals_chat_template_rendering(qwen3_tokenizer, query, intent):
    assert qwen3_prompt(query, intent) == render_prompt(qwen3_tokenizer, query, intent)


@pytest.mark.slow
def test_prompt_is_a_token_prefix_of_prompt_plus_completion(qwen3_tokenizer):
    """TRL's completion mask needs the rendered prompt to be a prefix of prompt+completion."""
    ex = load_examples(FIXTURES / "mini.jsonl")[0]
    rec = to_sft_record(ex)
    tok = qwen3_tokenizer
    p = tok.apply_chat_template(
        rec["prompt"], add_generation_prompt=True, tokenize=False, **rec["chat_template_kwargs"]
    )
    full = tok.apply_chat_template(rec["prompt"] + rec["completion"], tokenize=False, **rec["chat_template_kwargs"])
    assert full.startswith(p) and full[len(p) :] == ex.completion + "<|im_end|>\n"
    ids_p = tok(p, add_special_tokens=False)["input_ids"]
    ids_f = tok(full, add_special_tokens=False)["input_ids"]
    assert ids_f[: len(ids_p)] == ids_p
