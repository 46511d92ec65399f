"""SFT and GRPO on the tiny random Qwen3: a run stopped after a checkpoint resumes from it (the
resume is noted, and GRPO draws the same prompts as a run never stopped), GRPO's ``reward: gain``
logs its terms in the real loop, and the held-back slice stops training early."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qmdlab.training import rundir
from qmdlab.training.data import prepare
from qmdlab.training.reward import RetrievalReward
from tests.training.conftest import grpo_gain_config

FIXTURES = Path(__file__).parent / "fixtures"


def _metrics(run: Path, stage: str) -> list[dict]:
    return [m for m in rundir.read_metrics(run) if m.get("stage") == stage]


def _stop_after_first_run(run: Path) -> None:
    """What an interrupted run leaves: its checkpoints, no DONE marker."""
    (run / rundir.DONE).unlink()
    assert rundir.last_checkpoint(run / "checkpoints") is not None


def _steer_generation(monkeypatch, model_dir, text: str) -> None:
    """GRPO's sampling writes ``text`` and ends the turn (a sequence bias, as in test_chain.py)."""
    import trl
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = tok.encode(text, add_special_tokens=False)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert len(set(ids)) == len(ids)
    bias = [[[ids[0]], 20.0]] + [[[a, b], 40.0] for a, b in zip(ids, ids[1:])] + [[[ids[-1], eos], 60.0]]
    original = trl.GRPOConfig.__post_init__

    def steered_post_init(self):
        self.generation_kwargs = {**(self.generation_kwargs or {}), "sequence_bias": bias}
        original(self)

    monkeypatch.setattr(trl.GRPOConfig, "__post_init__", steered_post_init)


@pytest.mark.slow
def test_sft_resumes_from_its_last_checkpoint(tmp_path, tiny_qwen3, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from qmdlab.training.sft import SFTRunConfig, run_sft

    prepare(FIXTURES / "mini.jsonl", tmp_path / "data", eval_fraction=0.2)
    kw = dict(
        base=str(tiny_qwen3),
        train_file=str(tmp_path / "data" / "train.jsonl"),
        output_dir=str(tmp_path / "sft"),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        logging_steps=1,
        save_steps=1,
        merge=False,
    )
    assert run_sft(SFTRunConfig(max_steps=1, **kw))["steps"] == 1
    _stop_after_first_run(tmp_path / "sft")
    assert run_sft(SFTRunConfig(max_steps=2, **kw))["steps"] == 2
    log = _metrics(tmp_path / "sft", "sft")
    resumed = [m for m in log if "resumed_from" in m]
    assert [(Path(m["resumed_from"]).name, m["step"], m["examples_seen"]) for m in resumed] == [("checkpoint-1", 1, 2)]
    # the resumed run trained step 2 only (step 1's loss is logged once, by the first run)
    assert [m["step"] for m in log if "loss" in m] == [1, 2]


LABELLED = [
    {"qid": "L1", "query": "vpn setup", "qrels": {"d1": 1}},  # the steered expansion helps
    {"qid": "L2", "query": "vpn office", "qrels": {"d2": 1}},  # it hurts
    {"qid": "L3", "query": "vpn wireguard", "qrels": {"d1": 1}},
    {"qid": "L4", "query": "vpn tunnel", "qrels": {"d2": 1}},
]


def _grpo_cfg(tmp_path, base, out: str, **kw):
    return grpo_gain_config(tmp_path, base, out, LABELLED, **{"max_completion_length": 12, "save_steps": 1, **kw})


def _retrieval() -> RetrievalReward:
    # baseline: d2 then d1; any expansion: d1 then d2 (L1, L3 gain; L2, L4 lose)
    return RetrievalReward(
        lambda q, s: ["d2", "d1"] if s is None else ["d1", "d2"], {r["qid"]: r["qrels"] for r in LABELLED}
    )


@pytest.mark.slow
def test_grpo_gain_reward_logs_and_a_stopped_run_resumes_on_the_same_prompts(tmp_path, tiny_qwen3, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from qmdlab.training.grpo import PromptLog, run_grpo

    _steer_generation(monkeypatch, tiny_qwen3, "lex: vpn wireguard")
    whole = run_grpo(_grpo_cfg(tmp_path, tiny_qwen3, "whole", max_steps=3), retrieval=_retrieval())
    assert whole["steps"] == 3 and whole["objective"] == "gain"
    logs = [m for m in _metrics(tmp_path / "whole", "grpo") if "reward" in m and not m.get("final")]
    assert [m["step"] for m in logs] == [1, 2, 3]
    for m in logs:
        for key in ("reward", "kl", "rewards/gain/mean", "rewards/rule/mean", "gain/delta", "gain/harmful"):
            assert key in m, (key, m)
        # one prompt per step, each of its completions the steered line: all gain, or all harm × 2
        assert m["gain/harmful"] in (0.0, 1.0)
        assert m["rewards/gain/mean"] == pytest.approx(m["gain/delta"] * (2.0 if m["gain/harmful"] else 1.0), abs=1e-5)
    seen_whole = [(r["step"], r["qids"]) for r in PromptLog(tmp_path / "whole" / "prompts_seen.jsonl").rows()]
    assert [s for s, _ in seen_whole] == [0, 1, 2]

    # the same run stopped after step 1 (its checkpoint-1 kept) and started again
    run_grpo(_grpo_cfg(tmp_path, tiny_qwen3, "stopped", max_steps=1), retrieval=_retrieval())
    _stop_after_first_run(tmp_path / "stopped")
    with (tmp_path / "stopped" / "prompts_seen.jsonl").open("a") as fh:  # a batch drawn after the checkpoint
        fh.write(json.dumps({"step": 1, "rank": 0, "queries": ["lost"], "qids": ["L9"]}) + "\n")
    again = run_grpo(_grpo_cfg(tmp_path, tiny_qwen3, "stopped", max_steps=3), retrieval=_retrieval())
    assert again["steps"] == 3
    resumed = [m for m in _metrics(tmp_path / "stopped", "grpo") if "resumed_from" in m]
    assert [(Path(m["resumed_from"]).name, m["step"]) for m in resumed] == [("checkpoint-1", 1)]
    seen = [(r["step"], r["qids"]) for r in PromptLog(tmp_path / "stopped" / "prompts_seen.jsonl").rows()]
    assert seen == seen_whole  # the lost batch dropped, and the resumed steps drew the prompts a whole run draws


@pytest.mark.slow
def test_grpo_stops_when_the_held_back_reward_stops_improving(tmp_path, tiny_qwen3, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from qmdlab.training.grpo import run_grpo

    cfg = _grpo_cfg(
        tmp_path,
        tiny_qwen3,
        "early",
        max_steps=6,
        early_stop_fraction=0.25,
        early_stop_steps=1,
        early_stop_patience=2,
    )
    res = run_grpo(cfg, retrieval=_retrieval())
    held = json.loads((tmp_path / "early" / "heldback_qids.json").read_text())
    trained = json.loads((tmp_path / "early" / "prompt_qids.json").read_text())
    assert len(held) == 1 and held[0] not in trained and len(trained) == 3
    checks = [m for m in _metrics(tmp_path / "early", "grpo") if "heldback/reward" in m]
    # the untrained random policy answers the held-back prompt the same way at every check (greedy, a tiny
    # learning rate): no improvement after the first check, so training stops at the third
    assert [m["step"] for m in checks] == [1, 2, 3] and checks[-1].get("early_stop") is True
    assert res["steps"] == 3 and res["early_stopped"] is True
