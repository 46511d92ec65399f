"""Domain data synthesis: queries and expansions for a user's own collection, from a teacher.

``qmdlab train synth --collection notes --teacher pkg:qwen2.5-coder-0.5b-instruct-q4_k_m``

1. sample ``n`` chunks of the collection (seeded);
2. ask the teacher for queries a person would type to find each passage;
3. ask the teacher to expand each query in the ``hyde:``/``lex:``/``vec:`` format (few-shot
   from the seed data, the passage as context);
4. keep an example only when the expansion passes the reward's hard gate and scores at least
   ``min_score`` with :func:`qmdlab.training.reward.score_expansion` (the same rubric GRPO uses);
5. write the schema of :mod:`qmdlab.training.data` (``category: "synth"``, ``source: docno``).

A *teacher* is any callable ``teacher(prompt: str) -> str``; :func:`llama_teacher` makes one
from a GGUF model reference (``pkg:…``, ``hf:…`` or a path) through llama-cpp-python, and an
HF directory works through :func:`hf_teacher`.
"""

from __future__ import annotations

import json
import random
import re
import sys
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path

from qmdlab.errors import ConfigError
from qmdlab.training import hardware, rundir
from qmdlab.training.data import Example, check_record, load_examples, normalise_query, write_examples
from qmdlab.training.reward import parse_completion, score_expansion

Teacher = Callable[[str], str]

QUERY_PROMPT = (
    "Here is a passage from someone's notes.\n\n---\n{passage}\n---\n\n"
    "Write {k} different short search queries (2 to 8 words) that this person might type to find "
    "this passage later. One query per line, no numbering, nothing else."
)
EXPAND_PROMPT = (
    "Expand search queries for a hybrid search engine. For each query write exactly one `hyde:` line "
    "(a 50-200 character passage that answers it), then 1-3 `lex:` lines (keywords that keep the "
    "query's names and terms), then 1-3 `vec:` lines (natural-language rephrasings). Nothing else.\n\n"
    "{examples}\nContext the query is about:\n{passage}\n\nQuery: {query}\n"
)


@dataclass
class SynthConfig:
    """Configuration of one synthesis run (YAML keys = field names)."""

    collection: str = field(default="", metadata={"help": "Collection of the index to sample from."})
    index: str | None = field(default=None, metadata={"help": "Index name or dir (default: $QMDLAB_INDEX)."})
    teacher: str = field(
        default="pkg:qwen2.5-coder-0.5b-instruct-q4_k_m",
        metadata={"help": "Teacher: GGUF ref (pkg:/hf:/path) or HF model directory."},
    )
    n_passages: int = 20
    queries_per_passage: int = 2
    min_score: float = 0.6
    few_shot: int = 2
    seed_file: str = "data/training/seed.jsonl"
    output: str = "runs/synth/synth.jsonl"
    seed: int = 0
    max_tokens: int = 256
    max_passage_chars: int = field(default=1200, metadata={"help": "Characters of a passage the teacher reads."})
    n_threads: int = 2


def sample_passages(index, collection: str, n: int, seed: int = 0, min_chars: int = 80) -> list[dict]:
    """``n`` random chunks (docno, text) of ``collection`` with at least ``min_chars`` characters."""
    docs = index.documents([collection])
    if docs.height == 0:
        raise ConfigError(f"collection {collection!r} has no documents (run `qmdlab update`)")
    chunks = index.chunks(docs["docno"].to_list())
    rows = [r for r in chunks.select("docno", "text").iter_rows(named=True) if len(r["text"].strip()) >= min_chars]
    random.Random(seed).shuffle(rows)
    return rows[:n]


def parse_queries(text: str, k: int) -> list[str]:
    """Queries from the teacher's answer: one per line, numbering/bullets/quotes stripped.

    >>> parse_queries("1. git rebase main\\n- \\"undo last commit\\"\\n\\nSure!", 3)
    ['git rebase main', 'undo last commit']
    """
    out = []
    for line in text.splitlines():
        q = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip().strip("\"'`").strip()
        if q and 1 <= len(q.split()) <= 12 and not q.endswith((":", "!")) and len(q) <= 120:
            out.append(q)
    return out[:k]


def clean_expansion(text: str) -> str:
    """Keep the teacher's typed lines only up to the first line that is not one (a teacher
    often goes on with another 'Query: …'); the result still has to pass the gate.

    >>> clean_expansion("hyde: A.\\nlex: b\\n\\nQuery: next\\nlex: c")
    'hyde: A.\\nlex: b'
    """
    kept: list[str] = []
    for line in text.strip().splitlines():
        if not line.strip():
            if kept:
                break
            continue
        if not re.match(r"^(lex|vec|hyde):", line.strip()):
            break
        kept.append(line.strip())
    return "\n".join(kept)


def few_shot_block(examples: list[Example]) -> str:
    return "".join(f"Query: {e.query}\n{e.completion}\n\n" for e in examples)


def synthesize(
    teacher: Teacher,
    passages: list[dict],
    *,
    queries_per_passage: int = 2,
    min_score: float = 0.6,
    shots: Sequence[Example] = (),
    existing: AbstractSet[str] = frozenset(),
    max_passage_chars: int = 1200,
) -> tuple[list[Example], dict]:
    """Run the teacher over ``passages``; return kept examples and counts of what was dropped
    (plus ``seconds`` and ``examples_per_hour``)."""
    import time

    t0 = time.perf_counter()
    kept: list[Example] = []
    seen = set(existing)
    stats: dict[str, float] = {
        "passages": len(passages),
        "queries": 0,
        "duplicates": 0,
        "gate": 0,
        "low_score": 0,
        "kept": 0,
    }
    examples = few_shot_block(list(shots))
    for p in passages:
        passage = p["text"].strip()[:max_passage_chars]
        for q in parse_queries(
            teacher(QUERY_PROMPT.format(passage=passage, k=queries_per_passage)), queries_per_passage
        ):
            stats["queries"] += 1
            key = normalise_query(q)
            if key in seen:
                stats["duplicates"] += 1
                continue
            raw = clean_expansion(teacher(EXPAND_PROMPT.format(examples=examples, passage=passage, query=q)))
            parsed = parse_completion(raw)
            if parsed.gate:
                stats["gate"] += 1
                continue
            if score_expansion(q, raw).total < min_score:
                stats["low_score"] += 1
                continue
            record = {"query": q, "output": [list(x) for x in parsed.lines], "category": "synth"}
            if check_record(record):
                stats["gate"] += 1
                continue
            seen.add(key)
            kept.append(Example(q, tuple(parsed.lines), category="synth", extra={"source": p["docno"]}))
            stats["kept"] += 1
    stats["seconds"] = round(time.perf_counter() - t0, 1)
    stats["examples_per_hour"] = round(3600 * stats["kept"] / max(stats["seconds"], 1e-9), 1)
    return kept, stats


def llama_teacher(ref: str, *, max_tokens: int = 256, n_threads: int = 2, seed: int = 0) -> Teacher:
    """A teacher over a GGUF reference; the prompt goes in as one user turn of the model's own
    chat template (llama.cpp's chat handler), sampled at temperature 0.3."""
    from qmdlab.models._llama import LazyLlama
    from qmdlab.models.registry import resolve_path

    lazy = LazyLlama(lambda: resolve_path(ref), n_threads=n_threads, idle_timeout=None, n_ctx=4096)

    def teach(prompt: str) -> str:
        with lazy.use() as llm:
            out = llm.create_chat_completion(
                messages=[{"role": "user", "content": prompt}],
                max_tokens=max_tokens,
                temperature=0.3,
                top_p=0.9,
                seed=seed,
            )
        return out["choices"][0]["message"]["content"] or ""

    return teach


def hf_teacher(model_dir: str, *, max_tokens: int = 256) -> Teacher:
    """A teacher over a local HF causal-LM directory (greedy decoding with its chat template)."""
    from transformers import AutoModelForCausalLM

    tok = hardware.load_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)

    def teach(prompt: str) -> str:
        ids = tok.apply_chat_template(
            [{"role": "user", "content": prompt}],
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
            enable_thinking=False,
        )
        out = model.generate(**ids, max_new_tokens=max_tokens, do_sample=False)
        return tok.decode(out[0][ids["input_ids"].shape[1] :], skip_special_tokens=True)

    return teach


def run_synth(cfg: SynthConfig, *, teacher: Teacher | None = None, index=None) -> dict:
    """Sample, generate, filter, write ``cfg.output`` (appending to an existing file, skipping
    queries it already holds, so a re-run continues)."""
    if not cfg.collection:
        raise ConfigError("synth needs --collection (a collection of the index to sample from)")
    if index is None:
        from qmdlab.store import Index

        index = Index.open(cfg.index)
    if teacher is None:
        teacher = (
            hf_teacher(cfg.teacher, max_tokens=cfg.max_tokens)
            if Path(cfg.teacher).is_dir()
            else llama_teacher(cfg.teacher, max_tokens=cfg.max_tokens, n_threads=cfg.n_threads, seed=cfg.seed)
        )
    out = Path(cfg.output)
    existing = load_examples(out) if out.exists() else []
    shots = []
    if cfg.few_shot and Path(cfg.seed_file).exists():
        seeds = load_examples(cfg.seed_file)
        shots = random.Random(cfg.seed).sample(seeds, min(cfg.few_shot, len(seeds)))
    passages = sample_passages(index, cfg.collection, cfg.n_passages, cfg.seed)
    kept, stats = synthesize(
        teacher,
        passages,
        queries_per_passage=cfg.queries_per_passage,
        min_score=cfg.min_score,
        shots=shots,
        existing={normalise_query(e.query) for e in existing},
        max_passage_chars=cfg.max_passage_chars,
    )
    rows = existing + kept
    out.parent.mkdir(parents=True, exist_ok=True)
    write_examples(rows, out)
    # keep the passage provenance next to the data (the schema file stays clean)
    with out.with_suffix(".sources.jsonl").open("a", encoding="utf-8") as fh:
        for e in kept:
            fh.write(json.dumps({"query": e.query, "source": e.extra.get("source")}, ensure_ascii=False) + "\n")
    stats["total_in_file"] = len(rows)
    rundir.save_config(cfg, out.parent)
    rundir.append_metrics(out.parent, {"stage": "synth", **stats})
    return stats


def main(argv: list[str] | None = None) -> dict:
    """``python -m qmdlab.training.synth [--config synth.yaml] --collection NAME [...]``."""
    from qmdlab.training.config import parse_args

    return run_synth(parse_args(SynthConfig, argv))


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=1))
