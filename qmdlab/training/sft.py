"""Supervised fine-tuning of the query expander (``trl.SFTTrainer`` + LoRA).

qmd's published recipe: LoRA r 16 / α 32 on q, k, v, o, gate, up, down; lr 2e-4 cosine
with 3 % warmup; 5 epochs; effective batch 16; max length 512; bf16 where the hardware
has it. The data are conversational prompt/completion records (:mod:`qmdlab.training.data`), so
the loss covers completion tokens only, and every prompt is rendered with
``enable_thinking=False`` exactly as at inference.

Outputs in ``output_dir``: ``checkpoints/`` (a rerun resumes from the newest, noted in
``metrics.jsonl`` as ``resumed_from`` with the step and the examples seen before it), ``adapter/`` (the LoRA),
``merged/`` (``merge_and_unload`` → HF weights + tokenizer, the input of GRPO and export),
``config.yaml``, ``metrics.jsonl``, ``README.md``.

Run it as ``qmdlab train sft --config qmdlab/training/configs/sft.yaml`` or
``python -m qmdlab.training.sft --config qmdlab/training/configs/sft.yaml [--field value ...]``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qmdlab.training import hardware, rundir
from qmdlab.training.data import Example, load_examples, to_sft_record
from qmdlab.training.lora import LORA_TARGETS, lora_sft_trainer, save_adapter


@dataclass
class SFTRunConfig:
    """Configuration of one SFT run (YAML keys = field names)."""

    base: str = field(default="Qwen/Qwen3-1.7B", metadata={"help": "HF model id or local directory."})
    train_file: str = field(default="data/training/seed.jsonl", metadata={"help": "Examples (JSONL schema)."})
    eval_file: str | None = field(default=None, metadata={"help": "Held-out examples (JSONL schema)."})
    output_dir: str = field(default="runs/sft", metadata={"help": "Run directory."})
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS))
    learning_rate: float = 2e-4
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.03
    num_train_epochs: float = 5.0
    max_steps: int = field(default=-1, metadata={"help": "Overrides epochs when > 0."})
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = field(default=4, metadata={"help": "4 × 4 = effective batch 16."})
    max_length: int = 512
    precision: str = field(default="auto", metadata={"help": "auto|bf16|fp16|fp32 (auto: bf16 where supported)."})
    logging_steps: int = 10
    save_steps: int = 100
    seed: int = 0
    merge: bool = field(default=True, metadata={"help": "Write merged/ (merge_and_unload)."})
    gradient_checkpointing: bool = False
    generic_instruct: bool = field(
        default=False,
        metadata={
            "help": "Prompts carry the system turn the engine gives an untrained instruct expander, and completions "
            "keep their line order: the model's own answers (qmdlab.training.best_of_n) trained as it is run."
        },
    )


def _dataset(examples: list[Example], *, generic: bool = False):
    from datasets import Dataset

    rows = [to_sft_record(ex, generic=generic) for ex in examples]
    for r in rows:
        r.pop("query")
    return Dataset.from_list(rows)


def build_trainer(cfg: SFTRunConfig, *, callbacks=()):
    """The configured ``SFTTrainer`` (not yet trained)."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig

    out = Path(cfg.output_dir)
    flags = hardware.precision_flags(cfg.precision)
    dtype = torch.bfloat16 if flags["bf16"] else torch.float32
    tok = hardware.load_tokenizer(cfg.base)
    model = AutoModelForCausalLM.from_pretrained(cfg.base, dtype=dtype)
    train = _dataset(load_examples(cfg.train_file), generic=cfg.generic_instruct)
    evald = _dataset(load_examples(cfg.eval_file), generic=cfg.generic_instruct) if cfg.eval_file else None
    # unset unless asked for: SFTConfig's own default applies
    checkpointing: dict[str, Any] = {"gradient_checkpointing": True} if cfg.gradient_checkpointing else {}
    args = SFTConfig(
        **hardware.run_args(out / "checkpoints", cfg, save_total_limit=2),
        **hardware.schedule_args(cfg),
        lr_scheduler_type=cfg.lr_scheduler_type,
        warmup_steps=cfg.warmup_ratio,
        per_device_eval_batch_size=cfg.per_device_train_batch_size,
        max_length=cfg.max_length,
        completion_only_loss=True,
        eval_strategy="epoch" if evald is not None else "no",
        **checkpointing,
        **flags,
    )
    return lora_sft_trainer(cfg, out, "sft", model, args, tok, train, evald=evald, callbacks=callbacks), tok


@rundir.resumable("output_dir")
def run_sft(cfg: SFTRunConfig) -> dict:
    """Train (resuming from the newest checkpoint), save the adapter and merged weights.

    Returns
    -------
    dict
        ``adapter``, ``merged`` (paths), ``train_loss``, ``steps``; also stored in ``DONE``.
    """
    out = Path(cfg.output_dir)
    rundir.save_config(cfg, out)
    trainer, tok = build_trainer(cfg)
    resume = rundir.last_checkpoint(out / "checkpoints")
    if resume is not None:  # noted: the steps, and so the examples, done before the resume
        step, a = rundir.checkpoint_step(resume), trainer.args
        seen = step * a.per_device_train_batch_size * a.gradient_accumulation_steps * a.world_size
        rundir.append_metrics(out, {"stage": "sft", "resumed_from": resume, "step": step, "examples_seen": seen})
    result = trainer.train(resume_from_checkpoint=resume)
    merged_dir = save_adapter(trainer, tok, out, merge=cfg.merge)
    if not trainer.accelerator.is_main_process:
        return {}
    res = {
        "adapter": str(out / "adapter"),
        "merged": str(merged_dir) if merged_dir else None,
        "train_loss": float(result.training_loss),
        "steps": int(result.global_step),
        "world_size": int(trainer.accelerator.num_processes),
    }
    rundir.finish(
        out,
        "sft",
        res,
        "qmdlab query expander — SFT",
        f"""
Base model: `{cfg.base}`. Data: `{cfg.train_file}`.
LoRA r={cfg.lora_r} α={cfg.lora_alpha} on {", ".join(cfg.lora_targets)}; lr {cfg.learning_rate}
{cfg.lr_scheduler_type}; {res["steps"]} optimizer steps; final training loss {res["train_loss"]:.4f}.
Prompt: `/no_think Expand this search query: {{query}}` (Qwen3 chat template, thinking off);
completion: one `hyde:` line, then `lex:` lines, then `vec:` lines.
Next: `qmdlab train grpo --base {merged_dir or out / "adapter"}` or `qmdlab train export`.
""",
    )
    return res


def main(argv: list[str] | None = None) -> dict:
    """``python -m qmdlab.training.sft [--config sft.yaml] [--field value ...]``."""
    from qmdlab.training.config import parse_args

    return run_sft(parse_args(SFTRunConfig, argv))


if __name__ == "__main__":
    main(sys.argv[1:])
