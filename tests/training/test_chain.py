"""The whole chain on a tiny random Qwen3: prepare → SFT → GRPO → merge → GGUF → quantise →
llama-cpp-python → the engine's expander for one query. Real TRL trainers, a few steps each."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from training import common
from training.data import prepare
from training.render import qwen3_prompt
from training.reward import RetrievalReward

FIXTURES = Path(__file__).parent / "fixtures"


def _metrics(run: Path, stage: str) -> list[dict]:
    return [m for m in common.read_metrics(run) if m.get("stage") == stage]


@pytest.mark.slow
def test_tiny_chain(tmp_path, tiny_qwen3, qmdlab_home, monkeypatch, require):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from training.grpo import GRPORunConfig, run_grpo
    from training.sft import SFTRunConfig, run_sft

    data = tmp_path / "data"
    info = prepare(FIXTURES / "mini.jsonl", data, eval_fraction=0.2)
    assert info["n_train"] == 6

    # --- SFT: completion-only loss on conversational prompt/completion records
    sft_cfg = SFTRunConfig(base=str(tiny_qwen3), train_file=str(data / "train.jsonl"), output_dir=str(tmp_path / "sft"),
                           max_steps=2, per_device_train_batch_size=2, gradient_accumulation_steps=1,
                           logging_steps=1, save_steps=1)
    sft = run_sft(sft_cfg)
    assert sft["steps"] == 2 and Path(sft["merged"], "model.safetensors").exists()
    assert [m["step"] for m in _metrics(tmp_path / "sft", "sft") if "loss" in m] == [1, 2]
    assert yaml.safe_load((tmp_path / "sft" / "config.yaml").read_text())["lora_r"] == 16
    assert run_sft(sft_cfg) == sft  # resumable: a finished run returns its stored result

    # --- GRPO from the merged SFT weights, fresh LoRA, beta 0.04, rule + retrieval rewards
    calls = []
    retrieval = RetrievalReward(lambda q, s: calls.append(s) or ["d1"], {"L1": {"d1": 1}})
    labelled = tmp_path / "labelled.jsonl"
    labelled.write_text(json.dumps({"qid": "L1", "query": "vpn setup", "qrels": {"d1": 1}}) + "\n")
    grpo_cfg = GRPORunConfig(base=sft["merged"], prompts_file=str(data / "train.jsonl"), labelled_file=str(labelled),
                             output_dir=str(tmp_path / "grpo"), max_steps=1, max_completion_length=12,
                             per_device_train_batch_size=4, num_generations=4)
    grpo = run_grpo(grpo_cfg, retrieval=retrieval)
    assert grpo["steps"] == 1 and grpo["retrieval_term"]
    saved = yaml.safe_load((tmp_path / "grpo" / "config.yaml").read_text())
    assert saved["beta"] == 0.04 and saved["lora_r"] == 4 and saved["lora_targets"] == ["q_proj", "v_proj"]
    log = next(m for m in _metrics(tmp_path / "grpo", "grpo") if "reward" in m)
    for key in ("rewards/rule/mean", "rewards/rule_format/mean", "rewards/rule_entities/mean", "kl"):
        assert key in log, key
    assert json.loads((Path(grpo["adapter"]) / "adapter_config.json").read_text())["r"] == 4

    # --- export: llama.cpp converter + in-process quantisation
    require.module("llama_cpp", "llama-cpp-python (the llama extra) is needed from here on")
    from training.export import ExportConfig, load_expander, run_export

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

    expander = load_expander(exp["quants"]["Q4_K_M"], sampling=SamplingConfig(temperature=0.0, max_tokens=24))
    assert expander.prompt("vpn setup") == qwen3_prompt("vpn setup")
    from qmdlab.models.registry import build_model  # the path as QMDLAB_EXPAND_MODEL / --expand-model

    assert build_model("expand", exp["quants"]["Q8_0"]).prompt("vpn setup") == qwen3_prompt("vpn setup")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "vpn.md").write_text("# VPN\n\nImport the wireguard config and connect to the office vpn.\n")
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", notes)
    idx.update()
    lab = Lab(idx, ModelSet(None, expander, None))
    trace = lab.query("vpn setup", intent="office network", vector=False, rerank=False)
    expand_notes = trace.notes.filter(trace.notes["stage"] == "expand")["message"].to_list()
    assert expand_notes and "lines kept" in expand_notes[0], expand_notes
    res = expander.expand("vpn setup")
    assert res.raw and all(t in ("lex", "vec", "hyde") for t, _ in res.lines)
