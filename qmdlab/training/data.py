"""Training examples for the query expander: schema, validation, dedupe, split, TRL records.

One example per JSONL line::

    {"query": "git rebase onto main", "output": [["hyde", "..."], ["lex", "..."], ["vec", "..."]],
     "intent": "optional", "category": "optional"}

``output`` holds ``[type, text]`` pairs with type ``lex``, ``vec`` or ``hyde``. Validation
stops at the first bad line with ``file:line: problem (fix)`` (:class:`DataFormatError`).
Dedupe is by :func:`normalise_query`; the split is seeded and stable.

:func:`to_sft_records` gives TRL *conversational prompt/completion* records, so SFT's loss
covers completion tokens only (TRL's ``completion_only_loss``), and each record carries
``chat_template_kwargs={"enable_thinking": False}`` so the prompt renders exactly as at
inference (:mod:`qmdlab.training.render`).
"""

from __future__ import annotations

import io
import json
import random
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from qmdlab.errors import DataFormatError
from qmdlab.training.render import CHAT_TEMPLATE_KWARGS, format_completion, prompt_messages

TYPES = ("lex", "vec", "hyde")
REPO = Path(__file__).resolve().parents[2]
SEED_PATH = REPO / "data" / "training" / "seed.jsonl"


@dataclass(frozen=True)
class Example:
    """One (query → typed expansion) example."""

    query: str
    output: tuple[tuple[str, str], ...]
    intent: str | None = None
    category: str | None = None
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def completion(self) -> str:
        """The completion text the expander is trained to write."""
        return format_completion(self.output)

    def to_json(self) -> dict:
        d = {"query": self.query, "output": [list(p) for p in self.output]}
        if self.intent:
            d["intent"] = self.intent
        if self.category:
            d["category"] = self.category
        return d


def normalise_query(query: str) -> str:
    """Key for dedupe: NFKC, case-folded, punctuation dropped, whitespace collapsed.

    >>> normalise_query("  Git   Rebase?! ")
    'git rebase'
    >>> normalise_query("git rebase") == normalise_query("GIT-rebase")
    False
    """
    text = unicodedata.normalize("NFKC", query).casefold()
    text = re.sub(r"[^\w\s\-+#./]", " ", text)
    return " ".join(text.split())


def check_record(obj) -> str | None:
    """The first problem with a decoded JSON record, or None when it is valid.

    >>> check_record({"query": "q", "output": [["lex", "q terms"]]}) is None
    True
    >>> check_record({"query": "q", "output": [["sparse", "x"]]})
    "output[0]: type 'sparse' is not one of lex, vec, hyde"
    >>> check_record({"query": "", "output": []})
    '"query" must be a non-empty string'
    """
    if not isinstance(obj, dict):
        return "expected a JSON object"
    q = obj.get("query")
    if not isinstance(q, str) or not q.strip():
        return '"query" must be a non-empty string'
    out = obj.get("output")
    if not isinstance(out, list) or not out:
        return '"output" must be a non-empty list of [type, text] pairs'
    for i, pair in enumerate(out):
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            return f"output[{i}]: expected a [type, text] pair of strings"
        t, text = pair
        if t not in TYPES:
            return f"output[{i}]: type {t!r} is not one of lex, vec, hyde"
        if not text.strip() or "\n" in text:
            return f"output[{i}]: text must be one non-empty line"
    for key in ("intent", "category"):
        if key in obj and obj[key] is not None and not isinstance(obj[key], str):
            return f'"{key}" must be a string'
    return None


def example_from_record(obj: dict) -> Example:
    extra = {k: v for k, v in obj.items() if k not in ("query", "output", "intent", "category")}
    return Example(
        query=obj["query"].strip(),
        output=tuple((t, x.strip()) for t, x in obj["output"]),
        intent=obj.get("intent") or None,
        category=obj.get("category") or None,
        extra=extra,
    )


def load_examples(path: str | Path) -> list[Example]:
    """Read and validate a JSONL file of examples (blank lines are skipped).

    Raises
    ------
    DataFormatError
        Naming the file and 1-based line of the first invalid record.
    """
    path = Path(path)
    if not path.exists():
        raise DataFormatError(path, None, "file not found", "pass an existing JSONL file")
    examples = []
    try:
        raw = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        bad_line = path.read_bytes()[: err.start].count(b"\n") + 1
        raise DataFormatError(
            path, bad_line, f"not UTF-8 text ({err.reason} at byte {err.start})", "re-encode the file as UTF-8"
        ) from None
    for lineno, line in enumerate(io.StringIO(raw, newline=None), start=1):  # universal newlines, as open()
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataFormatError(path, lineno, f"invalid JSON ({err.msg})", "one JSON object per line") from None
        problem = check_record(obj)
        if problem:
            raise DataFormatError(
                path, lineno, problem, 'schema: {"query": str, "output": [["lex"|"vec"|"hyde", str], ...]}'
            )
        examples.append(example_from_record(obj))
    return examples


def write_examples(examples, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for ex in examples:
            fh.write(json.dumps(ex.to_json(), ensure_ascii=False) + "\n")
    return path


def dedupe(examples: list[Example]) -> list[Example]:
    """Keep the first example of each normalised query.

    >>> a = Example("Git rebase", (("lex", "git rebase"),))
    >>> b = Example("git  REBASE", (("lex", "rebase"),))
    >>> [e.query for e in dedupe([a, b])]
    ['Git rebase']
    """
    seen, out = set(), []
    for ex in examples:
        key = normalise_query(ex.query)
        if key not in seen:
            seen.add(key)
            out.append(ex)
    return out


def split(
    examples: list[Example], *, eval_fraction: float = 0.1, seed: int = 0, min_eval: int = 1
) -> tuple[list[Example], list[Example]]:
    """Seeded shuffle, then the last ``eval_fraction`` (at least ``min_eval``) for evaluation.

    >>> exs = [Example(f"q{i}", (("lex", f"q{i}"),)) for i in range(20)]
    >>> tr, ev = split(exs, eval_fraction=0.1, seed=1)
    >>> len(tr), len(ev), sorted(e.query for e in tr + ev) == sorted(e.query for e in exs)
    (18, 2, True)
    >>> split(exs, seed=1) == split(exs, seed=1)
    True
    """
    if not examples:
        return [], []
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    n_eval = max(min_eval, round(len(examples) * eval_fraction)) if eval_fraction > 0 else 0
    n_eval = min(n_eval, len(examples) - 1)
    shuffled = [examples[i] for i in order]
    return shuffled[: len(shuffled) - n_eval], shuffled[len(shuffled) - n_eval :]


def to_sft_record(ex: Example, *, generic: bool = False) -> dict:
    """A TRL conversational prompt/completion record. With ``generic`` (an untrained instruct model's
    own answers, :mod:`qmdlab.training.best_of_n`), the prompt carries the system turn the engine gives
    such a model and the completion keeps the lines in the order the model wrote them.

    >>> r = to_sft_record(Example("git rebase", (("lex", "git rebase main"), ("hyde", "Rebasing replays commits."))))
    >>> r["prompt"]
    [{'role': 'user', 'content': '/no_think Expand this search query: git rebase'}]
    >>> r["completion"][0]["content"]
    'hyde: Rebasing replays commits.\\nlex: git rebase main'
    >>> r["chat_template_kwargs"]
    {'enable_thinking': False}
    >>> g = to_sft_record(Example("x", (("lex", "a b"), ("hyde", "A b."))), generic=True)
    >>> [m["role"] for m in g["prompt"]], g["completion"][0]["content"]
    (['system', 'user'], 'lex: a b\\nhyde: A b.')
    """
    return {
        "prompt": prompt_messages(ex.query, ex.intent, generic=generic),
        "completion": [{"role": "assistant", "content": format_completion(ex.output, ordered=not generic)}],
        "chat_template_kwargs": dict(CHAT_TEMPLATE_KWARGS),
        "query": ex.query,
    }


def to_grpo_record(query: str, intent: str | None = None, qid: str | None = None, *, generic: bool = False) -> dict:
    """A TRL conversational prompt-only record; ``query``/``qid`` reach the reward functions
    (``generic``: :func:`~qmdlab.training.render.prompt_messages`'s system turn first)."""
    return {"prompt": prompt_messages(query, intent, generic=generic), "query": query, "qid": qid or ""}


def prepare(path: str | Path, out_dir: str | Path, *, eval_fraction: float = 0.1, seed: int = 0) -> dict:
    """Validate, dedupe and split ``path``; write ``train.jsonl``, ``eval.jsonl`` (schema
    records) and ``sft_train.jsonl``/``sft_eval.jsonl`` (TRL records) to ``out_dir``.

    Returns
    -------
    dict
        Counts: ``n_read``, ``n_duplicates``, ``n_train``, ``n_eval``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    examples = load_examples(path)
    unique = dedupe(examples)
    train, ev = split(unique, eval_fraction=eval_fraction, seed=seed)
    write_examples(train, out / "train.jsonl")
    write_examples(ev, out / "eval.jsonl")
    for name, part in (("sft_train.jsonl", train), ("sft_eval.jsonl", ev)):
        with (out / name).open("w", encoding="utf-8") as fh:
            for ex in part:
                fh.write(json.dumps(to_sft_record(ex), ensure_ascii=False) + "\n")
    return {
        "source": str(path),
        "n_read": len(examples),
        "n_duplicates": len(examples) - len(unique),
        "n_train": len(train),
        "n_eval": len(ev),
        "seed": seed,
    }
