"""Run directories of the training steps: the config used, metrics, the done marker, model cards, checkpoints.

Every step (``prepare``, ``sft``, ``grpo``, ``export``, ``evaluate``, ``synth``) writes a
*run directory* holding ``config.yaml`` (the exact config used), ``metrics.jsonl`` (one
JSON object per logged step or result) and ``README.md`` (a model card). A step that
finds its ``DONE`` marker returns the stored result instead of redoing the work; a
training step that finds checkpoints resumes from the newest one.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import yaml

DONE = "DONE"

C = TypeVar("C")
P = ParamSpec("P")


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


def resumable(out_field: str) -> Callable[[Callable[Concatenate[C, P], dict]], Callable[Concatenate[C, P], dict]]:
    """A step taking its config first: when the run directory its config names (the field
    ``out_field``) holds the ``DONE`` marker, the stored result is returned and nothing runs."""

    def wrap(run: Callable[Concatenate[C, P], dict]) -> Callable[Concatenate[C, P], dict]:
        @functools.wraps(run)
        def step(cfg: C, /, *args: P.args, **kwargs: P.kwargs) -> dict:
            done = done_result(getattr(cfg, out_field))
            return done if done else run(cfg, *args, **kwargs)

        return step

    return wrap


def write_model_card(run_dir: str | Path, title: str, body: str) -> Path:
    path = Path(run_dir) / "README.md"
    path.write_text(f"# {title}\n\n{body.strip()}\n", encoding="utf-8")
    return path


def finish(run_dir: str | Path, stage: str, result: dict, title: str, card: str) -> None:
    """Close a step's run: its final ``metrics.jsonl`` line, the model card (``title``, ``card``),
    and the ``DONE`` marker last, so a step stopped before the end is run again."""
    append_metrics(run_dir, {"stage": stage, "final": True, **result})
    write_model_card(run_dir, title, card)
    mark_done(run_dir, result)


def last_checkpoint(checkpoint_dir: str | Path) -> str | None:
    """The newest ``checkpoint-N`` folder under ``checkpoint_dir``, or None."""
    d = Path(checkpoint_dir)
    if not d.is_dir():
        return None
    cps = [p for p in d.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()]
    return str(max(cps, key=lambda p: int(p.name.split("-")[-1]))) if cps else None


def checkpoint_step(checkpoint: str | Path) -> int:
    """The step of a ``checkpoint-N`` folder.

    >>> checkpoint_step("runs/grpo/checkpoints/checkpoint-50")
    50
    """
    return int(Path(checkpoint).name.rsplit("-", 1)[-1])


def metrics_callback(run_dir: str | Path, stage: str):
    """A ``TrainerCallback`` writing every log (loss, lr, reward components) to metrics.jsonl."""
    from transformers import TrainerCallback

    class _JsonlMetrics(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and state.is_world_process_zero:
                append_metrics(run_dir, {"stage": stage, "step": state.global_step, **logs})

    return _JsonlMetrics()
