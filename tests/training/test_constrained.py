"""Sampling under the expander's grammar while training (qmdlab.training.constrained), on the tiny random
Qwen3: its unconstrained samples are token soup, so every well-formed answer is the grammar's doing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from qmdlab.models.expansion import grammar_for
from qmdlab.training.reward import RetrievalReward, parse_completion
from tests.training.conftest import grpo_gain_config

pytestmark = pytest.mark.extra("train")

# grammar_for(2, 12, open_end=True) as a regular expression: at most 2 lines of 1–12 characters
SMALL = re.compile(r"(?:(?:lex|vec|hyde): [^\n]{1,12}\n)?(?:lex|vec|hyde): [^\n]{1,12}\n?")


def _sample(model_dir: Path, constrained: bool, n: int = 8) -> tuple[list[str], list[bool]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from qmdlab.training.constrained import constrain_generate
    from qmdlab.training.render import CHAT_TEMPLATE_KWARGS, prompt_messages

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    if constrained:
        constrain_generate(model, tok, grammar_for(2, 12, open_end=True))
    text = tok.apply_chat_template(
        prompt_messages("vpn setup", generic=True), tokenize=False, add_generation_prompt=True, **CHAT_TEMPLATE_KWARGS
    )
    enc = tok(text, return_tensors="pt", add_special_tokens=False)
    torch.manual_seed(0)
    out = model.generate(**enc, do_sample=True, temperature=1.0, max_new_tokens=64, num_return_sequences=n)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    answers, ended = [], []
    for row in out[:, enc["input_ids"].shape[1] :].tolist():
        ended.append(eos in row)
        answers.append(tok.decode(row[: row.index(eos)] if eos in row else row))
    return answers, ended


def test_every_sample_is_a_sentence_of_the_grammar_and_ends_the_turn(tiny_qwen3):
    answers, ended = _sample(tiny_qwen3, constrained=True)
    assert all(SMALL.fullmatch(a) for a in answers), answers
    assert all(ended), answers  # once the grammar is complete only end-of-turn remains


def test_the_same_model_unconstrained_writes_no_such_sentence(tiny_qwen3):
    answers, _ = _sample(tiny_qwen3, constrained=False)
    assert not any(SMALL.fullmatch(a) for a in answers), answers


def test_a_callers_own_logits_processor_still_applies(tiny_qwen3):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor

    from qmdlab.training.constrained import constrain_generate

    class Count(LogitsProcessor):
        calls = 0

        def __call__(self, input_ids, scores):
            Count.calls += 1
            return scores

    tok = AutoTokenizer.from_pretrained(str(tiny_qwen3))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_qwen3))
    constrain_generate(model, tok, grammar_for(1, 4))
    enc = tok("vpn", return_tensors="pt")
    torch.manual_seed(0)
    out = model.generate(**enc, do_sample=False, max_new_tokens=16, logits_processor=[Count()])
    answer = tok.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert re.fullmatch(r"(?:lex|vec|hyde): [^\n]{1,4}\n", answer), answer
    assert Count.calls >= 3


LABELLED = [
    {"qid": "L1", "query": "vpn setup", "qrels": {"d1": 1}},
    {"qid": "L2", "query": "vpn office", "qrels": {"d2": 1}},
]
# A prefix of a sentence of generic_instruct_grammar() (≤ 6 lines of 1–160 characters, an open end): a
# completion may stop at max_completion_length anywhere, even inside a line's type.
GENERIC_PREFIX = re.compile(
    r"(?:(?:lex|vec|hyde): [^\n]{1,160}\n){0,6}(?:(?:l|le|lex|v|ve|vec|h|hy|hyd|hyde)(?::(?: [^\n]{0,160})?)?)?"
)


def _completions(tmp_path: Path, base: Path, out: str, generic: bool, monkeypatch) -> list[str]:
    """The completions GRPO's gain reward is given in a 2-step run."""
    from qmdlab.training import reward
    from qmdlab.training.grpo import build_dataset, run_grpo

    seen: list[str] = []

    def recording(text: str):
        seen.append(text)
        return parse_completion(text)

    monkeypatch.setattr(reward, "parse_completion", recording)
    cfg = grpo_gain_config(
        tmp_path,
        base,
        out,
        LABELLED,
        max_completion_length=24,
        max_steps=2,
        save_steps=10,
        generic_instruct=generic,
    )
    roles = [m["role"] for m in build_dataset(cfg)[0]["prompt"]]
    assert roles == (["system", "user"] if generic else ["user"])
    run_grpo(cfg, retrieval=RetrievalReward(lambda q, s: ["d1", "d2"], {r["qid"]: r["qrels"] for r in LABELLED}))
    return seen


@pytest.mark.slow
def test_grpo_with_generic_instruct_samples_under_the_engines_grammar(tmp_path, tiny_qwen3, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    constrained = _completions(tmp_path, tiny_qwen3, "generic", True, monkeypatch)
    free = _completions(tmp_path, tiny_qwen3, "free", False, monkeypatch)
    assert len(constrained) >= 8 and len(free) >= 8
    assert all(GENERIC_PREFIX.fullmatch(c) for c in constrained), constrained
    assert not any(GENERIC_PREFIX.fullmatch(c) for c in free), free


def test_the_export_sidecar_carries_the_system_turn_and_the_grammar(tiny_qwen3):
    from transformers import AutoTokenizer

    from qmdlab.models.templates import EXPAND_SYSTEM
    from qmdlab.training.export import prompt_parts
    from qmdlab.training.render import render_prompt

    tok = AutoTokenizer.from_pretrained(str(tiny_qwen3))
    plain, generic = prompt_parts(tok), prompt_parts(tok, generic=True)
    assert EXPAND_SYSTEM not in plain["prefix"] and EXPAND_SYSTEM in generic["prefix"]
    assert generic["suffix"] == plain["suffix"]
    assert render_prompt(tok, "q") == plain["prefix"] + "/no_think Expand this search query: q" + plain["suffix"]


def test_load_expander_decodes_under_the_sidecars_grammar(tmp_path):
    from qmdlab.models.expansion import GRAMMAR
    from qmdlab.models.registry import generic_instruct_grammar
    from qmdlab.training.export import load_expander

    gguf = tmp_path / "expander-chatml-Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF not loaded by this test")
    side = Path(str(gguf) + ".prompt.json")
    side.write_text(json.dumps({"prefix": "<p>", "suffix": "<s>", "family": "chatml"}))
    assert load_expander(gguf).grammar_text == GRAMMAR
    side.write_text(
        json.dumps({"prefix": "<p>", "suffix": "<s>", "family": "chatml", "grammar": generic_instruct_grammar()})
    )
    exp = load_expander(gguf)
    assert exp.grammar_text == generic_instruct_grammar() and exp.prompt("x").startswith("<p>")
