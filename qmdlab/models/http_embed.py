"""Embedder served over HTTP: ``POST {base}/embeddings`` as llama-server, vLLM, Ollama and TEI serve it.

The client owns the input template, exactly as :class:`~qmdlab.models.llama_embed.LlamaEmbedder`
does (the server is sent the finished text), and L2-normalises the vectors it gets back, so a
server that runs the same weights gives the same vectors as the local backend.

An answer is checked before any vector of it is used or stored: one vector per text (its
``index`` naming each text once), all of one dimension — the one earlier answers had — and
finite, within float32's range and not all zero. An answer that fails is refused whole, with one
:class:`~qmdlab.errors.ModelError` line naming the model (``embed`` then stores nothing of that
batch, and a rerun embeds its chunks again).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from qmdlab import cancel
from qmdlab.errors import ModelError
from qmdlab.models._http import HttpModel, Served, fingerprint_parts, parse_ref
from qmdlab.models.base import l2_normalize, make_fingerprint
from qmdlab.models.templates import EMBEDDING_TEMPLATES, EmbeddingTemplate, embedding_family

ENDPOINT = "embeddings"


class HttpEmbedder(HttpModel):
    """An embedding model behind an OpenAI-compatible ``/embeddings`` endpoint.

    Parameters
    ----------
    ref : str or Served
        ``http://HOST:PORT/v1#MODEL`` or ``openai:MODEL`` (:mod:`qmdlab.models._http`).
    template : EmbeddingTemplate or str, optional
        Input formats; default the reference's ``template=`` option, else guessed from the model name.
    chunking : mapping, optional
        Chunking parameters of the vectors' chunks; part of :attr:`fingerprint`.
    batch_size : int
        Texts per request (and between two cancellation checks).
    dim : int, optional
        Known output dimension; otherwise read from the first answer (a one-text request when
        :attr:`dim` is asked for first).
    timeout, retries, backoff : see :class:`~qmdlab.models._http.HttpEndpoint`
    """

    def __init__(
        self,
        ref: str | Served,
        *,
        template: EmbeddingTemplate | str | None = None,
        chunking: Optional[Mapping] = None,
        batch_size: int = 32,
        dim: Optional[int] = None,
        timeout: Optional[float] = None,
        retries: int = 2,
        backoff: float = 0.5,
    ):
        served = parse_ref(ref) if isinstance(ref, str) else ref
        if template is None or isinstance(template, str):
            name = template or served.options.get("template") or embedding_family(served.model or served.ref)
            template = EMBEDDING_TEMPLATES[name]
        super().__init__(served, "embed", timeout=timeout, retries=retries, backoff=backoff)
        self.template = template
        self.chunking = dict(chunking or {})
        self.batch_size = max(1, int(batch_size))
        self._dim = dim
        self.fingerprint = make_fingerprint(
            served.ref,
            **fingerprint_parts(served),
            **template.fingerprint_parts(),
            chunking=self.chunking,
        )

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._embed(["dimension"])
        assert self._dim is not None
        return self._dim

    def _request(self, texts: list[str]) -> np.ndarray:
        from qmdlab.store.vectors import vector_problem

        body: dict[str, Any] = {"input": texts}
        reply = self.endpoint.post(ENDPOINT, body)
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list) or len(data) != len(texts):
            raise self.endpoint.bad_reply(ENDPOINT, f"'data' holding {len(texts)} embeddings", reply)
        try:
            given = [d.get("index") for d in data]
            if all(i is None for i in given):  # no index: in the order of the texts
                rows = list(data)
            else:
                order = [int(i) for i in given]
                if sorted(order) != list(range(len(texts))):
                    raise ValueError("indices")
                rows = [row for _, row in sorted(zip(order, data), key=lambda x: x[0])]
            vectors = [row["embedding"] for row in rows]
        except (TypeError, KeyError, ValueError, AttributeError):
            raise self.endpoint.bad_reply(
                ENDPOINT, f"one embedding for each of the {len(texts)} texts (index 0–{len(texts) - 1})", reply
            ) from None
        dims = sorted({len(v) for v in vectors if isinstance(v, list)})
        if len(dims) > 1:
            problem: Optional[str] = f"vectors of different dimensions ({', '.join(map(str, dims))}) in one answer"
        else:
            problem = vector_problem(vectors, zero_ok=False)
        if problem is None:
            mat = np.asarray(vectors, dtype=np.float64)
            if self._dim is not None and mat.shape[1] != self._dim:
                problem = f"{mat.shape[1]}-d vectors where its earlier answers had {self._dim}-d ones"
        if problem is not None:
            raise ModelError(
                f"embed model {self.model_id}: {self.served.url(ENDPOINT)} answered {problem}; the batch was "
                "refused (nothing of it is stored) — check the server (or QMDLAB_EMBED_MODEL)"
            )
        return mat

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = []
        for i in range(0, len(texts), self.batch_size):
            cancel.check()  # a budgeted call that ran out stops between requests
            mat = self._request(texts[i : i + self.batch_size])
            self._dim = int(mat.shape[1])
            out.append(mat)
        return l2_normalize(np.concatenate(out)) if out else np.zeros((0, self.dim), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([self.template.query(text)])[0]

    def embed_documents(self, docs: Sequence[tuple[str, str]]) -> np.ndarray:
        return self._embed([self.template.document(title, text) for title, text in docs])
