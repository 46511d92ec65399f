"""Reranker served over HTTP: ``POST {base}/rerank`` as llama-server, vLLM, TEI and Jina/Cohere-style APIs serve it.

The request carries the query and the texts both as ``documents`` (llama-server, vLLM, Jina,
Cohere) and as ``texts`` (TEI); the answer is either ``{"results": [{"index",
"relevance_score"}]}`` or TEI's ``[{"index", "score"}]``. Scores must be probabilities in [0, 1],
as the pipeline blends them; a server that answers logits (llama-server) needs the reference
option ``scores=logit``, which maps them through the logistic function.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional

from qmdlab import cancel
from qmdlab.errors import ModelError
from qmdlab.models._http import HttpModel, Served, fingerprint_parts
from qmdlab.models.base import make_fingerprint

ENDPOINT = "rerank"


def logistic(x: float) -> float:
    """``1 / (1 + e^-x)``, without overflow for large ``|x|``.

    >>> logistic(0.0), round(logistic(800.0), 6), round(logistic(-800.0), 6)
    (0.5, 1.0, 0.0)
    """
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


class HttpReranker(HttpModel):
    """Relevance scores from a reranker behind a ``/rerank`` endpoint.

    Parameters
    ----------
    ref : str or Served
        ``http://HOST:PORT/v1#MODEL`` or ``openai:MODEL`` (:mod:`qmdlab.models._http`); the
        option ``scores=logit`` maps logits to probabilities.
    batch_size : int
        Texts per request (TEI refuses more than its ``--max-client-batch-size``, 32 by default).
    timeout, retries, backoff : see :class:`~qmdlab.models._http.HttpEndpoint`
    """

    def __init__(
        self,
        ref: str | Served,
        *,
        batch_size: int = 32,
        timeout: Optional[float] = None,
        retries: int = 2,
        backoff: float = 0.5,
    ):
        super().__init__(ref, "rerank", timeout=timeout, retries=retries, backoff=backoff)
        self.scores = self.served.options.get("scores", "probability")
        self.batch_size = max(1, int(batch_size))
        self.fingerprint = make_fingerprint(
            self.served.ref, **fingerprint_parts(self.served), role="rerank", scores=self.scores
        )

    def _request(self, query: str, texts: list[str]) -> list[float]:
        body: dict[str, Any] = {"query": query, "documents": texts, "texts": texts, "top_n": len(texts)}
        reply = self.endpoint.post(ENDPOINT, body)
        rows = reply.get("results") if isinstance(reply, dict) else reply
        if not isinstance(rows, list):
            raise self.endpoint.bad_reply(ENDPOINT, "a list of results", reply)
        found: dict[int, float] = {}
        try:
            for row in rows:
                score = row["relevance_score"] if "relevance_score" in row else row["score"]
                found[int(row["index"])] = float(score)
        except (TypeError, KeyError, ValueError):
            raise self.endpoint.bad_reply(ENDPOINT, "results with index and relevance_score", reply) from None
        if sorted(found) != list(range(len(texts))):
            raise self.endpoint.bad_reply(ENDPOINT, f"one score for each of the {len(texts)} documents", reply)
        scores = [found[i] for i in range(len(texts))]
        if not all(math.isfinite(s) for s in scores):
            raise self.endpoint.bad_reply(ENDPOINT, "finite relevance scores", reply)
        if self.scores == "logit":
            return [logistic(s) for s in scores]
        bad = [s for s in scores if not 0.0 <= s <= 1.0]
        if bad:
            raise ModelError(
                f"{self.served.url(ENDPOINT)} answered relevance scores outside [0, 1] (e.g. {bad[0]:g}), "
                f"so it serves logits; add ?scores=logit after the model name in the rerank reference"
            )
        return scores

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        out: list[float] = []
        for i in range(0, len(texts), self.batch_size):
            cancel.check()  # a budgeted call that ran out stops between requests
            out.extend(self._request(query, list(texts[i : i + self.batch_size])))
        return out
