"""Helpers shared by the training steps: configs, run directories, metrics, hardware.

Every step (``prepare``, ``sft``, ``grpo``, ``export``, ``evaluate``, ``synth``) writes a
*run directory* holding ``config.yaml`` (the exact config used), ``metrics.jsonl`` (one
JSON object per logged step or result) and ``README.md`` (a model card). A step that
finds its ``DONE`` marker returns the stored result instead of redoing the work; a
training step that finds checkpoints resumes from the newest one.
"""
from __future__ import annotations

import dataclasses
import json
import time
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from qmdlab.errors import ConfigError

T = TypeVar("T")
DONE = "DONE"


def load_config(cls: type[T], path: str | Path | None = None, **overrides: Any) -> T:
    """Build dataclass ``cls`` from an optional YAML mapping plus keyword overrides.

    Unknown keys are an error (a typo must not silently fall back to a default).

    >>> @dataclasses.dataclass
    ... class C:
    ...     lr: float = 1.0
    ...     name: str = "x"
    >>> load_config(C, lr=2.0)
    C(lr=2.0, name='x')
    >>> load_config(C, nme="y")
    Traceback (most recent call last):
    ...
    qmdlab.errors.ConfigError: unknown C option(s): nme (known: lr, name)
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"{path}: cannot read config ({err})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: a config must be a YAML mapping")
        data.update(loaded)
    data.update({k: v for k, v in overrides.items() if v is not None})
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} option(s): {', '.join(unknown)} (known: {', '.join(sorted(names))})")
    hints = typing.get_type_hints(cls)
    return cls(**{k: _coerce(cls.__name__, k, v, hints.get(k)) for k, v in data.items()})


def _coerce(owner: str, name: str, value: Any, hint: Any) -> Any:
    """YAML 1.1 reads ``1e-4`` as a string; numbers for numeric fields are converted.

    >>> _coerce("C", "lr", "1e-4", float), _coerce("C", "n", 3, float), _coerce("C", "s", "x", str)
    (0.0001, 3.0, 'x')
    """
    args = typing.get_args(hint) or (hint,)
    for num in (int, float):
        if num in args and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            if isinstance(value, num):
                return value
            try:
                return num(value) if num is float or float(value).is_integer() else value
            except ValueError:
                raise ConfigError(f"{owner}.{name} must be a number, not {value!r}") from None
    return value


def save_config(cfg, run_dir: str | Path) -> Path:
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    path = run / "config.yaml"
    path.write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def append_metrics(run_dir: str | Path, record: dict) -> None:
    """Append one JSON line to ``run_dir/metrics.jsonl``."""
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    with (run / "metrics.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"time": round(time.time(), 3), **record}, default=float) + "\n")


def read_metrics(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def mark_done(run_dir: str | Path, result: dict) -> None:
    (Path(run_dir) / DONE).write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")


def done_result(run_dir: str | Path) -> dict | None:
    path = Path(run_dir) / DONE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def write_model_card(run_dir: str | Path, title: str, body: str) -> Path:
    path = Path(run_dir) / "README.md"
    path.write_text(f"# {title}\n\n{body.strip()}\n", encoding="utf-8")
    return path


def last_checkpoint(checkpoint_dir: str | Path) -> str | None:
    """The newest ``checkpoint-N`` folder under ``checkpoint_dir``, or None."""
    d = Path(checkpoint_dir)
    if not d.is_dir():
        return None
    cps = [p for p in d.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return str(max(cps, key=lambda p: int(p.name.split("-")[-1]))) if cps else None


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


def metrics_callback(run_dir: str | Path, stage: str):
    """A ``TrainerCallback`` writing every log (loss, lr, reward components) to metrics.jsonl."""
    from transformers import TrainerCallback

    class _JsonlMetrics(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:
                append_metrics(run_dir, {"stage": stage, "step": state.global_step, **logs})

    return _JsonlMetrics()


def load_tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(path))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok
