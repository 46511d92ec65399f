"""The LoRA adapter the causal-LM trainers (``sft``, ``grpo``, ``doc2query``) attach: the default
target modules and the peft config built from a run config's ``lora_*`` fields."""

from __future__ import annotations

from collections.abc import Sequence
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
