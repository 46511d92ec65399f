"""The whole chain on a tiny random Qwen3: prepare → SFT → GRPO → merge → GGUF → quantise →
llama-cpp-python → the engine's expander for one query. Real TRL trainers, a few steps each."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from qmdlab.training import rundir
from qmdlab.training.data import prepare
from qmdlab.training.render import qwen3_prompt
from qmdlab.training.reward import RetrievalReward

FIXTURES = Path(__file__).parent / "fixtures"


def _metrics(run: Path, stage: str) -> list[dict]:
    return [m for m in rundir.read_metrics(run) if m.get("stage") == stage]


def _steer_generation(monkeypatch, model_dir, text: str) -> None:
    """Make GRPO's sampling write ``text`` and then end the turn, by a sequence bias on the tokens of
    ``text`` (``transformers``' ``sequence_bias``, passed through ``GRPOConfig.generation_kwargs``)."""
    import trl
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = tok.encode(text, add_special_tokens=False)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert len(set(ids)) == len(ids), "each token of the steered text must be distinct"
    bias = [[[ids[0]], 20.0]] + [[[a, b], 40.0] for a, b in zip(ids, ids[1:])] + [[[ids[-1], eos], 60.0]]

    original = trl.GRPOConfig.__post_init__

    def steered_post_init(self):
        self.generation_kwargs = {**(self.generation_kwargs or {}), "sequence_bias": bias}
        original(self)

    # Patch the method, not the class: the trainer pickles its args (training_args.bin), and an instance of
    # a class defined in this function cannot be pickled.
    monkeypatch.setattr(trl.GRPOConfig, "__post_init__", steered_post_init)


@pytest.mark.slow
def test_tiny_chain(tmp_path, tiny_qwen3, qmdlab_home, monkeypatch, require):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from qmdlab.training.grpo import GRPORunConfig, run_grpo
    from qmdlab.training.sft import SFTRunConfig, run_sft

    data = tmp_path / "data"
    info = prepare(FIXTURES / "mini.jsonl", data, eval_fraction=0.2)
    assert info["n_train"] == 6

    # --- SFT: completion-only loss on conversational prompt/completion records
    sft_cfg = SFTRunConfig(
        base=str(tiny_qwen3),
        train_file=str(data / "train.jsonl"),
        output_dir=str(tmp_path / "sft"),
        max_steps=2,
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        logging_steps=1,
        save_steps=1,
    )
    sft = run_sft(sft_cfg)
    assert sft["steps"] == 2 and Path(sft["merged"], "model.safetensors").exists()
    assert [m["step"] for m in _metrics(tmp_path / "sft", "sft") if "loss" in m] == [1, 2]
    assert yaml.safe_load((tmp_path / "sft" / "config.yaml").read_text())["lora_r"] == 16
    assert run_sft(sft_cfg) == sft  # resumable: a finished run returns its stored result

    # --- GRPO from the merged SFT weights, fresh LoRA, beta 0.04, rule + retrieval rewards.
    # Every prompt is labelled (unlabelled_prompts=False), so the retrieval term is due at every step.
    # A random model never writes a gate-passing "type: text" line, and a gated completion is never
    # scored; so generation is steered (a token-sequence bias, test only) to write "lex: vpn wireguard"
    # and stop: the real GRPO loop then has to route the qid column to the reward, call the scorer and
    # log the ΔnDCG, which is what this part checks.
    calls = []

    def scorer(query, searches):
        calls.append((query, None if searches is None else list(searches)))
        return ["d2", "d1"] if searches is None else ["d1"]  # baseline: answer at rank 2; expanded: rank 1

    retrieval = RetrievalReward(scorer, {"L1": {"d1": 1}})
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text(json.dumps({"qid": "L1", "query": "vpn setup", "qrels": {"d1": 1}}) + "\n")
    grpo_cfg = GRPORunConfig(
        base=sft["merged"],
        prompts_file=str(data / "train.jsonl"),
        labelled_file=str(labelled),
        unlabelled_prompts=False,
        output_dir=str(tmp_path / "grpo"),
        max_steps=1,
        max_completion_length=12,
        per_device_train_batch_size=4,
        num_generations=4,
    )
    _steer_generation(monkeypatch, sft["merged"], "lex: vpn wireguard")
    grpo = run_grpo(grpo_cfg, retrieval=retrieval)
    assert grpo["steps"] == 1 and grpo["retrieval_term"]
    assert json.loads((tmp_path / "grpo" / "prompt_qids.json").read_text()) == ["L1"]
    # the scorer ran: the baseline once (cached per qid) and every completion's parsed lines
    assert calls, "the retrieval reward never called its scorer"
    assert ("vpn setup", None) in calls and ("vpn setup", [("lex", "vpn wireguard")]) in calls
    saved = yaml.safe_load((tmp_path / "grpo" / "config.yaml").read_text())
    assert saved["beta"] == 0.04 and saved["lora_r"] == 4 and saved["lora_targets"] == ["q_proj", "v_proj"]
    log = next(m for m in _metrics(tmp_path / "grpo", "grpo") if "reward" in m)
    for key in ("rewards/rule/mean", "rewards/rule_format/mean", "rewards/rule_entities/mean", "kl"):
        assert key in log, key
    # ΔnDCG@10 = 1 - 1/log2(3) for every completion, logged as the retrieval reward's mean
    retrieval_mean = log.get("rewards/retrieval/mean")
    assert isinstance(retrieval_mean, float) and math.isfinite(retrieval_mean), log
    assert retrieval_mean == pytest.approx(1 - 1 / math.log2(3), abs=1e-4)
    assert json.loads((Path(grpo["adapter"]) / "adapter_config.json").read_text())["r"] == 4

    # --- export: llama.cpp converter + in-process quantisation
    require.module("llama_cpp", "llama-cpp-python (the llama extra) is needed from here on")
    from qmdlab.training.export import ExportConfig, load_expander, run_export

    exp = run_export(ExportConfig(model=grpo["merged"], output_dir=str(tmp_path / "export")))
    assert exp["family"] == "qwen3" and set(exp["quants"]) == {"F16", "Q4_K_M", "Q8_0"}
    for path in exp["quants"].values():
        assert Path(path).read_bytes()[:4] == b"GGUF"
    assert exp["sizes"]["Q8_0"] < exp["sizes"]["F16"]

    # --- the engine uses it as its expander
    from qmdlab.models import ModelSet
    from qmdlab.models.llama_expand import SamplingConfig
    from qmdlab.pipeline.lab import Lab
    from qmdlab.store import Index

    expander = load_expander(exp["quants"]["Q4_K_M"], sampling=SamplingConfig(temperature=0.0, max_tokens=64))
    assert expander.prompt("vpn setup") == qwen3_prompt("vpn setup")
    from qmdlab.models.registry import build_model  # the path as QMDLAB_EXPAND_MODEL / --expand-model

    assert build_model("expand", exp["quants"]["Q8_0"]).prompt("vpn setup") == qwen3_prompt("vpn setup")
    # The random weights write random text; a grammar (the engine's own mechanism) fixes each line's
    # type and first word so that the filter keeps the lines: the rest of every line is the model's.
    assert expander._grammar is None  # not loaded yet: the grammar below is the one used
    expander.grammar_text = 'root ::= "lex: vpn " word "\\n" "lex: setup " word "\\n"\nword ::= [a-z]{1,12}\n'
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "vpn.md").write_text("# VPN setup\n\nImport the wireguard config and connect to the office vpn.\n")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", notes)
    idx.update()
    lab = Lab(idx, ModelSet(None, expander, None))
    # stage_budget_s=0: no time bound on the expansion call (a loaded CI machine must not turn it into a skip)
    trace = lab.query("vpn setup", intent="office network", vector=False, rerank=False, stage_budget_s=0)
    res = expander.expand("vpn setup", intent="office network")
    assert res.raw.strip() and len(res.lines) == 2, res  # an empty answer is a failure, not a pass
    assert [t for t, _ in res.lines] == ["lex", "lex"] and res.lines[0][1].startswith("vpn ")
    expand_notes = trace.notes.filter(trace.notes["stage"] == "expand")["message"].to_list()
    assert expand_notes == ["2 of 2 lines kept"], expand_notes
    # the model's lines reach the trace: the expansions table, then one retrieval list per kept line
    exp_rows = trace.expansions.filter(trace.expansions["kept"])
    assert exp_rows.height == 2 and exp_rows["origin"].to_list() == ["expander", "expander"]
    assert list(zip(exp_rows["type"].to_list(), exp_rows["text"].to_list())) == res.lines
    expanded = trace.lists.filter(trace.lists["query_type"] == "lex")
    assert sorted(set(expanded["subquery"].to_list())) == sorted(text for _, text in res.lines)
