"""Fine-tune an embedder (the packaged MiniLM by default, or ``--base pkg:embeddinggemma-300m``) on
synthetic (generated query, source chunk) pairs — or, with ``--labelled``, on a suite's own training
queries (its official split) — and measure it on held-out labelled queries.

``qmdlab train embedder --suite default --synthetic RUN --out DIR`` or ``python -m
qmdlab.training.embedder --suite default --synthetic RUN --out DIR [--field value ...]`` (every field
of :class:`EmbedderRunConfig` is a flag or a YAML key).

Recipe (Promptagator / InPars style: a small generator's filtered queries train the retriever):

1. **Pairs** — the queries that ``qmdlab expand-docs --generator RUN/model.gguf`` generated for the
   suite's chunks and the round-trip filter kept (:func:`qmdlab.store.doc_expansions.kept_queries`
   of the index's active generator), each with its source chunk as the positive and
   ``hard_negatives`` BM25-mined negatives: the top-ranked documents for the query (the engine's
   :func:`~qmdlab.search.bm25_search`, without the doc-queries column, as the round trip searched)
   that do not hold the source chunk, each represented by its chunk sharing the most query terms.
   Texts are what the embedder sees in the pipeline: its template (:func:`encoder_profile`) writes the
   query and the chunk — MiniLM's ``plain`` (the query as typed, the chunk as ``title\\ntext``),
   EmbeddingGemma's ``gemma`` (``task: search result | query: …``, ``title: … | text: …``). With
   ``--labelled`` the pairs are the train side of the suite's official split instead (:func:`labelled_pairs`: judged documents as positives,
   negatives drawn from the baseline hybrid's ranking), and the held-out side is its test queries.
2. **Leak guard** — the generator was trained on the *train* side of ``RUN/splits.json`` only; a
   generated query equal (case and spacing ignored) to a *held-out* query's text fails the run
   (:func:`~qmdlab.training.leakage.check_no_heldout`).
3. **Training** — sentence-transformers' ``SentenceTransformerTrainer`` with
   ``MultipleNegativesRankingLoss`` (in-batch negatives plus the hard negative columns; batches
   without duplicate texts), on the CPU, seeded, with a checkpoint every ``save_steps`` steps; the
   model directory is ``<out>/model`` and its GGUF (llama.cpp's converter, ``outtype`` f16 or q8_0,
   with the options ``qmdlab pull`` converts the packaged base with: EmbeddingGemma keeps its dense
   projections) ``<out>/model.gguf``: ``QMDLAB_EMBED_MODEL=<out>/model.gguf``.
4. **Evaluation** on the split's held-out queries only: the suite recorded through the pipeline
   (:func:`qmdlab.eval.record.record`; expansion and rerank off) with the packaged base at the
   GGUF's precision (so that only the weights differ) and with the fine-tuned embedder (the index holds both sets of
   vectors: they are keyed by embedder fingerprint), scored vector-only (the original query's vector
   list) and hybrid (BM25 + vectors fused); nDCG@10 per query, paired t and Fisher p-values and
   wins/ties/losses against the packaged base (``report.json``, ``README.md``).

Every stage is resumable: a finished run returns its stored result (``DONE``), the trainer restarts
from its newest checkpoint and the recordings come from the trace cache.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from qmdlab.errors import ConfigError, ModelError, QmdlabError
from qmdlab.training import hardware, rundir
from qmdlab.training.base_models import resolve_encoder_base
from qmdlab.training.config import SuiteRunConfig
from qmdlab.training.leakage import check_no_heldout
from qmdlab.training.splits import QuerySplit

BASE_DEFAULT = "pkg:all-minilm-l6-v2"
METRIC = "ndcg@10"
GGUF_TYPES = ("f16", "q8_0")
# tokenizer files a saved fine-tune lacks and the GGUF converter needs, copied from the base
TOKENIZER_FILES = ("tokenizer.model", "added_tokens.json", "special_tokens_map.json")


class EncoderProfile(NamedTuple):
    """How the pipeline runs an embedder family: what the trainer must match.

    ``name`` labels reports; ``packaged`` is the packaged GGUF the family's untrained baseline loads
    (and whose registry options — ``template``, ``dim``, ``n_ctx`` — the fine-tuned GGUF is loaded
    with, so that a comparison changes the weights only); ``convert_args`` are what ``qmdlab pull``
    converts that checkpoint with."""

    name: str
    packaged: str
    template: str
    convert_args: tuple[str, ...]
    packaged_q8_0: str | None = None  # the same checkpoint's packaged Q8_0 GGUF, when there is one

    def at(self, outtype: str) -> EncoderProfile:
        """The profile of a GGUF written at ``outtype`` (``f16`` or ``q8_0``): the converter's
        ``--outtype`` and the baseline it is compared with (the packaged GGUF of that precision when
        there is one, so that the comparison still changes the weights only).

        >>> p = EncoderProfile("E", "pkg:e", "gemma", ("--outtype", "f16", "--x"), "pkg:e-q8_0").at("q8_0")
        >>> p.packaged, p.convert_args
        ('pkg:e-q8_0', ('--outtype', 'q8_0', '--x'))
        """
        if outtype not in GGUF_TYPES:
            raise ConfigError(f"--outtype {outtype!r}: use one of {', '.join(GGUF_TYPES)}")
        args = list(self.convert_args)
        if "--outtype" in args:
            args[args.index("--outtype") + 1] = outtype
        else:
            args += ["--outtype", outtype]
        packaged = self.packaged_q8_0 if outtype == "q8_0" and self.packaged_q8_0 else self.packaged
        return self._replace(packaged=packaged, convert_args=tuple(args))


def encoder_profile(base_dir: str | Path) -> EncoderProfile:
    """The profile of the encoder in ``base_dir``, by its ``config.json`` ``model_type``: Gemma 3
    (EmbeddingGemma, or a model fine-tuned from it) or else BERT-like (MiniLM's).

    >>> import json, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "config.json").write_text(json.dumps({"model_type": "gemma3_text"}))
    ...     gemma = encoder_profile(d)[:3]
    ...     _ = (Path(d) / "config.json").write_text(json.dumps({"model_type": "bert"}))
    ...     gemma, encoder_profile(d)[:3]
    (('EmbeddingGemma', 'pkg:embeddinggemma-300m', 'gemma'), ('MiniLM', 'pkg:all-minilm-l6-v2', 'plain'))
    """
    from qmdlab.models.packaged import PACKAGED
    from qmdlab.models.registry import EMBEDDINGGEMMA, EMBEDDINGGEMMA_Q8, KNOWN, MINILM

    try:
        kind = json.loads((Path(base_dir) / "config.json").read_text(encoding="utf-8")).get("model_type", "")
    except (OSError, ValueError):
        kind = ""
    if str(kind).startswith("gemma"):
        return EncoderProfile(
            "EmbeddingGemma",
            EMBEDDINGGEMMA,
            KNOWN[EMBEDDINGGEMMA]["template"],
            PACKAGED["embeddinggemma-300m"].convert_args,
            EMBEDDINGGEMMA_Q8,
        )
    return EncoderProfile("MiniLM", MINILM, KNOWN[MINILM]["template"], PACKAGED["all-minilm-l6-v2"].convert_args)


@dataclass
class EmbedderRunConfig(SuiteRunConfig):
    """Configuration of one embedder fine-tuning run (YAML keys / CLI flags = field names)."""

    out: str = field(default="runs/embedder", metadata={"help": "Run directory."})
    synthetic: str | None = field(
        default=None,
        metadata={
            "help": "The generator's run directory (`qmdlab train doc2query --out`) or its splits.json; or an "
            "untrained generator's reference (pkg:NAME, hf:…, a .gguf): it read no query, so every judged query "
            "is held out."
        },
    )
    generator: str | None = field(
        default=None, metadata={"help": "Generator fingerprint whose kept queries to use (default: the active one)."}
    )
    labelled: bool = field(
        default=False,
        metadata={
            "help": "Train on the suite's own training queries (its official split's train side, e.g. SciFact's "
            "809 claims) with their judged documents as positives and hybrid-ranked hard negatives, instead of "
            "--synthetic generated queries; evaluation is on the split's test side."
        },
    )
    base: str = field(
        default=BASE_DEFAULT,
        metadata={
            "help": "pkg:all-minilm-l6-v2, pkg:embeddinggemma-300m (the default embedder's checkpoint), a "
            "sentence-transformers dir or hf:org/name."
        },
    )
    hard_negatives: int = field(default=1, metadata={"help": "BM25-mined negative chunks per pair."})
    negative_depth: int = field(default=20, metadata={"help": "BM25 hits searched for hard negatives."})
    max_pairs: int = field(default=5000, metadata={"help": "At most this many pairs (a seeded sample)."})
    epochs: float = 2.0
    max_steps: int = field(default=-1, metadata={"help": "Overrides epochs when > 0."})
    learning_rate: float = 2e-5
    batch_size: int = field(default=8, metadata={"help": "Pairs per step (in-batch negatives)."})
    warmup: float = field(default=0.1, metadata={"help": "Share of the steps with a rising learning rate."})
    max_seq_length: int = field(
        default=256, metadata={"help": "Tokens per training text (MiniLM was trained with 256; longer costs more)."}
    )
    seed: int = 0
    n_threads: int | None = hardware.threads_field(default=1)
    gguf: bool = field(default=True, metadata={"help": "Convert the model to model.gguf for the pipeline."})
    outtype: str = field(
        default="f16",
        metadata={
            "help": "The GGUF's precision: f16, or q8_0 (as the default embedder ships; the baseline is then the "
            "packaged Q8_0 of the base where there is one, and the index's vectors of it are reused)."
        },
    )
    evaluate: bool = field(default=True, metadata={"help": "Record the held-out queries with both embedders."})
    preset: str = field(
        default="offline-mini",
        metadata={
            "help": "Preset whose hybrid ranks the training queries for --labelled hard negatives (the baseline "
            "of the evaluation is the base's own packaged GGUF)."
        },
    )
    logging_steps: int = 5
    save_steps: int = field(default=100, metadata={"help": "Steps between checkpoints (a stopped run resumes)."})
    progress: bool = True


# -- inputs ---------------------------------------------------------------------------------------
def load_split(synthetic: str | Path | None, suite: str) -> QuerySplit:
    """The generator run's split of ``suite``: ``synthetic`` is the run directory (its
    ``splits.json``) or the split file itself.

    Raises
    ------
    ConfigError
        No ``--synthetic``, no split file, or no split of ``suite`` in it.
    """
    from qmdlab.training.splits import load_splits

    if not synthetic:
        raise ConfigError(
            "--synthetic is required: the generator's run directory (`qmdlab train doc2query --out DIR`), "
            "whose splits.json names the held-out queries the generator never saw"
        )
    path = Path(synthetic).expanduser()
    if path.is_dir():
        path = path / "splits.json"
    splits = load_splits(path)
    if suite not in splits:
        raise ConfigError(
            f"{path} has no split of suite {suite!r} (it has {', '.join(sorted(splits)) or 'none'}); "
            f"pass the run directory of `qmdlab train doc2query --suite {suite}`"
        )
    return splits[suite]


def untrained_generator(synthetic: str | None) -> bool:
    """Whether ``--synthetic`` names a model reference rather than a doc2query run (whose split says
    which queries its training read).

    >>> untrained_generator("pkg:qwen2.5-coder-0.5b-instruct-q4_k_m"), untrained_generator("runs/doc2query")
    (True, False)
    """
    return bool(synthetic) and (str(synthetic).startswith(("pkg:", "hf:")) or str(synthetic).endswith(".gguf"))


def synthetic_split(synthetic: str | None, suite, judged_qids: Sequence[str]) -> QuerySplit:
    """The held-out queries of a ``--synthetic`` run: every judged query when the generator is an
    untrained model (:func:`untrained_generator`), else the generator run's split (:func:`load_split`)."""
    if untrained_generator(synthetic):
        return QuerySplit(suite.name, (), tuple(sorted(judged_qids)), 0, 1.0)
    return load_split(synthetic, suite.name)


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def document_text(title: str, text: str, template: str = "plain") -> str:
    """A chunk as an embedder with ``template`` sees it in the pipeline (MiniLM's ``plain`` by default).

    >>> document_text("Backups", "Run nightly."), document_text("", "Body only.")
    ('Backups\\nRun nightly.', 'Body only.')
    >>> document_text("", "Body only.", "gemma")
    'title: none | text: Body only.'
    """
    from qmdlab.models.templates import EMBEDDING_TEMPLATES

    return EMBEDDING_TEMPLATES[template].document(title, text)


def query_text(query: str, template: str = "plain") -> str:
    """A query as an embedder with ``template`` sees it in the pipeline.

    >>> query_text("undo a commit"), query_text("undo a commit", "gemma")
    ('undo a commit', 'task: search result | query: undo a commit')
    """
    from qmdlab.models.templates import EMBEDDING_TEMPLATES

    return EMBEDDING_TEMPLATES[template].query(query)


def build_pairs(
    idx,
    *,
    generator: str | None = None,
    hard_negatives: int = 1,
    depth: int = 20,
    max_pairs: int | None = None,
    seed: int = 0,
    collections: Sequence[str] | None = None,
    config=None,
    as_text: Callable[[str, str], str] | None = None,
) -> tuple[list[dict], dict]:
    """Training pairs from the index's kept generated queries (see the module notes).

    ``as_text(title, text)`` is how a chunk is shown to the model being trained: the embedder's
    ``plain`` template by default (:func:`document_text`); the cross-encoder reads the chunk text alone.

    Returns
    -------
    pairs : list of dict
        ``anchor`` (the query), ``positive`` (its source chunk), ``negative_1`` … ``negative_k``
        (chunks of other documents), and ``docno``, ``hash``, ``seq`` of the source and
        ``negative_docnos``. A (query, chunk) pair sampled twice is given once; a pair with fewer
        than ``hard_negatives`` negative documents among the top ``depth`` BM25 hits is dropped.
    counts : dict
        ``kept`` (kept queries read), ``duplicates``, ``no_negatives`` (dropped), ``pairs``,
        ``chunks`` (distinct source chunks).
    """
    from qmdlab.pipeline.config import PipelineConfig
    from qmdlab.search.lexical import bm25_search
    from qmdlab.store import doc_expansions as store
    from qmdlab.training.doc2query import best_chunk

    if hard_negatives < 0:
        raise ConfigError(f"hard_negatives must be 0 or more, got {hard_negatives}")
    kept = store.kept_queries(idx, generator, collections=collections)
    colls = list(collections) if collections is not None else None
    holders = store.source_docnos(idx, colls)
    lex = (config or PipelineConfig()).lexical()
    lex["weights"] = tuple(lex["weights"][:3])  # the doc-queries column holds the query itself
    titles: dict[str, str] = {}
    chunk_cache: dict[str, list[str]] = {}

    def chunks_of(docno: str) -> list[str]:
        if docno not in chunk_cache:
            rows = idx.chunks([docno]).sort("seq")
            chunk_cache[docno] = rows[rows.columns[-1]].to_list()
        return chunk_cache[docno]

    if hard_negatives:
        docs = idx.documents(None)
        titles = dict(zip(docs["docno"].to_list(), docs["title"].fill_null("").to_list()))
    show = as_text or document_text
    seen: set[tuple[str, str, int]] = set()
    pairs: list[dict] = []
    dup = no_neg = 0
    for k in kept:
        key = (_norm(k.query), k.hash, k.seq)
        if key in seen:
            dup += 1
            continue
        seen.add(key)
        row: dict[str, Any] = {"anchor": k.query, "positive": show(k.title, k.text)}
        negs: list[str] = []
        if hard_negatives:
            own = holders.get(k.hash, set()) | {k.docno}
            hits = bm25_search(idx, k.query, limit=depth, collections=colls, **lex)
            negs = [h.docno for h in hits if h.docno not in own][:hard_negatives]
            if len(negs) < hard_negatives:
                no_neg += 1
                continue
            for i, d in enumerate(negs, 1):
                texts = chunks_of(d)
                row[f"negative_{i}"] = show(titles.get(d, ""), texts[best_chunk(k.query, texts)])
        row.update(docno=k.docno, hash=k.hash, seq=k.seq, negative_docnos=negs)
        pairs.append(row)
    if max_pairs is not None and len(pairs) > max_pairs:
        pairs = random.Random(seed).sample(pairs, max_pairs)
    counts = {
        "kept": len(kept),
        "duplicates": dup,
        "no_negatives": no_neg,
        "pairs": len(pairs),
        "chunks": len({(p["hash"], p["seq"]) for p in pairs}),
    }
    return pairs, counts


def labelled_pairs(
    chunks_by_doc: dict[str, list[str]],
    titles: dict[str, str],
    queries: dict[str, str],
    relevant: dict[str, list[str]],
    ranked: dict[str, list[str]],
    train_qids: Sequence[str],
    *,
    hard_negatives: int = 1,
    depth: int = 20,
    seed: int = 0,
    as_text: Callable[[str, str], str] | None = None,
) -> tuple[list[dict], dict]:
    """Training pairs from judged training queries: for each train query and each of its relevant
    documents, the document's best chunk (:func:`~qmdlab.training.doc2query.best_chunk`) is the
    positive, and ``hard_negatives`` documents drawn (seeded) from the query's top ``depth`` of
    ``ranked`` (the pipeline's own ranking of it) that are not judged relevant to it are the
    negatives, each as its best chunk. A drawn sample rather than the very top: the first
    unjudged hits are the likeliest unjudged relevant ones.

    >>> pairs, counts = labelled_pairs(
    ...     {"r": ["Obesity shortens life."], "n": ["Diet and sleep."], "m": ["Cats purr."]},
    ...     {"r": "Obesity", "n": "", "m": ""}, {"1": "obesity and life", "2": "held out"},
    ...     {"1": ["r"], "2": ["m"]}, {"1": ["r", "n"], "2": ["m", "r"]}, ["1"])
    >>> [(p["anchor"], p["positive"], p["negative_1"]) for p in pairs], counts["no_negatives"]
    ([('obesity and life', 'Obesity\\nObesity shortens life.', 'Diet and sleep.')], 0)
    """
    from qmdlab.training.doc2query import best_chunk

    if hard_negatives < 0:
        raise ConfigError(f"hard_negatives must be 0 or more, got {hard_negatives}")
    show = as_text or document_text
    rng = random.Random(seed)
    pairs: list[dict] = []
    no_neg = missing = 0
    for qid in sorted(train_qids):
        query = queries.get(qid)
        if not query:
            continue
        judged = set(relevant.get(qid, []))
        pool = [d for d in ranked.get(qid, [])[:depth] if d not in judged and chunks_by_doc.get(d)]
        for docno in sorted(judged):
            chunks = chunks_by_doc.get(docno)
            if not chunks:
                missing += 1
                continue
            row: dict[str, Any] = {
                "anchor": query,
                "positive": show(titles.get(docno, ""), chunks[best_chunk(query, chunks)]),
            }
            if len(pool) < hard_negatives:
                no_neg += 1
                continue
            negs = rng.sample(pool, hard_negatives) if hard_negatives else []
            for i, d in enumerate(negs, 1):
                texts = chunks_by_doc[d]
                row[f"negative_{i}"] = show(titles.get(d, ""), texts[best_chunk(query, texts)])
            row.update(qid=qid, docno=docno, negative_docnos=negs)
            pairs.append(row)
    counts = {
        "queries": len({p["qid"] for p in pairs}),
        "pairs": len(pairs),
        "missing": missing,
        "no_negatives": no_neg,
        "chunks": len({p["docno"] for p in pairs}),
    }
    return pairs, counts


# -- training -------------------------------------------------------------------------------------
def train_columns(pairs: Sequence[dict], hard_negatives: int, template: str = "plain") -> list[dict]:
    """The columns the loss reads, in order: ``anchor`` (the query as ``template`` writes it; the
    pairs keep it as typed, which the leak check compares), ``positive``, ``negative_1`` …

    >>> train_columns([{"anchor": "q", "positive": "p", "negative_1": "n", "docno": "d"}], 1, "gemma")
    [{'anchor': 'task: search result | query: q', 'positive': 'p', 'negative_1': 'n'}]
    """
    cols = ["anchor", "positive", *(f"negative_{i}" for i in range(1, hard_negatives + 1))]
    return [{c: query_text(p[c], template) if c == "anchor" else p[c] for c in cols} for p in pairs]


def fit(
    pairs: Sequence[dict],
    base_dir: Path,
    out: Path,
    *,
    hard_negatives: int,
    epochs: float = 1.0,
    max_steps: int = -1,
    learning_rate: float = 2e-5,
    batch_size: int = 8,
    warmup: float = 0.1,
    max_seq_length: int = 256,
    seed: int = 0,
    logging_steps: int = 5,
    save_steps: int = 100,
    progress: bool = True,
    template: str = "plain",
) -> dict:
    """MultipleNegativesRankingLoss fine-tuning of the sentence-transformers model in ``base_dir``
    (resumable from ``out/checkpoints``); the model is saved to ``out/model``. ``template`` writes the
    anchors (:func:`train_columns`); the pairs' documents are written already.

    Returns ``{"model_dir", "steps", "train_loss", "train_s", "resumed_from_step"}`` (``train_s``: this
    sitting's seconds).
    """
    try:
        from datasets import Dataset
        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
        from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
        from sentence_transformers.sentence_transformer.training_args import (
            BatchSamplers,
            SentenceTransformerTrainingArguments,
        )
    except ImportError as err:
        raise ModelError(
            f"training an embedder needs sentence-transformers ({err}); run `pip install 'qmdlab[train]'`"
        ) from None
    from transformers import set_seed

    if not pairs:
        raise QmdlabError("no training pairs: the index has no kept generated queries (run `qmdlab expand-docs`)")
    set_seed(seed)
    model = SentenceTransformer(str(base_dir), device="cpu", local_files_only=True)
    model.max_seq_length = max_seq_length
    dataset = Dataset.from_list(train_columns(pairs, hard_negatives, template))
    args = SentenceTransformerTrainingArguments(
        **hardware.sentence_transformers_args(
            out / "checkpoints",
            epochs=epochs,
            max_steps=max_steps,
            batch_size=batch_size,
            learning_rate=learning_rate,
            warmup=warmup,
            seed=seed,
            logging_steps=logging_steps,
            save_steps=save_steps,
            progress=progress,
            # the same chunk twice in a batch would be its own in-batch negative
            batch_sampler=BatchSamplers.NO_DUPLICATES,
        )
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        loss=MultipleNegativesRankingLoss(model),
        callbacks=[rundir.metrics_callback(out, "embedder")],
    )
    t0 = time.perf_counter()
    checkpoint = rundir.last_checkpoint(out / "checkpoints")
    res = trainer.train(resume_from_checkpoint=checkpoint)
    seconds = time.perf_counter() - t0
    resumed_from = int(Path(checkpoint).name.split("-")[-1]) if checkpoint is not None else 0
    # the trainer's training_loss averages this sitting's steps only (0 when a run resumed at its last
    # checkpoint): a resumed run reports the mean of every loss logged since step 1 instead
    logged = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    loss = float(res.training_loss) if checkpoint is None or not logged else sum(logged) / len(logged)
    model_dir = out / "model"
    model.save_pretrained(str(model_dir))
    # the tokenizer is not trained; transformers saves only its fast form, and llama.cpp's converter
    # reads a sentencepiece vocabulary (EmbeddingGemma's tokenizer.model) from the original files
    for name in TOKENIZER_FILES:
        if (base_dir / name).is_file() and not (model_dir / name).exists():
            shutil.copy2(base_dir / name, model_dir / name)
    return {
        "model_dir": str(model_dir),
        "steps": int(res.global_step),
        "train_loss": loss,
        "train_s": round(seconds, 1),
        "resumed_from_step": resumed_from,
    }


def to_gguf(model_dir: Path, out: Path, convert_args: Sequence[str] | None = None) -> Path:
    """The model as a GGUF (llama.cpp's converter; ``convert_args`` default to those of the model's
    profile, :func:`encoder_profile`: f16, as ``qmdlab pull`` makes the packaged base)."""
    from qmdlab.models.packaged import convert_hf

    args = tuple(convert_args) if convert_args is not None else encoder_profile(model_dir).convert_args
    convert_hf(model_dir, out, args)
    return out


def gguf_embedder(path: Path, profile: EncoderProfile | None = None):
    """The pipeline's embedder for the fine-tuned GGUF, with the registry options of its packaged base
    (``profile``, MiniLM's by default: ``plain`` template, 384-d, 256-token context; EmbeddingGemma's:
    ``gemma``, 768-d, 2,048): the comparison changes the weights only."""
    from qmdlab.models.gguf_file import local_model_id
    from qmdlab.models.llama_embed import LlamaEmbedder
    from qmdlab.models.registry import KNOWN, MINILM, default_chunking

    opts = KNOWN[profile.packaged if profile is not None else MINILM]
    ref = str(Path(path).resolve())
    return LlamaEmbedder(
        lambda: Path(ref),
        local_model_id(ref),  # the converter's stamp: weights trained again here are another model
        template=opts["template"],
        dim=opts["dim"],
        n_ctx=opts["n_ctx"],
        chunking=default_chunking(),
    )


# -- evaluation -----------------------------------------------------------------------------------
def evaluate_heldout(suite, split: QuerySplit, embedders: dict[str, Any], *, progress: bool = True, log=print) -> dict:
    """Record the held-out queries with each embedder (expansion and rerank off) and compare them
    vector-only and hybrid against the first one.

    Returns ``{"table": rows of run, mean, delta, p_ttest, p_fisher, wins, ties, losses, "per_query":
    {run: {qid: nDCG@10}}, "queries": n}``; runs are ``vector <name>`` and ``hybrid <name>``.
    """
    import polars as pl

    from qmdlab.eval.ablation import ORIGINAL
    from qmdlab.eval.record import record, suite_config
    from qmdlab.eval.significance import compare_to_baseline
    from qmdlab.eval.study import Study
    from qmdlab.models.base import ModelSet

    cfg = suite_config(suite).replace(expand=False, rerank=False)
    vec: dict[str, pl.DataFrame] = {}
    hyb: dict[str, pl.DataFrame] = {}
    for name, emb in embedders.items():
        rec = record(
            suite,
            ModelSet(emb, None, None),
            cfg,
            qids=list(split.heldout),
            name=f"embedder-{name}",
            progress=progress,
            log=log,
        )
        study = Study.from_recording(rec, metrics=[METRIC])
        vec[f"vector {name}"] = study.evaluate(study.config, lists=(pl.col("source") == "vec") & ORIGINAL).per_query
        hyb[f"hybrid {name}"] = study.evaluate(study.config, lists=ORIGINAL).per_query
    table = pl.concat([compare_to_baseline(vec, next(iter(vec))), compare_to_baseline(hyb, next(iter(hyb)))])
    per_query = {
        run: dict(zip(t["qid"].cast(pl.Utf8).to_list(), t[METRIC].to_list())) for run, t in {**vec, **hyb}.items()
    }
    return {"table": table.to_dicts(), "per_query": per_query, "queries": len(split.heldout)}


def format_embedder_table(rows: Sequence[dict]) -> str:
    """The held-out table as aligned text."""
    lines = [f"{'run':<24} {'nDCG@10':>8} {'delta':>8} {'p(t)':>8} {'p(Fisher)':>9} {'W/T/L':>10}"]
    for r in rows:
        lines.append(
            f"{r['run']:<24} {r['mean']:>8.4f} {r['delta']:>+8.4f} {r['p_ttest']:>8.4f} "
            f"{r['p_fisher']:>9.4f} {r['wins']:>4}/{r['ties']}/{r['losses']}"
        )
    return "\n".join(lines)


# -- the run --------------------------------------------------------------------------------------
def official_query_split(suite) -> QuerySplit:
    """The suite's official split as a :class:`~qmdlab.training.splits.QuerySplit` (train → held-out test).

    Raises
    ------
    ConfigError
        The suite has no official split.
    """
    from qmdlab.training.splits import suite_split

    official = suite.split
    if official is None:
        raise ConfigError(
            f"--labelled: suite {suite.name!r} has no official train/test split (SciFact has one, as does any BEIR "
            "folder with qrels/train.tsv and qrels/test.tsv); train on generated queries with --synthetic instead"
        )
    return suite_split(suite, [*official.train, *official.test])


def _labelled(cfg: EmbedderRunConfig, suite, split: QuerySplit, queries: dict[str, str], profile: EncoderProfile, log):
    """The index, pairs and counts of a ``--labelled`` run: the training queries ranked by the
    baseline hybrid (expansion and rerank off; recorded, so cached), their judged documents and
    hard negatives drawn from that ranking (:func:`labelled_pairs`)."""
    import polars as pl

    from qmdlab.eval.record import record, suite_config
    from qmdlab.eval.study import Study
    from qmdlab.models import load_models

    models = load_models(cfg.preset, expand="none", rerank="none")
    base_cfg = suite_config(suite).replace(expand=False, rerank=False)
    rec = record(
        suite, models, base_cfg, qids=list(split.train), name="embedder-mining", progress=cfg.progress, log=log
    )
    final = Study.from_recording(rec, metrics=[METRIC]).evaluate(rec.config).final.sort("qid", "final_rank")
    ranked = {q: g["docno"].to_list() for (q,), g in final.group_by("qid", maintain_order=True)}
    index = rec.lab.index
    chunks = index.chunks(None).sort("docno", "seq")
    chunks_by_doc = {d: g["text"].to_list() for (d,), g in chunks.group_by("docno", maintain_order=True)}
    docs = index.documents([suite.collection])
    titles = dict(zip(docs["docno"].to_list(), docs["title"].fill_null("").to_list()))
    qrels = suite.qrels_docnos().filter(pl.col("grade") > 0)
    relevant = {q: g["docno"].to_list() for (q,), g in qrels.group_by("qid", maintain_order=True)}
    pairs, counts = labelled_pairs(
        chunks_by_doc,
        titles,
        queries,
        relevant,
        ranked,
        split.train,
        hard_negatives=cfg.hard_negatives,
        depth=cfg.negative_depth,
        seed=cfg.seed,
        as_text=lambda title, text: document_text(title, text, profile.template),
    )
    if not pairs:
        raise QmdlabError(f"suite {suite.name!r}: no training pairs from its {len(split.train)} training queries")
    return index, pairs, counts


@rundir.resumable("out")
def run_embedder(cfg: EmbedderRunConfig, log: Callable[[str], None] = print) -> dict:
    """Pairs → leak guard → training → GGUF → held-out evaluation; resumable (see module notes)."""
    import polars as pl

    from qmdlab.eval.record import prepare_index
    from qmdlab.eval.suites import get_suite

    out = Path(cfg.out)
    t0 = time.perf_counter()
    suite = get_suite(cfg.suite, cfg.format)
    judged = suite.data().judged_queries()
    queries = dict(zip(judged["qid"].cast(pl.Utf8).to_list(), judged["query"].to_list()))
    split = official_query_split(suite) if cfg.labelled else synthetic_split(cfg.synthetic, suite, list(queries))
    base_dir = resolve_encoder_base(cfg.base)
    profile = encoder_profile(base_dir).at(cfg.outtype)
    hardware.set_threads(cfg.n_threads)
    rundir.save_config(cfg, out)
    if cfg.labelled:
        index, pairs, counts = _labelled(cfg, suite, split, queries, profile, log)
        log(
            f"embedder pairs: {counts['pairs']} (query, judged document) pairs from {counts['queries']} training "
            f"queries ({counts['no_negatives']} without {cfg.hard_negatives} hard negatives); "
            f"{len(split.heldout)} test queries kept out"
        )
    else:
        index = prepare_index(suite, None, progress=False, log=log)
        generator = cfg.generator
        if generator is None and untrained_generator(cfg.synthetic):
            generator = _stored_generator(index, str(cfg.synthetic))
        pairs, counts = build_pairs(
            index,
            generator=generator,
            hard_negatives=cfg.hard_negatives,
            depth=cfg.negative_depth,
            max_pairs=cfg.max_pairs,
            seed=cfg.seed,
            collections=[suite.collection],
            as_text=lambda title, text: document_text(title, text, profile.template),
        )
        if not pairs:
            raise QmdlabError(
                f"index {index.dir}: no kept generated queries"
                f"{' of generator ' + cfg.generator if cfg.generator else ''}; run "
                f"`qmdlab --index {index.dir} expand-docs --generator "
                f"{cfg.synthetic if untrained_generator(cfg.synthetic) else str(cfg.synthetic) + '/model.gguf'}` first"
            )
        log(
            f"embedder pairs: {counts['pairs']} (query, chunk) pairs over {counts['chunks']} chunks from "
            f"{counts['kept']} kept queries ({counts['duplicates']} duplicates, {counts['no_negatives']} without "
            f"{cfg.hard_negatives} hard negatives); {len(split.heldout)} held-out queries kept out"
        )
    check_no_heldout(pairs, split.heldout, queries, where="embedder pairs", text="anchor", suite=split.suite)
    with (out / "pairs.jsonl").open("w", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    trained = fit(
        pairs,
        base_dir,
        out,
        hard_negatives=cfg.hard_negatives,
        epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        batch_size=cfg.batch_size,
        warmup=cfg.warmup,
        max_seq_length=cfg.max_seq_length,
        seed=cfg.seed,
        logging_steps=cfg.logging_steps,
        save_steps=cfg.save_steps,
        progress=cfg.progress,
        template=profile.template,
    )
    log(f"embedder: {trained['steps']} steps, loss {trained['train_loss']:.4f}, {trained['train_s']} s")
    gguf = to_gguf(Path(trained["model_dir"]), out / "model.gguf", profile.convert_args) if cfg.gguf else None
    result: dict = {
        "base": cfg.base,
        "family": profile.name,
        "suite": suite.name,
        "index": str(index.dir),
        "split": {
            "train": len(split.train),
            "heldout": len(split.heldout),
            "seed": split.seed,
            "official": bool(cfg.labelled),
        },
        **counts,
        **trained,
        "gguf": str(gguf) if gguf else None,
        "model": str(gguf.resolve()) if gguf else None,
    }
    if cfg.evaluate and gguf is not None:
        from qmdlab.models import load_models

        t1 = time.perf_counter()
        baseline = load_models(cfg.preset, embed=profile.packaged, expand="none", rerank="none").embedder
        held = evaluate_heldout(
            suite,
            split,
            {profile.name.lower(): baseline, "tuned": gguf_embedder(gguf, profile)},
            progress=cfg.progress,
            log=log,
        )
        result["heldout"] = held["table"]
        result["per_query"] = held["per_query"]
        result["eval_s"] = round(time.perf_counter() - t1, 1)
        log(format_embedder_table(held["table"]))
    result["seconds"] = round(time.perf_counter() - t0, 1)
    (out / "report.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    rundir.append_metrics(
        out, {"stage": "embedder", "final": True, **{k: v for k, v in result.items() if k != "per_query"}}
    )
    _model_card(cfg, result, out)
    rundir.mark_done(out, {k: v for k, v in result.items() if k != "per_query"})
    return result


def _stored_generator(index, reference: str) -> str | None:
    """The fingerprint under which ``index`` stores the queries of the generator ``reference``
    (``REF#hash``): the active generator's when it is that model, else the newest stored one of it;
    None (the active one) when none is stored."""
    from qmdlab.store import doc_expansions as store

    active = store.active_generator(index)
    if active is not None and active.split("#", 1)[0] == reference:
        return active
    found = [g for g in store.generators(index) if g.split("#", 1)[0] == reference]
    return found[-1] if found else None


def _model_card(cfg: EmbedderRunConfig, result: dict, out: Path) -> None:
    table = f"```\n{format_embedder_table(result['heldout'])}\n```\n" if result.get("heldout") else "(not evaluated)\n"
    split = result["split"]
    family = result["family"]
    profile = encoder_profile(result["model_dir"]).at(cfg.outtype)
    if cfg.labelled:
        title = f"qmdlab {family} embedder fine-tuned on {result['suite']}'s training queries"
        data = (
            f"{result['pairs']} (training query, judged document) pairs from {result['queries']} of the "
            f"{split['train']} queries on the train side of the suite's official split, each with "
            f"{cfg.hard_negatives} hard negative(s) drawn from the top {cfg.negative_depth} of the baseline hybrid's "
            f"ranking that are not judged relevant. No test query was read for training"
        )
        held = f"the {split['heldout']} test queries of the official split"
    else:
        title = f"qmdlab {family} embedder fine-tuned on synthetic queries — {result['suite']}"
        untrained = untrained_generator(cfg.synthetic)
        source = (
            f"the untrained generator `{cfg.synthetic}`"
            if untrained
            else f"the doc2query generator of `{cfg.synthetic}`"
        )
        seen = (
            "the generator, untrained, read none"
            if untrained
            else f"the generator saw only the {split['train']} train-split queries"
        )
        data = (
            f"{result['pairs']} (generated query, source chunk) pairs over {result['chunks']} chunks — the "
            f"round-trip-filtered queries of {source} — each with "
            f"{cfg.hard_negatives} BM25-mined hard negative(s) from other documents. No labelled query was read "
            f"for training; {seen}"
        )
        held = f"{split['heldout']} held-out queries" + ("" if untrained else " of the split")
    rundir.write_model_card(
        out,
        title,
        f"""
Base: `{cfg.base}`. Training data: {data}.
MultipleNegativesRankingLoss, lr {cfg.learning_rate}, batch {cfg.batch_size}, {result["steps"]} steps, seed
{cfg.seed}; final training loss {result["train_loss"]:.4f}.

Held-out evaluation ({held}; expansion and rerank off; nDCG@10, paired against the packaged {family},
`{profile.packaged}`):

{table}
Use it: `QMDLAB_EMBED_MODEL={result.get("model") or "<out>/model.gguf"}` (named by its path, it is fed the
`{profile.template}` template, as in the evaluation, and the digest stamped beside it names its vectors
in the index).
Sentence-transformers model: `{result["model_dir"]}`.
""",
    )


def main(argv: list[str] | None = None) -> dict:
    """``python -m qmdlab.training.embedder [--config FILE] [--field value ...]``."""
    from qmdlab.training.config import parse_args

    res = run_embedder(parse_args(EmbedderRunConfig, argv))
    print(json.dumps({k: res.get(k) for k in ("suite", "pairs", "steps", "model", "heldout", "seconds")}, indent=1))
    return res


if __name__ == "__main__":
    main(sys.argv[1:])
