"""Fitting a cross-encoder reranker: the model from a base, frozen layers, the trainer, one fit, the
in-collection pretraining; what :mod:`qmdlab.training.reranker` (the K-fold run) and
:mod:`qmdlab.training.reranker_synthetic` (training on generated queries) share.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from qmdlab.errors import ModelError, QmdlabError
from qmdlab.training import hardware, rundir
from qmdlab.training.reranker_data import collection_pairs

if TYPE_CHECKING:
    from qmdlab.training.reranker import RerankerRunConfig
    from qmdlab.training.reranker_data import RerankCandidates


def _trainer_class():
    from sentence_transformers.cross_encoder import CrossEncoderTrainer

    class HeadLRTrainer(CrossEncoderTrainer):
        """CrossEncoderTrainer whose classification head learns at ``head_lr`` (the encoder at the
        args' learning rate): the head starts random, the encoder is pretrained."""

        head_lr: float = 1e-3

        def create_optimizer(self, *args, **kwargs):
            if self.optimizer is None:
                from transformers import Trainer

                # a CrossEncoder is an nn.Module like the PreTrainedModel the stubs name; only its parameters are read
                opt_cls, opt_kwargs = Trainer.get_optimizer_cls_and_kwargs(self.args, cast(Any, self.model))
                opt_kwargs = {k: v for k, v in opt_kwargs.items() if k != "lr"}
                head: list[Any] = []
                body: list[Any] = []
                for name, p in self.model.named_parameters():
                    if p.requires_grad:
                        (head if "classifier" in name else body).append(p)
                self.optimizer = opt_cls(
                    [{"params": body, "lr": self.args.learning_rate}, {"params": head, "lr": self.head_lr}],
                    **opt_kwargs,
                )
            return self.optimizer

    return HeadLRTrainer


def new_model(path: Path, max_length: int, seed: int, identity_pooler: bool = False):
    """A ``CrossEncoder`` (one output) from an encoder or cross-encoder directory, seeded.

    ``identity_pooler`` (for a start from a bi-encoder such as all-MiniLM-L6-v2): set BERT's
    pooler to ``tanh(CLS)`` (identity weights, zero bias). The shipped pooler of that checkpoint
    was never trained for a task: its weights (std 0.009) shrink the [CLS] state ~6x, so a new
    head sees almost no input-dependent signal and, measured, a few hundred CPU steps leave the
    loss at its chance value (MultipleNegativesRanking loss ln 3 = 1.0986 after 13 steps)."""
    try:
        from sentence_transformers.cross_encoder import CrossEncoder
    except ImportError as err:
        raise ModelError(
            f"training a reranker needs sentence-transformers ({err}); run `pip install 'qmdlab[train]'`"
        ) from None
    from transformers import set_seed

    set_seed(seed)
    model = CrossEncoder(str(path), num_labels=1, max_length=max_length, device="cpu", local_files_only=True)
    if identity_pooler:
        import torch

        for name, module in model.named_modules():
            if name.endswith("pooler") and hasattr(module, "dense"):
                with torch.no_grad():
                    module.dense.weight.copy_(torch.eye(module.dense.weight.shape[0], module.dense.weight.shape[1]))
                    module.dense.bias.zero_()
    return model


def freeze(model, n_layers: int) -> int:
    """Freeze the embeddings and the lowest ``n_layers`` encoder layers (cheaper backward
    passes on a CPU; the head and upper layers still learn). Returns the frozen parameter count."""
    if n_layers <= 0:
        return 0
    frozen = 0
    for name, p in model.named_parameters():
        m = re.search(r"\.layer\.(\d+)\.", name)
        if ".embeddings." in name or (m and int(m.group(1)) < n_layers):
            p.requires_grad_(False)
            frozen += p.numel()
    return frozen


def stage_model(cfg: RerankerRunConfig, init_dir: Path, *, identity_pooler: bool):
    """A stage's cross-encoder: :func:`new_model` from ``init_dir`` at the run's length and seed, then :func:`freeze`."""
    model = new_model(init_dir, cfg.max_length, cfg.seed, identity_pooler=identity_pooler)
    freeze(model, cfg.freeze_layers)
    return model


class FitResult(NamedTuple):
    model_dir: Path
    pairs: int
    steps: int
    seconds: float
    train_loss: float


def fit(
    model,
    rows: list[dict],
    loss,
    run_dir: Path,
    *,
    cfg: RerankerRunConfig,
    stage: str,
    learning_rate: float,
    head_lr: float,
    epochs: float,
    max_steps: int,
    batch_size: int,
    pairs_per_row: int,
    no_duplicates: bool = False,
) -> FitResult:
    """Train ``model`` on ``rows`` with the sentence-transformers CrossEncoder trainer (resumable)
    and save it to ``run_dir/model``; the seed, progress bar and logging/save cadence are ``cfg``'s."""
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments

    dataset = Dataset.from_list(rows)
    sampler: dict[str, Any] = {"batch_sampler": "no_duplicates"} if no_duplicates else {}
    args = CrossEncoderTrainingArguments(
        **hardware.sentence_transformers_args(
            run_dir / "checkpoints",
            epochs=epochs,
            max_steps=max_steps,
            batch_size=batch_size,
            learning_rate=learning_rate,
            warmup=0.1,
            seed=cfg.seed,
            logging_steps=cfg.logging_steps,
            save_steps=cfg.save_steps,
            progress=cfg.progress,
            **sampler,
        )
    )
    trainer = _trainer_class()(
        model=model,
        args=args,
        train_dataset=dataset,
        loss=loss,
        callbacks=[rundir.metrics_callback(run_dir.parent, stage)],
    )
    trainer.head_lr = head_lr
    t0 = time.perf_counter()
    out = trainer.train(resume_from_checkpoint=rundir.last_checkpoint(run_dir / "checkpoints"))
    seconds = time.perf_counter() - t0
    model.save_pretrained(str(run_dir / "model"))
    steps = int(out.global_step)
    n_epochs = (steps * batch_size) / max(1, len(rows))
    return FitResult(
        run_dir / "model", int(round(n_epochs * len(rows) * pairs_per_row)), steps, seconds, float(out.training_loss)
    )


def fit_info(res: FitResult, **extra) -> dict:
    """A finished training stage's record (``DONE`` and ``metrics.jsonl``): ``extra`` fields, then the
    model directory, pair evaluations, steps, seconds, pairs/s and the final loss."""
    return {
        "model_dir": str(res.model_dir),
        **extra,
        "pair_evals": res.pairs,
        "steps": res.steps,
        "seconds": round(res.seconds, 1),
        "pairs_per_s": round(res.pairs / max(res.seconds, 1e-9), 2),
        "train_loss": res.train_loss,
    }


def write_meta(
    model_dir: Path, cfg: RerankerRunConfig, rec: RerankCandidates, *, stage: str, labels_used: bool, **extra: Any
) -> None:
    """The trained model's meta file: its token limit, base, stage, suite and whether labels trained
    it, then ``extra`` (calibration, blend, …)."""
    from qmdlab.models.cross_encoder import META_FILE

    meta = {
        "max_length": cfg.max_length,
        "base": cfg.base,
        "stage": stage,
        "suite": rec.suite.name,
        "labels_used": labels_used,
        **extra,
    }
    (Path(model_dir) / META_FILE).write_text(json.dumps(meta, indent=1, default=str), encoding="utf-8")


def pretrain(cfg: RerankerRunConfig, rec: RerankCandidates, base_dir: Path, log) -> tuple[Path, dict]:
    run = Path(cfg.out) / "weak"
    done = rundir.done_result(run)
    if done:
        return Path(done["model_dir"]), done
    pairs = collection_pairs(
        rec.index,
        [rec.suite.collection],
        max_pairs=cfg.weak_max_pairs,
        hard_negatives=cfg.weak_hard_negatives,
        seed=cfg.seed,
    )
    if not pairs:
        raise QmdlabError(f"no heading/title → text pairs in {rec.suite.name!r}; set weak=false")
    log(f"weak: {len(pairs)} in-collection pairs (heading/title → text, no labels)")
    from sentence_transformers.cross_encoder.losses import MultipleNegativesRankingLoss

    model = stage_model(cfg, base_dir, identity_pooler=cfg.identity_pooler)
    loss = MultipleNegativesRankingLoss(model, num_negatives=cfg.weak_in_batch_negatives)
    res = fit(
        model,
        pairs,
        loss,
        run,
        cfg=cfg,
        stage="weak",
        learning_rate=cfg.weak_learning_rate,
        head_lr=cfg.weak_head_learning_rate,
        epochs=cfg.weak_epochs,
        max_steps=-1,
        batch_size=cfg.weak_batch_size,
        pairs_per_row=2 + cfg.weak_hard_negatives + cfg.weak_in_batch_negatives - 1,
        no_duplicates=True,
    )
    write_meta(res.model_dir, cfg, rec, stage="weak", labels_used=False)
    info = fit_info(res, pairs=len(pairs))
    rundir.append_metrics(cfg.out, {"stage": "weak", "final": True, **info})
    rundir.mark_done(run, info)
    return res.model_dir, info


def start_model(cfg: RerankerRunConfig, rec: RerankCandidates, base_dir: Path, log) -> tuple[Path, dict | None]:
    """The model a labelled or synthetic stage starts from, with the weak stage's record: the in-collection
    :func:`pretrain` of ``base_dir`` when ``cfg.weak``, else ``base_dir`` itself (and no record)."""
    if cfg.weak:
        return pretrain(cfg, rec, base_dir, log)
    return base_dir, None
