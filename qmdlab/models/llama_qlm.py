"""Query-likelihood reranker on llama.cpp: how likely the model finds the query after the passage.

The score of a ``(query, text)`` pair is the mean log-probability of the query's tokens after a
prompt that holds the text (UPR, Sachan et al. 2022; Zhuang et al. 2023)::

    Passage: {text}
    Please write a question based on this passage.
    Question: {query}

read from the model's logits at the query positions of one forward pass: nothing is generated.
Any causal GGUF works (a chat model, a base model, a trained doc → query generator); the model's
own tokenizer splits the query, and the text is cut to ``max_doc_tokens`` tokens.

**From log-likelihood to [0, 1].** The rerank stage takes scores in [0, 1] and the LLM cache stores
one score per ``(query, text)`` pair, so a pair's score must not depend on the other candidates
(a per-query softmax or min-max would change when the cache answers some pairs and the model the
rest). The default mapping ``pmi`` is per pair and centred: the query's mean log-probability with
the text minus its mean log-probability with an empty passage (the same prompt, ``Passage:`` left
empty; one short extra pass per call), through a logistic of temperature ``temperature`` nats per
token::

    score = 1 / (1 + exp(-(mean_logp(q | text) - mean_logp(q | empty)) / temperature))

0.5 means "the text makes the query no more likely than no text"; the order within a query is
exactly the order of ``mean_logp(q | text)`` (the subtracted term is the same for every text), while
the centring removes the query's own difficulty (rare words, length), so scores of different
queries sit on one scale and spread over the range the position blend mixes with ``1 / rank``.
``exp`` gives ``exp(mean_logp(q | text))`` instead (the geometric-mean token probability; in [0, 1]
by construction, but squeezed near 0 and query-dependent).

**KV reuse.** The query comes after the passage, so the only prefix shared by every pair of a call
is the prompt's head (BOS and ``Passage:``, or the chat header): it is evaluated once per call and
its KV cache kept; the text, the instruction and the query are decoded per pair. Logits are
computed only at the query positions (not for every passage token), which on a CPU saves the
output-layer cost of the passage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple, Optional

import numpy as np

from qmdlab import cancel
from qmdlab.errors import ModelError
from qmdlab.models._llama import DEFAULT_IDLE_TIMEOUT, LazyLlama, scoring_pass
from qmdlab.models.base import make_fingerprint


class QLMPrompt(NamedTuple):
    """The query-likelihood prompt: ``head + text_prefix + text + middle + query_prefix + query``.

    ``head`` is evaluated once per call (the reusable prefix). The prefixes are glued to the text
    and to the query before tokenising (a leading space), so each part's first word is the token it
    would be inside the whole prompt, not a lone space token at the boundary.
    """

    head: str
    text_prefix: str
    middle: str
    query_prefix: str


#: Prompt templates by name (part of the fingerprint).
QLM_PROMPTS: dict[str, QLMPrompt] = {
    # UPR / Zhuang et al.: a plain continuation prompt, no chat markup
    "plain": QLMPrompt("Passage:", " ", "\nPlease write a question based on this passage.\nQuestion:", " "),
    # the same instruction as a ChatML user turn; the query is the assistant's answer
    "chatml": QLMPrompt(
        "<|im_start|>user\nPassage:",
        " ",
        "\nPlease write a question based on this passage.<|im_end|>\n<|im_start|>assistant\n",
        "",
    ),
    # the format a `qmdlab train doc2query` generator was trained on (qmdlab.models.doc2query),
    # so the trained generator scores the query it would have written
    "doc2query": QLMPrompt("Passage:", " ", "\nA search query this passage answers:", " "),
}
MAPPINGS = ("pmi", "exp")
DEFAULT_TEMPERATURE = 1.0


def log_softmax_at(logits: np.ndarray, token_ids: Sequence[int]) -> np.ndarray:
    """``log softmax(logits[i])[token_ids[i]]`` per row, in float64 (log-sum-exp, no overflow).

    >>> np.round(log_softmax_at(np.log(np.array([[1.0, 3.0], [2.0, 2.0]])), [1, 0]), 6).tolist()
    [-0.287682, -0.693147]
    """
    z = np.asarray(logits, dtype=np.float64)
    m = z.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
    return z[np.arange(len(token_ids)), list(token_ids)] - lse


def unit_score(
    mean_logp: float, null_logp: float, mapping: str = "pmi", temperature: float = DEFAULT_TEMPERATURE
) -> float:
    """A pair's mean query log-probability mapped into [0, 1] (see the module docs).

    >>> unit_score(-2.0, -2.0)            # the text adds nothing: 0.5
    0.5
    >>> round(unit_score(-1.0, -2.0), 6)  # +1 nat/token at temperature 1: logistic(1)
    0.731059
    >>> round(unit_score(-1.5, -2.0, temperature=0.5), 6)
    0.731059
    >>> round(unit_score(-2.0, -9.9, "exp"), 6)  # exp mapping ignores the empty-passage term
    0.135335
    >>> unit_score(-1e6, 0.0), unit_score(1e6, 0.0)
    (0.0, 1.0)
    """
    if mapping == "exp":
        return float(min(1.0, math.exp(min(mean_logp, 0.0))))
    if mapping != "pmi":
        raise ValueError(f"unknown QLM mapping {mapping!r}; expected one of {MAPPINGS}")
    x = (mean_logp - null_logp) / temperature
    if x >= 0:
        return float(1.0 / (1.0 + math.exp(-x)))
    e = math.exp(x)  # x < 0: no overflow for very negative x
    return float(e / (1.0 + e))


def _logits_row(llm, i: int, n_vocab: int) -> np.ndarray:
    return np.ctypeslib.as_array(llm._ctx.get_logits_ith(i), shape=(n_vocab,)).copy()


def decode_scored(llm, tokens: Sequence[int], n_scored: int) -> np.ndarray:
    """Decode ``tokens`` after the model's current position and return the logits rows of the
    last ``n_scored`` of them, ``(n_scored, n_vocab)``. Other positions request no logits (the
    output layer runs only where a probability is read). ``llm.n_tokens`` advances as
    :meth:`llama_cpp.Llama.eval` would, so the KV cache of the decoded tokens can be kept.
    """
    n, n_vocab = len(tokens), llm.n_vocab()
    first = n - n_scored
    llm._ctx.kv_cache_seq_rm(-1, llm.n_tokens, -1)  # drop whatever followed the current position
    rows: list[np.ndarray] = []
    for start in range(0, n, llm.n_batch):
        batch = list(tokens[start : start + llm.n_batch])
        n_past = llm.n_tokens
        llm._batch.set_batch(batch=batch, n_past=n_past, logits_all=False)
        wanted = [j for j in range(len(batch)) if start + j >= first]
        for j in wanted:
            llm._batch.batch.logits[j] = True
        llm._ctx.decode(llm._batch)
        rows.extend(_logits_row(llm, j, n_vocab) for j in wanted)
        llm.input_ids[n_past : n_past + len(batch)] = batch
        llm.n_tokens += len(batch)
    return np.stack(rows) if rows else np.empty((0, n_vocab), dtype=np.float32)


class QLMReranker:
    """Query likelihood as a :class:`~qmdlab.models.base.Reranker` (``qlm:MODEL`` references).

    Parameters
    ----------
    resolve : callable
        Returns the GGUF path (at load time only).
    model_id : str
        The reference, ``qlm:`` included (it names the model in traces and the fingerprint).
    prompt : {"plain", "chatml"}
        The template (:data:`QLM_PROMPTS`).
    max_doc_tokens : int
        Score with only the first ``max_doc_tokens`` tokens of each text (bounds a pair's CPU cost).
    mapping : {"pmi", "exp"}
        How the mean log-probability becomes a score in [0, 1] (module docs).
    temperature : float
        Nats per token of the ``pmi`` logistic.
    """

    def __init__(
        self,
        resolve: Callable[[], Path],
        model_id: str,
        *,
        prompt: str = "plain",
        max_doc_tokens: int = 384,
        mapping: str = "pmi",
        temperature: float = DEFAULT_TEMPERATURE,
        n_ctx: int = 2048,
        n_threads: Optional[int] = None,
        idle_timeout: Optional[float] = DEFAULT_IDLE_TIMEOUT,
    ):
        if prompt not in QLM_PROMPTS:
            raise ModelError(f"unknown QLM prompt {prompt!r}; use one of {', '.join(QLM_PROMPTS)}")
        if mapping not in MAPPINGS:
            raise ModelError(f"unknown QLM mapping {mapping!r}; use one of {', '.join(MAPPINGS)}")
        if max_doc_tokens < 1 or temperature <= 0:
            raise ModelError(f"QLM needs max_doc_tokens >= 1 and temperature > 0 (got {max_doc_tokens}, {temperature})")
        self.model_id = model_id
        self.prompt_name, self.prompt = prompt, QLM_PROMPTS[prompt]
        self.max_doc_tokens, self.mapping, self.temperature = max_doc_tokens, mapping, temperature
        self.n_ctx = n_ctx
        self.llama = LazyLlama(resolve, n_threads=n_threads, idle_timeout=idle_timeout, n_ctx=n_ctx)
        self.pairs = 0  # pairs scored by the model (not counting the empty-passage pass)
        self.fingerprint = make_fingerprint(
            model_id,
            role="rerank",
            kind="query-likelihood",
            prompt=tuple(self.prompt),
            max_doc_tokens=max_doc_tokens,
            mapping=mapping,
            temperature=temperature if mapping == "pmi" else None,
        )

    # -- the raw log-likelihoods ------------------------------------------------------------
    def token_sequences(
        self, llm, query: str, text: str, budget: Optional[int] = None
    ) -> tuple[list[int], list[int], list[int]]:
        """``(head, body, query)`` token ids of one pair: ``body`` = the text cut to
        ``min(max_doc_tokens, budget)`` tokens + the middle part."""
        enc = lambda s, special: llm.tokenize(s.encode("utf-8"), add_bos=False, special=special)  # noqa: E731
        head = llm.tokenize(self.prompt.head.encode("utf-8"), add_bos=True, special=True)
        cut = self.max_doc_tokens if budget is None else min(self.max_doc_tokens, budget)
        doc = enc(self.prompt.text_prefix + text, False)[:cut] if text else []  # text never parses as special
        q = enc(self.prompt.query_prefix + query, False)
        return head, doc + enc(self.prompt.middle, True), q

    def log_likelihoods(self, query: str, texts: Sequence[str]) -> tuple[list[float], float]:
        """Mean log P(query tokens | prompt with each text), and the same with an empty passage."""
        out: list[float] = []
        with self.llama.use() as llm:
            head, null_body, q = self.token_sequences(llm, query, "")
            if not q:
                raise ModelError("query-likelihood rerank got an empty query")
            room = self.n_ctx - len(head) - len(null_body) - len(q)
            if room < 16:
                raise ModelError(
                    f"the query-likelihood prompt for this query needs {len(head) + len(null_body) + len(q)} "
                    f"tokens, more than n_ctx={self.n_ctx} allows; shorten the query"
                )
            with scoring_pass(llm, head, f"query-likelihood rerank with {self.model_id}") as base:

                def mean_logp(body: list[int]) -> float:
                    llm.n_tokens = base  # drop the previous pair; decode_scored trims the KV cache to here
                    seq = body + q
                    logits = decode_scored(llm, seq[:-1], len(q))  # row i predicts q[i]
                    return float(log_softmax_at(logits, q).mean())

                null = mean_logp(null_body)
                for text in texts:
                    cancel.check()  # a budgeted call that ran out stops between pairs
                    _, body, _ = self.token_sequences(llm, query, text, room)
                    out.append(mean_logp(body))
                    self.pairs += 1
        return out, null

    # -- the Reranker role ------------------------------------------------------------------
    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if not len(texts):
            return []
        lls, null = self.log_likelihoods(query, texts)
        return [unit_score(ll, null, self.mapping, self.temperature) for ll in lls]

    def prepare(self) -> None:
        """Load the weights in the calling thread (see :meth:`LazyLlama.ensure_loaded`)."""
        self.llama.ensure_loaded()

    def release(self) -> None:
        self.llama.release()


# -- the ``qlm:`` reference ------------------------------------------------------------------------
PREFIX = "qlm:"
#: Packaged models that are embedders, not causal language models.
_NOT_GENERATIVE = ("pkg:all-minilm-l6-v2", "pkg:embeddinggemma-300m", "pkg:embeddinggemma-300m-q8_0")
_USAGE = (
    "give a causal language model after the prefix, e.g. --rerank-model qlm:pkg:smollm2-135m-instruct-q4_1 "
    "(or QMDLAB_RERANK_MODEL=qlm:…; pkg:NAME, hf:ORG/REPO/FILE.gguf or a .gguf path)"
)


def inner_ref(ref: str, role: str = "rerank") -> str:
    """The model reference inside ``qlm:MODEL``, checked without loading anything.

    >>> inner_ref("qlm:pkg:smollm2-135m-instruct-q4_1")
    'pkg:smollm2-135m-instruct-q4_1'
    >>> inner_ref("qlm:fake:overlap")
    Traceback (most recent call last):
    ...
    qmdlab.errors.ConfigError: 'qlm:fake:overlap': query-likelihood rerank needs a language model, not fake:overlap; give a causal language model after the prefix, e.g. --rerank-model qlm:pkg:smollm2-135m-instruct-q4_1 (or QMDLAB_RERANK_MODEL=qlm:…; pkg:NAME, hf:ORG/REPO/FILE.gguf or a .gguf path)
    """
    from qmdlab.errors import ConfigError

    if role != "rerank":
        raise ConfigError(
            f"{ref!r} is a query-likelihood reranker: it can only be the rerank model "
            f"(--rerank-model / QMDLAB_RERANK_MODEL), not {role}"
        )
    inner = ref[len(PREFIX) :].strip()
    if not inner:
        raise ConfigError(f"{ref!r}: no model after the qlm: prefix; {_USAGE}")
    low = inner.lower()
    if low == "none" or low.startswith(("fake:", "cross-encoder:", PREFIX)) or inner in _NOT_GENERATIVE:
        raise ConfigError(f"{ref!r}: query-likelihood rerank needs a language model, not {inner}; {_USAGE}")
    if inner.startswith("pkg:"):
        from qmdlab.models import packaged

        if inner[4:] not in packaged.PACKAGED:
            raise ConfigError(
                f"{ref!r}: unknown packaged model {inner}; give --rerank-model one of "
                + ", ".join(f"qlm:pkg:{n}" for n in packaged.PACKAGED if f"pkg:{n}" not in _NOT_GENERATIVE)
            )
    elif not inner.startswith("hf:"):
        path = Path(inner).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"{ref!r}: model file {path} does not exist; fix the path after qlm: in "
                f"--rerank-model / QMDLAB_RERANK_MODEL"
            )
    return inner


#: Written by ``qmdlab train doc2query`` beside its ``model.gguf``: the model continues the
#: :mod:`qmdlab.models.doc2query` format.
DOC2QUERY_MARKER = "doc2query.json"


def trained_doc2query(inner: str) -> bool:
    """Whether ``inner`` is a GGUF file with :data:`DOC2QUERY_MARKER` beside it.

    >>> trained_doc2query("pkg:smollm2-135m-instruct-q4_1")
    False
    """
    if inner.startswith(("pkg:", "hf:")):
        return False
    path = Path(inner).expanduser()
    return path.is_file() and (path.parent / DOC2QUERY_MARKER).is_file()


def build(
    ref: str,
    resolve_path: Callable[..., Path],
    known: dict,
    *,
    role: str = "rerank",
    n_threads: Optional[int] = None,
    idle_timeout: Optional[float] = DEFAULT_IDLE_TIMEOUT,
    progress: bool = False,
    **options,
) -> QLMReranker:
    """The :class:`QLMReranker` of a ``qlm:MODEL`` reference (the registry's ``build_model``).

    ``known`` holds the inner model's options (``n_ctx``, ``rerank_max_doc_tokens``; the registry's
    ``KNOWN``); ``options`` (``prompt``, ``max_doc_tokens``, ``mapping``, ``temperature``) override
    them. The model file is resolved at first use. A GGUF written by ``qmdlab train doc2query``
    (a :data:`DOC2QUERY_MARKER` file beside it) is scored with the ``doc2query`` prompt, the format it
    was trained on, unless ``prompt`` is given.
    """
    inner = inner_ref(ref, role)
    opts = dict(known.get(inner, {}))
    kw = {"max_doc_tokens": opts.get("rerank_max_doc_tokens") or 384, "n_ctx": opts.get("n_ctx", 2048), **options}
    if "prompt" not in options and trained_doc2query(inner):
        kw["prompt"] = "doc2query"
    return QLMReranker(
        lambda: resolve_path(inner, progress=progress), ref, n_threads=n_threads, idle_timeout=idle_timeout, **kw
    )
