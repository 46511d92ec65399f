"""Reranker on llama.cpp: P(yes) from the yes/no next-token logits of a judgement prompt."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Optional

import numpy as np

from qmdlab import cancel
from qmdlab.errors import ModelError
from qmdlab.models._llama import DEFAULT_IDLE_TIMEOUT, LazyLlama, scoring_pass
from qmdlab.models.base import make_fingerprint
from qmdlab.models.scoring import p_yes
from qmdlab.models.templates import rerank_family, rerank_prompt_parts

#: Answer spellings whose single-token ids form the "yes"/"no" logit groups of generic models.
YES_WORDS = ("yes", "Yes", "YES", " yes", " Yes")
NO_WORDS = ("no", "No", "NO", " no", " No")


def answer_token_ids(tokenize: Callable[[str], list[int]], words: Sequence[str]) -> list[int]:
    """Ids of the spellings in ``words`` that are exactly one token (deduplicated, in order).

    >>> vocab = {"yes": [7], "Yes": [8], "YES": [9, 10], " yes": [7]}
    >>> answer_token_ids(lambda w: vocab.get(w, [0, 0]), ["yes", "Yes", "YES", " yes"])
    [7, 8]
    """
    ids: list[int] = []
    for w in words:
        toks = tokenize(w)
        if len(toks) == 1 and toks[0] not in ids:
            ids.append(toks[0])
    return ids


class LlamaReranker:
    """Cross-encoder-style relevance from an instruct or reranker GGUF.

    The prompt (:func:`~qmdlab.models.templates.rerank_prompt_parts`) is split at the document:
    the query part is evaluated once per :meth:`score` call and its KV cache reused for every
    text, then only ``document + suffix`` is decoded per pair and P(yes) read from the logits of
    the last position (:func:`~qmdlab.models.scoring.p_yes`). The official Qwen3-Reranker
    template compares exactly the tokens ``yes`` and ``no``; generic templates use the groups
    :data:`YES_WORDS` / :data:`NO_WORDS`.

    Parameters
    ----------
    family : {"qwen3-reranker", "chatml", "gemma"}, optional
        Default from ``model_id`` (:func:`~qmdlab.models.templates.rerank_family`).
    n_ctx : int
        Context size; a text is truncated so that prompt + text fit.
    max_doc_tokens : int, optional
        Judge only the first ``max_doc_tokens`` tokens of each text. On a CPU the cost of a pair is
        its prompt evaluation, so this bounds the seconds per pair; part of the fingerprint, since
        it changes the scores (cached scores of another setting are not reused).
    """

    def __init__(
        self,
        resolve: Callable[[], Path],
        model_id: str,
        *,
        family: Optional[str] = None,
        instruct: Optional[str] = None,
        n_ctx: int = 2048,
        n_threads: Optional[int] = None,
        idle_timeout: Optional[float] = DEFAULT_IDLE_TIMEOUT,
        max_doc_tokens: Optional[int] = None,
    ):
        self.model_id = model_id
        self.family = family or rerank_family(model_id)
        self.instruct = instruct
        self.n_ctx = n_ctx
        self.llama = LazyLlama(resolve, n_threads=n_threads, idle_timeout=idle_timeout, n_ctx=n_ctx)
        self.llama.on_load(self._answer_ids)
        self.yes_ids: list[int] = []
        self.no_ids: list[int] = []
        self.max_doc_tokens = max_doc_tokens
        extra = {"max_doc_tokens": max_doc_tokens} if max_doc_tokens else {}
        self.fingerprint = make_fingerprint(model_id, role="rerank", family=self.family, instruct=instruct, **extra)

    def _answer_ids(self, llm) -> None:
        def tok(w: str) -> list[int]:
            return llm.tokenize(w.encode("utf-8"), add_bos=False, special=False)

        words = (("yes",), ("no",)) if self.family == "qwen3-reranker" else (YES_WORDS, NO_WORDS)
        self.yes_ids, self.no_ids = answer_token_ids(tok, words[0]), answer_token_ids(tok, words[1])
        if not self.yes_ids or not self.no_ids or set(self.yes_ids) & set(self.no_ids):
            raise ModelError(
                f"{self.model_id}: 'yes'/'no' are not single distinct tokens in its vocabulary, "
                f"so it cannot serve as a reranker; set QMDLAB_RERANK_MODEL to another model"
            )

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        if not len(texts):
            return []
        prefix, suffix = rerank_prompt_parts(self.family, query, self.instruct)
        out: list[float] = []
        with self.llama.use() as llm:
            enc = lambda s, special: llm.tokenize(s.encode("utf-8"), add_bos=False, special=special)  # noqa: E731
            head = llm.tokenize(prefix.encode("utf-8"), add_bos=True, special=True)
            tail = enc(suffix, True)
            room = self.n_ctx - len(head) - len(tail)
            if self.max_doc_tokens:
                room = min(room, self.max_doc_tokens)
            if room < 16:
                raise ModelError(
                    f"rerank prompt for this query needs {len(head) + len(tail)} tokens, "
                    f"more than n_ctx={self.n_ctx} allows; shorten the query"
                )
            n_vocab = llm.n_vocab()
            with scoring_pass(llm, head, f"rerank with {self.model_id}") as base:
                for text in texts:
                    cancel.check()  # a budgeted call that ran out stops between pairs
                    body = enc(text, False)[:room]  # document text never parses as special tokens
                    llm.n_tokens = base  # drop the previous document; eval() trims the KV cache to here
                    llm.eval(body + tail)
                    logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,)).copy()
                    out.append(p_yes(logits, self.yes_ids, self.no_ids))
        return out

    def prepare(self) -> None:
        """Load the weights in the calling thread (see :meth:`LazyLlama.ensure_loaded`)."""
        self.llama.ensure_loaded()

    def release(self) -> None:
        self.llama.release()
