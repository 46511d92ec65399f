"""Embedder on llama.cpp (``Llama(embedding=True)``): batched, L2-normalised, template-owning."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Optional

import numpy as np

from qmdlab import cancel
from qmdlab.errors import ModelError
from qmdlab.models._llama import DEFAULT_IDLE_TIMEOUT, LazyLlama, default_threads, import_llama_cpp
from qmdlab.models.base import l2_normalize, make_fingerprint
from qmdlab.models.templates import EMBEDDING_TEMPLATES, EmbeddingTemplate, embedding_family


def embed_workers(threads: int, environ=None) -> int:
    """Contexts an embedder runs side by side: ``$QMDLAB_EMBED_WORKERS``, else 2 with two threads or more.

    >>> embed_workers(2, {}), embed_workers(1, {}), embed_workers(4, {"QMDLAB_EMBED_WORKERS": "1"})
    (2, 1, 1)
    """
    import os

    env = (os.environ if environ is None else environ).get("QMDLAB_EMBED_WORKERS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ModelError(f"QMDLAB_EMBED_WORKERS={env!r} is not a whole number; set it to 1 or 2") from None
    return 2 if threads >= 2 else 1


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
    workers : int, optional
        Contexts that embed the texts of one call side by side, each on ``n_threads // workers``
        threads (at least one); default ``$QMDLAB_EMBED_WORKERS``, else 2 where there are two
        threads or more. On a CPU two one-thread contexts embed about 1.3x as many texts per second
        as one two-thread context (llama.cpp's threads wait for each other at every operation of a
        small model; ``docs/results/vs-qmd.md``). A single text (a query) uses the first context
        alone; each further context is loaded on the first call with several texts. A text's
        vector does not depend on the thread count (each dot product is one thread's), so a single
        text (a query) runs on all ``n_threads``: 1.2x faster than on one.
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
        workers: Optional[int] = None,
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
        threads = n_threads or default_threads()
        self.workers = embed_workers(threads) if workers is None else max(1, int(workers))
        self.threads = threads
        self.worker_threads = max(1, threads // self.workers)
        self.llamas = [
            LazyLlama(
                resolve,
                # the first context embeds single texts on every thread, and drops to its share
                # while the contexts embed side by side (_threads)
                n_threads=threads if i == 0 else self.worker_threads,
                idle_timeout=idle_timeout,
                embedding=True,
                n_ctx=n_ctx,
                n_batch=n_ctx,
                n_ubatch=n_ctx,
            )
            for i in range(self.workers)
        ]
        self.llama = self.llamas[0]
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

    def _embed_one_by_one(self, llama: LazyLlama, texts: list[str]) -> list:
        with llama.use() as llm:
            self._threads(llm, self.worker_threads)
            try:
                return [llm.embed([text], truncate=True)[0] for text in texts]
            except (RuntimeError, ValueError) as err:
                raise ModelError(f"embedding with {self.model_id} failed: {err}") from err

    @staticmethod
    def _threads(llm, n: int) -> None:
        """Run ``llm``'s context on ``n`` threads from its next decode on (no reload)."""
        if getattr(llm, "n_threads", n) != n:
            import_llama_cpp().llama_set_n_threads(llm.ctx, n, n)
            llm.n_threads = llm.n_threads_batch = n

    def _embed(self, texts: list[str]) -> np.ndarray:
        if self.workers > 1 and not self.pack and len(texts) > 1:
            return self._embed_side_by_side(texts)
        out = []
        with self.llama.use() as llm:
            self._threads(llm, self.threads)
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

    def _embed_side_by_side(self, texts: list[str]) -> np.ndarray:
        """Each batch's texts dealt round-robin to the contexts, embedded in threads (llama.cpp
        releases the GIL), put back in order."""
        from concurrent.futures import ThreadPoolExecutor

        out: list = [None] * len(texts)
        for llama in self.llamas:  # loaded here, one after the other (LazyLlama.ensure_loaded says why)
            llama.ensure_loaded()
        with ThreadPoolExecutor(self.workers, thread_name_prefix="qmdlab-embed") as pool:
            for i in range(0, len(texts), self.batch_size):
                cancel.check()  # a budgeted call that ran out stops between batches
                batch = list(range(i, min(i + self.batch_size, len(texts))))
                parts = [batch[w :: self.workers] for w in range(self.workers)]
                jobs = [
                    (part, pool.submit(self._embed_one_by_one, llama, [texts[j] for j in part]))
                    for llama, part in zip(self.llamas, parts)
                    if part
                ]
                for part, job in jobs:
                    for j, vec in zip(part, job.result()):
                        out[j] = vec
        self._dim = len(out[0])
        return l2_normalize(np.asarray(out, dtype=np.float32))

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

    def load_in_background(self) -> None:
        """Start loading the weights a query embeds with (:meth:`LazyLlama.load_in_background`)."""
        self.llama.load_in_background()

    def release(self) -> None:
        for llama in self.llamas:
            llama.release()
