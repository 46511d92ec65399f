"""Embedder on llama.cpp (``Llama(embedding=True)``): batched, L2-normalised, template-owning."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Optional

import numpy as np

from qmdlab import cancel
from qmdlab.errors import ModelError
from qmdlab.models._llama import DEFAULT_IDLE_TIMEOUT, LazyLlama
from qmdlab.models.base import l2_normalize, make_fingerprint
from qmdlab.models.templates import EMBEDDING_TEMPLATES, EmbeddingTemplate, embedding_family


class LlamaEmbedder:
    """A GGUF embedding model (BERT-style or decoder) with pooling from its metadata.

    Parameters
    ----------
    resolve : callable
        Returns the GGUF path; called on first use.
    model_id : str
        The model reference (``pkg:…``, ``hf:…`` or a path).
    template : EmbeddingTemplate or str, optional
        Input formats; default guessed from ``model_id`` (:func:`embedding_family`).
    chunking : mapping, optional
        Chunking parameters of the vectors' chunks; part of :attr:`fingerprint`.
    n_ctx : int
        Context (and batch) size in tokens; longer inputs are truncated to it, so it is part of
        :attr:`fingerprint`.
    batch_size : int
        Texts between two cancellation checks in :meth:`embed_documents` (and per
        ``llama_decode`` call when ``pack`` is on).
    pack : bool
        Put several texts in one ``llama_decode``. Off by default: llama.cpp gives a packed batch
        one attention over all its tokens (masked per sequence, computed in full), so on a CPU a
        batch of long chunks costs more than the same texts one by one; see
        ``docs/results/embeddinggemma.md``. The vectors agree either way to float rounding.
    dim : int, optional
        Known output dimension (avoids loading the model just to read it).
    """

    def __init__(
        self,
        resolve: Callable[[], Path],
        model_id: str,
        *,
        template: EmbeddingTemplate | str | None = None,
        chunking: Optional[Mapping] = None,
        n_ctx: int = 512,
        batch_size: int = 32,
        pack: bool = False,
        dim: Optional[int] = None,
        n_threads: Optional[int] = None,
        idle_timeout: Optional[float] = DEFAULT_IDLE_TIMEOUT,
    ):
        if template is None or isinstance(template, str):
            template = EMBEDDING_TEMPLATES[template or embedding_family(model_id)]
        self.template = template
        self.model_id = model_id
        self.chunking = dict(chunking or {})
        self.batch_size = max(1, int(batch_size))
        self.pack = bool(pack)
        self.max_tokens = int(n_ctx)  # an input is cut to this many tokens
        self._dim = dim
        self.llama = LazyLlama(
            resolve,
            n_threads=n_threads,
            idle_timeout=idle_timeout,
            embedding=True,
            n_ctx=n_ctx,
            n_batch=n_ctx,
            n_ubatch=n_ctx,
        )
        self.fingerprint = make_fingerprint(
            model_id,
            **template.fingerprint_parts(),
            chunking=self.chunking,
            max_tokens=n_ctx,
        )

    @property
    def dim(self) -> int:
        if self._dim is None:
            with self.llama.use() as llm:
                self._dim = int(llm.n_embd())
        return self._dim

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = []
        with self.llama.use() as llm:
            for i in range(0, len(texts), self.batch_size):
                cancel.check()  # a budgeted call that ran out stops between batches
                batch = texts[i : i + self.batch_size]
                try:
                    if self.pack:
                        vecs = llm.embed(batch, truncate=True)
                    else:
                        vecs = [llm.embed([text], truncate=True)[0] for text in batch]
                except (RuntimeError, ValueError) as err:
                    raise ModelError(f"embedding with {self.model_id} failed: {err}") from err
                out.append(np.asarray(vecs, dtype=np.float32))
            self._dim = int(llm.n_embd())
        return l2_normalize(np.concatenate(out)) if out else np.zeros((0, self.dim), np.float32)

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` as :meth:`embed_documents` feeds it (begin and end tokens included)."""
        with self.llama.use() as llm:
            return len(llm.tokenize(text.encode("utf-8"), add_bos=True, special=False))

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([self.template.query(text)])[0]

    def embed_documents(self, docs: Sequence[tuple[str, str]]) -> np.ndarray:
        return self._embed([self.template.document(title, text) for title, text in docs])

    def prepare(self) -> None:
        """Load the weights in the calling thread (see :meth:`LazyLlama.ensure_loaded`)."""
        self.llama.ensure_loaded()

    def release(self) -> None:
        self.llama.release()
