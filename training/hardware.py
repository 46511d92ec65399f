"""What a training step needs to know about the machine: precision and device flags for TRL, torch's
CPU threads, and the tokenizer a step loads (with a pad token, which causal models often lack)."""

from __future__ import annotations

from pathlib import Path

from qmdlab.errors import ConfigError


def precision_flags(choice: str = "auto") -> dict[str, bool]:
    """``bf16``/``fp16`` flags for TRL configs from the hardware (TRL defaults to bf16,
    which fails on a CPU-only machine).

    >>> precision_flags("fp32")
    {'bf16': False, 'fp16': False}
    """
    if choice == "fp32":
        return {"bf16": False, "fp16": False}
    if choice == "bf16":
        return {"bf16": True, "fp16": False}
    if choice == "fp16":
        return {"bf16": False, "fp16": True}
    if choice != "auto":
        raise ConfigError(f"precision must be auto|bf16|fp16|fp32, not {choice!r}")
    import torch

    if torch.cuda.is_available():
        bf16 = torch.cuda.is_bf16_supported()
        return {"bf16": bf16, "fp16": not bf16}
    return {"bf16": False, "fp16": False}


def device_flags() -> dict[str, bool]:
    """``use_cpu`` for TRL configs: on a machine without CUDA the trainer must be told, or an
    ``accelerate launch`` of several processes would not form a (gloo) process group."""
    import torch

    return {"use_cpu": not torch.cuda.is_available()}


def set_threads(n_threads: int | None) -> None:
    """Torch's CPU threads for this process, when a step's config sets ``n_threads`` (0/None: torch's own)."""
    if n_threads:
        import torch

        torch.set_num_threads(n_threads)


def load_tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok
