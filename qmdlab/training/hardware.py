"""What a training step needs to know about the machine: precision and device flags for TRL, the
sentence-transformers trainers' shared arguments, torch's CPU threads, and the tokenizer a step loads
(with a pad token, which causal models often lack)."""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

from qmdlab.errors import ConfigError


def precision_flags(choice: str = "auto") -> dict[str, Any]:
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


def device_flags() -> dict[str, Any]:
    """``use_cpu`` for TRL configs: on a machine without CUDA the trainer must be told, or an
    ``accelerate launch`` of several processes would not form a (gloo) process group."""
    import torch

    return {"use_cpu": not torch.cuda.is_available()}


class StepCadence(Protocol):
    """What :func:`run_args` reads of a step's config (every run config of qmdlab.training has it)."""

    seed: int
    logging_steps: int
    save_steps: int


def run_args(output_dir: Path, cadence: StepCadence, *, save_total_limit: int) -> dict[str, Any]:
    """The trainer arguments every qmdlab training step shares (TRL's SFT and GRPO, doc2query, the
    sentence-transformers trainers): where checkpoints go and how many stay, the logging and save
    cadence, the seed, no reporting service, no data-loader workers (a worker per core would starve the
    step on a small machine), and the device flags.

    >>> from types import SimpleNamespace
    >>> a = run_args(Path("run/checkpoints"), SimpleNamespace(seed=3, logging_steps=5, save_steps=50), save_total_limit=2)
    >>> a["output_dir"], a["seed"], a["save_total_limit"], a["report_to"], a["dataloader_num_workers"]
    ('run/checkpoints', 3, 2, [], 0)
    """
    return {
        "output_dir": str(output_dir),
        "logging_steps": cadence.logging_steps,
        "save_steps": cadence.save_steps,
        "save_total_limit": save_total_limit,
        "seed": cadence.seed,
        "report_to": [],
        "dataloader_num_workers": 0,
        **device_flags(),
    }


class TrlSchedule(Protocol):
    """What :func:`schedule_args` reads of a TRL step's config (SFT, GRPO, doc2query)."""

    learning_rate: float
    num_train_epochs: float
    max_steps: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int


def schedule_args(cfg: TrlSchedule) -> dict[str, Any]:
    """The learning rate, epochs, step cap and (accumulated) batch a TRL config takes from a step's config.

    >>> a = schedule_args(SimpleNamespace(learning_rate=2e-4, num_train_epochs=5.0, max_steps=-1,
    ...     per_device_train_batch_size=4, gradient_accumulation_steps=4))
    >>> a["learning_rate"], a["num_train_epochs"], a["max_steps"], a["per_device_train_batch_size"]
    (0.0002, 5.0, -1, 4)
    >>> a["gradient_accumulation_steps"]
    4
    """
    return {
        "learning_rate": cfg.learning_rate,
        "num_train_epochs": cfg.num_train_epochs,
        "max_steps": cfg.max_steps,
        "per_device_train_batch_size": cfg.per_device_train_batch_size,
        "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
    }


def sentence_transformers_args(
    output_dir: Path,
    *,
    epochs: float,
    max_steps: int,
    batch_size: int,
    learning_rate: float,
    warmup: float,
    seed: int,
    logging_steps: int,
    save_steps: int,
    progress: bool,
    **extra: object,
) -> dict[str, Any]:
    """The training arguments of the sentence-transformers trainers (the embedder's bi-encoder and the
    reranker's cross-encoder): :func:`run_args` with one checkpoint kept, a linear schedule with
    ``warmup`` as a share of the steps, and the seed on data order too; ``extra`` adds or overrides
    arguments (a batch sampler).

    >>> a = sentence_transformers_args(Path("run"), epochs=1, max_steps=-1, batch_size=8, learning_rate=2e-5,
    ...     warmup=0.1, seed=0, logging_steps=5, save_steps=50, progress=False, batch_sampler="no_duplicates")
    >>> a["output_dir"], a["warmup_steps"], a["data_seed"], a["disable_tqdm"], a["batch_sampler"]
    ('run', 0.1, 0, True, 'no_duplicates')
    """
    return {
        **run_args(
            output_dir,
            SimpleNamespace(seed=seed, logging_steps=logging_steps, save_steps=save_steps),
            save_total_limit=1,
        ),
        "num_train_epochs": epochs,
        "max_steps": max_steps,
        "per_device_train_batch_size": batch_size,
        "learning_rate": learning_rate,
        "lr_scheduler_type": "linear",
        "warmup_steps": warmup,  # a float below 1: the share of steps
        "data_seed": seed,
        "disable_tqdm": not progress,
        **extra,
    }


def threads_field(default: int | None) -> Any:
    """The ``n_threads`` field of a step's config: torch's CPU threads (:func:`set_threads`)."""
    return field(
        default=default,
        metadata={
            "help": "Torch CPU threads (0/None: torch's own); at most the free cores (1 on a shared machine): "
            "with more runnable threads than cores torch's OpenMP workers spin-wait and a training step can "
            "be many times slower."
        },
    )


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
