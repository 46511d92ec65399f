"""The LoRA adapter the causal-LM trainers (``sft``, ``grpo``, ``doc2query``) attach: the default
target modules, the peft config built from a run config's ``lora_*`` fields, the SFT trainer that
trains it (``sft``, ``doc2query``), and saving the adapter (and the merged weights) after training."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

# every attention and MLP projection of a Llama/Qwen-style decoder block
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraFields(Protocol):
    @property
    def lora_r(self) -> int: ...
    @property
    def lora_alpha(self) -> int: ...
    @property
    def lora_dropout(self) -> float: ...
    @property
    def lora_targets(self) -> Sequence[str]: ...


def lora_config(cfg: LoraFields) -> Any:
    """A ``peft.LoraConfig`` for a causal LM from ``cfg.lora_r``, ``lora_alpha``, ``lora_dropout``
    and ``lora_targets`` (needs the ``train`` extra)."""
    from peft import LoraConfig

    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=list(cfg.lora_targets),
        task_type="CAUSAL_LM",
    )


def lora_sft_trainer(
    cfg: LoraFields,
    out: Path,
    stage: str,
    model: Any,
    args: Any,
    tok: Any,
    train: Any,
    *,
    evald: Any = None,
    callbacks: Sequence[Any] = (),
) -> Any:
    """A ``trl.SFTTrainer`` of ``cfg``'s LoRA adapter (:func:`lora_config`) on ``model``, training on
    ``train`` (and evaluating on ``evald``) with ``args``; its logs go to ``out/metrics.jsonl`` as
    ``stage`` (:func:`~qmdlab.training.rundir.metrics_callback`), then to the other ``callbacks``."""
    from trl import SFTTrainer

    from qmdlab.training import rundir

    return SFTTrainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=evald,
        processing_class=tok,
        peft_config=lora_config(cfg),
        callbacks=[rundir.metrics_callback(out, stage), *callbacks],
    )


def save_adapter(
    trainer: Any, tok: Any, out: Path, *, merge: bool, merged_padding_side: str | None = None
) -> Path | None:
    """Save a trained LoRA run: the adapter to ``out/adapter`` on every rank (DeepSpeed gathers shards
    there), then on the main process only its tokenizer and, with ``merge``, the merged weights and the
    tokenizer (padded on ``merged_padding_side`` when given) to ``out/merged``; returns that directory
    (None without ``merge`` or on another rank)."""
    trainer.save_model(str(out / "adapter"))
    if not trainer.accelerator.is_main_process:
        return None
    tok.save_pretrained(str(out / "adapter"))
    if not merge:
        return None
    merged_dir = out / "merged"
    trainer.model.merge_and_unload().save_pretrained(str(merged_dir))
    if merged_padding_side is not None:
        tok.padding_side = merged_padding_side
    tok.save_pretrained(str(merged_dir))
    return merged_dir
