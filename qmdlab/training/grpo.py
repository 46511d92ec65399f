"""GRPO of the SFT'd expander (``trl.GRPOTrainer``) with the rule + retrieval reward.

Recipe (docs/design.md, training): start from the merged SFT weights with a fresh LoRA (r 4 / α 8 on q, v),
4 generations per prompt, max completion 200 tokens, **β = 0.04 set explicitly** (TRL's
default is 0, which would drop the KL term and the reference model), lr 5e-7.

Rewards (weights are config):

- ``rule``: :func:`qmdlab.training.reward.rule_reward`, the same function evaluation uses;
- ``retrieval``: ΔnDCG@10 of the qmdlab pipeline with the completion's expansions vs. no
  expansion, for prompts whose query has relevance labels (None elsewhere, which TRL skips);
  for *synthetic prompts* — the round-trip-filtered generated queries of ``synthetic_suites``
  (``qmdlab expand-docs``), thousands per collection where the labelled train queries are a few
  dozen — the change in the source document's reciprocal rank (``synthetic_metric``);
- ``rule_format`` … ``rule_entities``: the rule score's parts, weight 0 — logged per step
  (``rewards/rule_format/mean`` …) but not optimised separately.

``reward: gain`` instead optimises the retrieval gain itself (:class:`qmdlab.training.reward.GainReward`):
ΔnDCG@10 of the completion's expansions against the same query without expansion, on the reward's
pipeline as configured (``pipeline``: PipelineConfig options such as ``expand_gate: overlap``), a
harm weighted ``harm_weight`` (2.0) times a gain, and the rule score only as a format check (a
malformed completion gets ``−format_penalty``; ``rule`` and its parts are still logged at weight 0).
Each step logs TRL's ``reward`` and ``kl`` and the gain's ``gain/delta`` (mean Δ), ``gain/harmful``
(the share of completions with Δ < 0) and ``gain/malformed``. ``early_stop_fraction`` holds back a
slice of the labelled training queries: every ``early_stop_steps`` steps the policy answers them
greedily, their mean reward is logged (``heldback/reward``), and training stops once it has not
improved for ``early_stop_patience`` checks.

A run resumes from the newest checkpoint in ``output_dir/checkpoints`` (noted in ``metrics.jsonl``
as ``resumed_from``); ``prompts_seen.jsonl`` records the prompts of every generation batch with
the step it was drawn at (the lines of steps a resume redoes are dropped first).

Prompts are rendered with ``chat_template_kwargs={"enable_thinking": False}``, i.e. exactly
as in SFT and at inference. Generation runs in transformers, or in vLLM when it is installed
and ``use_vllm`` is set. ``generic_instruct`` samples under the engine's grammar for an untrained
instruct model (transformers only), with that model's prompt.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from qmdlab.errors import ConfigError
from qmdlab.training import hardware, rundir
from qmdlab.training.data import dedupe, load_examples, to_grpo_record
from qmdlab.training.lora import lora_config, save_adapter
from qmdlab.training.render import CHAT_TEMPLATE_KWARGS, prompt_messages
from qmdlab.training.reward import GainReward, RetrievalReward, rule_reward, score_expansion

RULE_PARTS = ("format", "diversity", "hyde", "quality", "entities")


@dataclass
class GRPORunConfig:
    """Configuration of one GRPO run (YAML keys = field names)."""

    base: str = field(default="runs/sft/merged", metadata={"help": "Merged SFT model directory."})
    prompts_file: str = field(
        default="data/training/seed.jsonl", metadata={"help": "Examples (JSONL schema); only the queries are used."}
    )
    suite: str | None = field(
        default=None,
        metadata={
            "help": "Labelled suite dir (qmdlab.eval.loaders format, e.g. data/) whose queries carry the retrieval term."
        },
    )
    collection: str = field(default="default", metadata={"help": "Collection name of the suite's docids."})
    labelled_file: str | None = field(
        default=None, metadata={"help": 'Alternative to suite: JSONL {"qid", "query", "qrels": {docno: grade}}.'}
    )
    index: str | None = field(default=None, metadata={"help": "qmdlab index for the retrieval term."})
    labelled_suites: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Suites (default, cisi, a dir) whose *train-split* judged queries are prompts with the retrieval "
            "term, searched in the suite's own index exactly as evaluation searches it; needs splits_file."
        },
    )
    splits_file: str | None = field(
        default=None,
        metadata={
            "help": "splits.json (qmdlab.training.splits): only `train` qids become prompts; a held-out qid is an error."
        },
    )
    synthetic_suites: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Suites whose index holds kept generated queries (`qmdlab expand-docs`): each is a prompt whose "
            "relevant document is its source; needs splits_file (a generated held-out query text is an error)."
        },
    )
    synthetic_generator: str | None = field(
        default=None, metadata={"help": "Generator fingerprint of the synthetic prompts (default: the active one)."}
    )
    synthetic_max_prompts: int = field(
        default=2000, metadata={"help": "At most this many synthetic prompts per suite."}
    )
    synthetic_metric: str = field(
        default="rr", metadata={"help": "Retrieval reward of a synthetic prompt: rr (source's reciprocal rank) | ndcg."}
    )
    unlabelled_prompts: bool = field(
        default=True,
        metadata={
            "help": "Also use prompts_file's unlabelled queries (rule reward only). Off: every batch is labelled."
        },
    )
    models_preset: str = field(default="offline-mini", metadata={"help": "Embedder/reranker preset of that pipeline."})
    pipeline_rerank: bool = field(default=False, metadata={"help": "Rerank inside the reward's pipeline runs."})
    output_dir: str = "runs/grpo"
    lora_r: int = 4
    lora_alpha: int = 8
    lora_dropout: float = 0.0
    lora_targets: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])
    beta: float = 0.04
    num_generations: int = 4
    max_completion_length: int = 200
    learning_rate: float = 5e-7
    temperature: float = 0.7
    top_p: float = 0.8
    top_k: int = 20
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    num_train_epochs: float = 1.0
    max_steps: int = -1
    rule_weight: float = 1.0
    retrieval_weight: float = 1.0
    reward: str = field(
        default="rule",
        metadata={
            "help": "rule: rule score × rule_weight + ΔnDCG × retrieval_weight; gain: ΔnDCG with harm × harm_weight, "
            "the rule score only as a format check (needs the retrieval term)."
        },
    )
    harm_weight: float = field(default=2.0, metadata={"help": "reward: gain — a loss of nDCG counts this many times."})
    format_penalty: float = field(
        default=1.0, metadata={"help": "reward: gain — a malformed completion's reward is minus this."}
    )
    pipeline: dict = field(
        default_factory=dict,
        metadata={
            "help": "PipelineConfig options of the reward's pipeline (e.g. {expand_gate: overlap, expand_types: lex})."
        },
    )
    early_stop_fraction: float = field(
        default=0.0, metadata={"help": "Share of the labelled prompts held back for early stopping (0: off)."}
    )
    early_stop_steps: int = field(default=25, metadata={"help": "Steps between held-back checks."})
    early_stop_patience: int = field(default=3, metadata={"help": "Checks without improvement before stopping."})
    generic_instruct: bool = field(
        default=False,
        metadata={
            "help": "Train as the engine runs an untrained instruct expander: its system turn explaining the "
            "line format in every prompt, and every completion (the held-back answers too) sampled under its "
            "grammar (qmdlab.training.constrained; needs xgrammar). An instruct base then needs no SFT to "
            "learn the format. Export with generic_instruct too, so the engine prompts and decodes it alike."
        },
    )
    precision: str = "auto"
    logging_steps: int = 1
    save_steps: int = 50
    seed: int = 0
    use_vllm: bool = False
    merge: bool = True


def load_labelled(path: str | Path) -> list[dict]:
    """Read ``{"qid", "query", "qrels": {docno: grade}}`` lines."""
    from qmdlab.errors import DataFormatError

    rows = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataFormatError(path, i, f"invalid JSON ({err.msg})") from None
        if not (
            isinstance(obj, dict)
            and isinstance(obj.get("qid"), str)
            and isinstance(obj.get("query"), str)
            and isinstance(obj.get("qrels"), dict)
        ):
            raise DataFormatError(path, i, 'expected {"qid": str, "query": str, "qrels": {docno: grade}}')
        rows.append(obj)
    return rows


def labelled_rows(cfg: GRPORunConfig) -> list[dict]:
    """Labelled queries from ``suite``, ``labelled_file`` and the train side of ``labelled_suites``
    (docnos as the pipeline names them; ``labelled_suites`` qids tagged ``suite:qid``)."""
    rows = []
    if cfg.suite:
        from qmdlab.training.evaluate import suite_rows

        rows += suite_rows(cfg.suite, cfg.collection)
    if cfg.labelled_file:
        rows += load_labelled(cfg.labelled_file)
    if cfg.labelled_suites:
        rows += split_rows(cfg)
    if cfg.synthetic_suites:
        rows += synthetic_rows(cfg)
    return rows


#: Local qids of synthetic prompts start with this (``default:syn-…``); the retrieval term routes on it.
SYNTHETIC_PREFIX = "syn-"


def synthetic_rows(cfg: GRPORunConfig) -> list[dict]:
    """The kept generated queries of ``synthetic_suites`` as labelled prompts: qid
    ``suite:syn-<chunk hash>-<seq>-<n>``, qrels ``{source docno: 1}`` (every active document holding
    the chunk), one prompt per distinct query text, a seeded sample of at most
    ``synthetic_max_prompts`` per suite. Raises :class:`qmdlab.training.leakage.LeakError` when a
    generated query is the text of a held-out query of ``splits_file``."""
    import random

    import polars as pl

    from qmdlab.eval.record import prepare_index
    from qmdlab.eval.suites import get_suite
    from qmdlab.store import doc_expansions as store
    from qmdlab.training.leakage import check_no_heldout
    from qmdlab.training.splits import load_splits, tag

    if not cfg.splits_file:
        raise ConfigError(
            "synthetic_suites needs splits_file (the doc2query run's splits.json): the generator was trained on its "
            "train queries only, and the held-out ones are checked against every generated prompt"
        )
    splits = load_splits(cfg.splits_file)
    rows: list[dict] = []
    for name in cfg.synthetic_suites:
        suite = get_suite(name)
        if suite.name not in splits:
            raise ConfigError(f"{cfg.splits_file} has no split for suite {suite.name!r} (it has {sorted(splits)})")
        idx = prepare_index(suite, None, progress=False, log=lambda _m: None)
        kept = store.kept_queries(idx, cfg.synthetic_generator, collections=[suite.collection])
        if not kept:
            raise ConfigError(
                f"suite {suite.name!r}: its index {idx.dir} holds no kept generated queries; run "
                f"`qmdlab --index {idx.dir} expand-docs --generator RUN/model.gguf` first"
            )
        holders = store.source_docnos(idx, [suite.collection])
        seen: set[str] = set()
        part: list[dict] = []
        for k in kept:
            key = " ".join(k.query.lower().split())
            if key in seen:
                continue
            seen.add(key)
            docnos = sorted(holders.get(k.hash, set()) | {k.docno})
            part.append(
                {
                    "qid": tag(suite.name, f"{SYNTHETIC_PREFIX}{k.hash[:12]}-{k.seq}-{len(part)}"),
                    "query": k.query,
                    "intent": None,
                    "qrels": {d: 1 for d in docnos},
                    "suite": suite.name,
                    "synthetic": True,
                }
            )
        if len(part) > cfg.synthetic_max_prompts:
            part = random.Random(cfg.seed).sample(part, cfg.synthetic_max_prompts)
        judged = suite.data().judged_queries()
        texts = dict(zip(judged["qid"].cast(pl.Utf8).to_list(), judged["query"].to_list()))
        check_no_heldout(
            [{"query": r["query"]} for r in part],
            splits[suite.name].heldout,
            texts,
            where="GRPO prompts",
            text="query",
            suite=suite.name,
        )
        rows += part
    return rows


def split_rows(cfg: GRPORunConfig) -> list[dict]:
    """The train-split judged queries of ``labelled_suites``, qids tagged ``suite:qid``, qrels keyed by
    the suite's own docnos. Raises :class:`qmdlab.training.leakage.LeakError` if a held-out query is among them."""
    from qmdlab.eval.metrics import qrels_dict
    from qmdlab.eval.suites import get_suite
    from qmdlab.training.leakage import check_no_heldout
    from qmdlab.training.splits import heldout_tagged, load_splits, tag

    if not cfg.splits_file:
        raise ConfigError(
            "labelled_suites needs splits_file (a train/held-out split; the recipe's `split` step "
            "writes it) so that held-out queries never become GRPO prompts"
        )
    splits = load_splits(cfg.splits_file)
    rows = []
    for name in cfg.labelled_suites:
        suite = get_suite(name)
        if suite.name not in splits:
            raise ConfigError(f"{cfg.splits_file} has no split for suite {suite.name!r} (it has {sorted(splits)})")
        train = set(splits[suite.name].train)
        qrels = qrels_dict(suite.qrels_docnos())
        for r in suite.data().judged_queries().sort("qid").iter_rows(named=True):
            qid = str(r["qid"])
            if qid in train and any(g > 0 for g in qrels.get(qid, {}).values()):
                rows.append(
                    {
                        "qid": tag(suite.name, qid),
                        "query": r["query"],
                        "intent": r.get("intent"),
                        "qrels": qrels[qid],
                        "suite": suite.name,
                    }
                )
    check_no_heldout([r["qid"] for r in rows], heldout_tagged(splits), where="GRPO prompts")
    return rows


def build_dataset(cfg: GRPORunConfig, labelled: list[dict] | None = None, *, exclude: frozenset[str] = frozenset()):
    """Prompt-only records: the example queries (no labels) plus the labelled queries (``labelled``:
    :func:`labelled_rows`, read when not given), less the held-back qids ``exclude``."""
    from datasets import Dataset

    rows = []
    if cfg.prompts_file and cfg.unlabelled_prompts:
        rows += [
            to_grpo_record(ex.query, ex.intent, generic=cfg.generic_instruct)
            for ex in dedupe(load_examples(cfg.prompts_file))
        ]
    labelled = labelled_rows(cfg) if labelled is None else labelled
    rows += [
        to_grpo_record(r["query"], r.get("intent"), r["qid"], generic=cfg.generic_instruct)
        for r in labelled
        if r["qid"] not in exclude
    ]
    if not rows:
        raise ConfigError(f"no GRPO prompts in {cfg.prompts_file}")
    return Dataset.from_list(rows)


def heldback_rows(cfg: GRPORunConfig, labelled: list[dict]) -> list[dict]:
    """The labelled prompts held back for early stopping: a seeded ``early_stop_fraction`` of them
    (at least one, never all; none when the fraction is 0), in qid order.

    >>> rows = [{"qid": f"q{i}", "query": "x", "qrels": {"d": 1}} for i in range(10)]
    >>> [r["qid"] for r in heldback_rows(GRPORunConfig(early_stop_fraction=0.2), rows)]
    ['q6', 'q9']
    >>> heldback_rows(GRPORunConfig(), rows)
    []
    """
    if cfg.early_stop_fraction <= 0:
        return []
    if not 0 < cfg.early_stop_fraction < 1:
        raise ConfigError(f"early_stop_fraction must be in [0, 1), got {cfg.early_stop_fraction!r}")
    import random

    judged = sorted((r for r in labelled if any(g > 0 for g in r["qrels"].values())), key=lambda r: r["qid"])
    if len(judged) < 2:
        raise ConfigError(
            f"early_stop_fraction needs at least two labelled prompts (one to hold back, one to train on); "
            f"this run has {len(judged)}"
        )
    n = min(max(1, round(cfg.early_stop_fraction * len(judged))), len(judged) - 1)
    return sorted(random.Random(cfg.seed).sample(judged, n), key=lambda r: r["qid"])


def _named(fn, name):
    fn.__name__ = name
    return fn


def rule_part_reward(part: str):
    """A zero-weight reward function logging one part of the rule score (points / 120)."""

    def f(prompts=None, completions=(), query=None, **kwargs):
        out = []
        for q, c in zip(query, completions):
            s = score_expansion(q, c)
            out.append(s.parts.get(part, 0.0) / 120.0)
        return out

    return _named(f, f"rule_{part}")


def pipeline_retrieval(cfg: GRPORunConfig) -> RetrievalReward | RoutedRetrieval | None:
    """The retrieval term over the qmdlab pipeline, or None when not configured."""
    if (cfg.labelled_suites or cfg.synthetic_suites) and cfg.retrieval_weight:
        return suite_retrieval(cfg)
    rows = labelled_rows(cfg)
    if not (rows and cfg.index and cfg.retrieval_weight):
        return None
    from qmdlab.models import ModelSet, load_models
    from qmdlab.pipeline.lab import Lab
    from qmdlab.training.evaluate import ensure_index
    from qmdlab.training.reward import pipeline_scorer

    models = load_models(cfg.models_preset, n_threads=2)
    corpus = None
    if cfg.suite:
        from qmdlab.eval.loaders import load

        corpus = load(cfg.suite).corpus_dir
    idx = ensure_index(cfg.index, corpus, cfg.collection, models.embedder) if corpus else None
    if idx is None:
        from qmdlab.store import Index

        idx = Index.open(cfg.index)
    lab = Lab(idx, ModelSet(models.embedder, None, models.reranker if cfg.pipeline_rerank else None))
    lab.config = lab.config.replace(**cfg.pipeline).replace(rerank=cfg.pipeline_rerank)
    qrels = {r["qid"]: r["qrels"] for r in rows}
    return RetrievalReward(pipeline_scorer(lab), qrels)


class RoutedRetrieval:
    """The retrieval term of several suites: a ``suite:qid`` prompt is scored by its suite's
    :class:`~qmdlab.training.reward.RetrievalReward` (same interface, so GRPO and tests use either),
    a synthetic prompt (``suite:syn-…``) by the suite's ``suite/synthetic`` reward."""

    def __init__(self, by_suite: dict[str, RetrievalReward]):
        self.by_suite = by_suite

    @staticmethod
    def route(qid: str) -> str:
        """The ``by_suite`` key of a tagged qid.

        >>> RoutedRetrieval.route("cisi:12"), RoutedRetrieval.route("cisi:syn-ab12-0-3")
        ('cisi', 'cisi/synthetic')
        """
        from qmdlab.training.splits import untag

        suite, local = untag(qid)
        return f"{suite}/synthetic" if local.startswith(SYNTHETIC_PREFIX) else suite

    def __call__(self, query: str, qid: str | None, completion) -> float | None:
        if not qid or ":" not in qid:
            return None
        reward = self.by_suite.get(self.route(qid))
        return None if reward is None else reward(query, qid, completion)

    def reward_func(self, prompts=None, completions=(), query=None, qid=None, **kwargs) -> list[float | None]:
        qids = qid if qid is not None else [None] * len(completions)
        return [self(q, i, c) for q, i, c in zip(query, qids, completions)]


def suite_retrieval(cfg: GRPORunConfig) -> RoutedRetrieval:
    """ΔnDCG@10 per ``labelled_suites`` suite, searched through the suite's own index and pipeline
    configuration (:func:`qmdlab.eval.record.suite_config`, rerank off) — the pipeline evaluation uses — with
    the completion passed through the engine's parser and expansion filter (:func:`qmdlab.training.reward.engine_scorer`)."""
    from qmdlab.eval.record import open_lab, suite_config
    from qmdlab.eval.suites import get_suite
    from qmdlab.models import ModelSet, load_models
    from qmdlab.training.reward import engine_scorer

    models = load_models(cfg.models_preset, expand="none", rerank="none", n_threads=2)
    rows = split_rows(cfg) if cfg.labelled_suites else []
    synthetic = synthetic_rows(cfg) if cfg.synthetic_suites else []
    by_suite = {}
    for name in dict.fromkeys([*cfg.labelled_suites, *cfg.synthetic_suites]):
        suite = get_suite(name)
        config = suite_config(suite).replace(**cfg.pipeline).replace(rerank=False, expand=True)
        lab = open_lab(suite, ModelSet(models.embedder, None, None), config, log=lambda _m: None)
        scorer = engine_scorer(lab)  # one per lab: it owns the lab's expander slot
        if name in cfg.labelled_suites:
            qrels = {r["qid"]: r["qrels"] for r in rows if r["suite"] == suite.name}
            by_suite[suite.name] = RetrievalReward(scorer, qrels)
        if name in cfg.synthetic_suites:
            qrels = {r["qid"]: r["qrels"] for r in synthetic if r["suite"] == suite.name}
            by_suite[f"{suite.name}/synthetic"] = RetrievalReward(scorer, qrels, metric=cfg.synthetic_metric)
    return RoutedRetrieval(by_suite)


REWARDS = ("rule", "gain")


def gain_reward(cfg: GRPORunConfig, retrieval: RetrievalReward | RoutedRetrieval | None) -> GainReward:
    """The ``reward: gain`` reward of ``retrieval`` (an error without one: there is no gain to measure)."""
    if retrieval is None:
        raise ConfigError(
            "reward: gain needs the retrieval term: labelled prompts (labelled_suites with splits_file, "
            "synthetic_suites, or suite/labelled_file with index) and retrieval_weight > 0"
        )
    return GainReward(retrieval, harm_weight=cfg.harm_weight, format_penalty=cfg.format_penalty)


def reward_functions(
    cfg: GRPORunConfig, retrieval: RetrievalReward | RoutedRetrieval | None, *, seen: PromptLog | None = None
):
    """(functions, weights) for ``GRPOTrainer``; ``seen`` records each batch's prompts."""
    if cfg.reward not in REWARDS:
        raise ConfigError(f"unknown reward {cfg.reward!r}; choose one of: {', '.join(REWARDS)}")

    def rule(prompts=None, completions=(), query=None, qid=None, trainer_state=None, **kw):
        if seen is not None:
            seen.record(query or [], qid, trainer_state)
        return rule_reward(prompts, completions, query)

    if cfg.reward == "gain":
        gain = gain_reward(cfg, retrieval)
        funcs = [
            _named(
                lambda prompts=None, completions=(), query=None, qid=None, log_metric=None, **kw: gain.reward_func(
                    prompts, completions, query, qid, log_metric
                ),
                "gain",
            ),
            _named(rule, "rule"),
        ]
        weights = [1.0, 0.0]  # the rule score only as the gain's format check; logged
        for part in RULE_PARTS:
            funcs.append(rule_part_reward(part))
            weights.append(0.0)
        return funcs, weights
    funcs = [_named(rule, "rule")]
    weights = [cfg.rule_weight]
    if retrieval is not None:
        funcs.append(
            _named(
                lambda prompts=None, completions=(), query=None, qid=None, **kw: retrieval.reward_func(
                    prompts, completions, query, qid
                ),
                "retrieval",
            )
        )
        weights.append(cfg.retrieval_weight)
    for part in RULE_PARTS:
        funcs.append(rule_part_reward(part))
        weights.append(0.0)
    return funcs, weights


class PromptLog:
    """``prompts_seen.jsonl`` of a run: per generation batch, the step it was drawn at (steps done
    so far), the process rank and the batch's distinct queries and qids — what the policy has seen,
    across resumes (:meth:`truncate` drops the lines of steps a resume redoes)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def record(self, queries, qids, state) -> None:
        import os

        step = int(getattr(state, "global_step", 0) or 0)
        row = {
            "step": step,
            "rank": int(os.environ.get("RANK", "0")),
            "queries": list(dict.fromkeys(queries)),
            "qids": [q for q in dict.fromkeys(qids or ()) if q],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")

    def rows(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def truncate(self, step: int) -> None:
        """Keep the batches drawn before ``step`` (a resume from checkpoint ``step`` draws the rest again)."""
        if self.path.exists():
            kept = [r for r in self.rows() if r["step"] < step]
            self.path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept), encoding="utf-8")


def heldback_value(cfg: GRPORunConfig, retrieval, query: str, qid: str, completion: str) -> float | None:
    """A held-back prompt's reward as training computes it: the gain reward (``reward: gain``), else
    ``rule_weight`` × rule score + ``retrieval_weight`` × Δ."""
    if cfg.reward == "gain":
        return gain_reward(cfg, retrieval).score(query, qid, completion).reward
    delta = retrieval(query, qid, completion) if retrieval is not None else None
    return cfg.rule_weight * score_expansion(query, completion).total + cfg.retrieval_weight * (delta or 0.0)


def heldback_callback(cfg: GRPORunConfig, rows: list[dict], tok, retrieval, out: Path):
    """A ``TrainerCallback`` that, every ``early_stop_steps`` steps, lets the policy answer the
    held-back prompts ``rows`` greedily, logs their mean reward (``heldback/reward``) and stops
    training after ``early_stop_patience`` checks without improvement."""
    import math

    from transformers import TrainerCallback

    every, patience = max(1, int(cfg.early_stop_steps)), max(1, int(cfg.early_stop_patience))

    class _HeldBackStop(TrainerCallback):
        best = -math.inf
        stale = 0

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if model is None or state.global_step % every:
                return
            value = self.value(model)
            record = {"stage": "grpo", "step": state.global_step, "heldback/reward": value}
            if value > self.best + 1e-9:
                self.best, self.stale = value, 0
            else:
                self.stale += 1
                if self.stale >= patience:
                    control.should_training_stop = True
                    record["early_stop"] = True
            if state.is_world_process_zero:
                rundir.append_metrics(out, record)

        @staticmethod
        def value(model) -> float:
            import torch

            texts = [
                tok.apply_chat_template(
                    prompt_messages(r["query"], r.get("intent"), generic=cfg.generic_instruct),
                    tokenize=False,
                    add_generation_prompt=True,
                    **CHAT_TEMPLATE_KWARGS,
                )
                for r in rows
            ]
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            training = model.training
            model.eval()
            try:
                with torch.no_grad():
                    ids = model.generate(
                        **enc, max_new_tokens=cfg.max_completion_length, do_sample=False, pad_token_id=tok.pad_token_id
                    )
            finally:
                model.train(training)
            answers = tok.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            values = [heldback_value(cfg, retrieval, r["query"], r["qid"], a) for r, a in zip(rows, answers)]
            scored = [v for v in values if v is not None]
            return sum(scored) / len(scored) if scored else 0.0

    return _HeldBackStop()


def build_trainer(cfg: GRPORunConfig, *, retrieval: RetrievalReward | RoutedRetrieval | None = None, callbacks=()):
    """The configured ``GRPOTrainer``; ``retrieval`` overrides the pipeline-built term (tests)."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer
    from trl.import_utils import is_vllm_available

    out = Path(cfg.output_dir)
    flags = hardware.precision_flags(cfg.precision)
    tok = hardware.load_tokenizer(cfg.base)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(cfg.base, dtype=torch.bfloat16 if flags["bf16"] else torch.float32)
    if retrieval is None:
        retrieval = pipeline_retrieval(cfg)
    funcs, weights = reward_functions(cfg, retrieval, seen=PromptLog(out / "prompts_seen.jsonl"))
    labelled = labelled_rows(cfg)
    held = heldback_rows(cfg, labelled)
    extra = []
    if held:
        out.mkdir(parents=True, exist_ok=True)
        (out / "heldback_qids.json").write_text(json.dumps([r["qid"] for r in held]) + "\n", encoding="utf-8")
        extra.append(heldback_callback(cfg, held, tok, retrieval, out))
    use_vllm = bool(cfg.use_vllm and is_vllm_available())
    if cfg.generic_instruct and use_vllm:
        raise ConfigError("generic_instruct samples under a grammar in transformers' generate; set use_vllm: false")
    args = GRPOConfig(
        **hardware.run_args(out / "checkpoints", cfg, save_total_limit=2),
        **hardware.schedule_args(cfg),
        beta=cfg.beta,
        num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        reward_weights=weights,
        chat_template_kwargs=dict(CHAT_TEMPLATE_KWARGS),
        use_vllm=use_vllm,
        **flags,
    )
    peft_config = lora_config(cfg)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=args,
        train_dataset=build_dataset(cfg, labelled, exclude=frozenset(r["qid"] for r in held)),
        processing_class=tok,
        peft_config=peft_config,
        callbacks=[rundir.metrics_callback(out, "grpo"), *extra, *callbacks],
    )
    if cfg.generic_instruct:  # the held-back callback calls the same model's generate
        from qmdlab.models.registry import generic_instruct_grammar
        from qmdlab.training.constrained import constrain_generate

        constrain_generate(trainer.model, tok, generic_instruct_grammar())
    return trainer, tok


@rundir.resumable("output_dir")
def run_grpo(cfg: GRPORunConfig, *, retrieval: RetrievalReward | RoutedRetrieval | None = None) -> dict:
    """Train (resuming from the newest checkpoint), save the adapter and merged weights."""
    out = Path(cfg.output_dir)
    rundir.save_config(cfg, out)
    if retrieval is None:
        retrieval = pipeline_retrieval(cfg)
    trainer, tok = build_trainer(cfg, retrieval=retrieval)
    prompt_qids = (
        sorted({q for q in trainer.train_dataset["qid"] if q}) if "qid" in trainer.train_dataset.column_names else []
    )
    (out / "prompt_qids.json").write_text(json.dumps(prompt_qids) + "\n", encoding="utf-8")
    resume = rundir.last_checkpoint(out / "checkpoints")
    if resume is not None:
        step = rundir.checkpoint_step(resume)
        PromptLog(out / "prompts_seen.jsonl").truncate(step)
        rundir.append_metrics(out, {"stage": "grpo", "resumed_from": resume, "step": step})
    result = trainer.train(resume_from_checkpoint=resume)
    # the tokenizer pads on the left for generation; the merged model's pads on the right
    merged_dir = save_adapter(trainer, tok, out, merge=cfg.merge, merged_padding_side="right")
    if not trainer.accelerator.is_main_process:
        return {}
    logs = [m for m in rundir.read_metrics(out) if m.get("stage") == "grpo" and "reward" in m and not m.get("final")]
    res = {
        "adapter": str(out / "adapter"),
        "merged": str(merged_dir) if merged_dir else None,
        "steps": int(result.global_step),
        "train_loss": float(result.training_loss),
        "first_reward": logs[0]["reward"] if logs else None,
        "last_reward": logs[-1]["reward"] if logs else None,
        "retrieval_term": retrieval is not None,
        "objective": cfg.reward,
        "early_stopped": any(m.get("early_stop") for m in rundir.read_metrics(out) if m.get("stage") == "grpo"),
    }
    rundir.finish(
        out,
        "grpo",
        res,
        "qmdlab query expander — GRPO",
        f"""
Policy: `{cfg.base}` + LoRA r={cfg.lora_r} α={cfg.lora_alpha} on {", ".join(cfg.lora_targets)}.
β={cfg.beta}, {cfg.num_generations} generations, max completion {cfg.max_completion_length}, lr {cfg.learning_rate}.
Reward: {_reward_line(cfg, retrieval is not None)}.
{res["steps"]} steps; mean reward first/last logged step: {res["first_reward"]} / {res["last_reward"]}.
Per-part rule rewards are in metrics.jsonl (`rewards/rule_<part>/mean`).
""",
    )
    return res


def _reward_line(cfg: GRPORunConfig, retrieval: bool) -> str:
    """The model card's reward line.

    >>> _reward_line(GRPORunConfig(reward="gain"), True)
    'ΔnDCG@10 against no expansion, harm × 2.0, a malformed completion −1.0'
    """
    if cfg.reward == "gain":
        return f"ΔnDCG@10 against no expansion, harm × {cfg.harm_weight}, a malformed completion −{cfg.format_penalty}"
    return f"rule score × {cfg.rule_weight}" + (
        f" + ΔnDCG@10 × {cfg.retrieval_weight}" if retrieval else " (no retrieval term)"
    )


def main(argv: list[str] | None = None) -> dict:
    """``python -m qmdlab.training.grpo [--config grpo.yaml] [--field value ...]``."""
    from qmdlab.training.config import parse_args

    return run_grpo(parse_args(GRPORunConfig, argv))


if __name__ == "__main__":
    main(sys.argv[1:])
