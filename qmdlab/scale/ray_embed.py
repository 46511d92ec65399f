"""``qmdlab embed --ray``: embed the chunks needing vectors on Ray actors, store them from one writer.

The driver reads the chunks that have no vector for the embedder's fingerprint (the same
:meth:`qmdlab.store.Index.chunks_needing_vectors` as the local path), hands them to Ray Data
and runs ``map_batches`` over an actor pool: each actor builds the embedder **once** from an
:class:`EmbedderSpec` (explicit model reference, so every node resolves the same model) and
embeds batches of ``(title, text)`` exactly as the local path does. The driver is the single
writer: it consumes the output in batches and stores each in its own transaction
(:meth:`~qmdlab.store.Index.store_vectors`), so an interrupted run keeps finished batches and the
next run embeds only what is missing. Every output row carries the fingerprint of the actor's
embedder; a row whose fingerprint differs from the driver's (another model file or version on
a node) stops the run before it is stored.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from qmdlab.errors import ModelError
from qmdlab.scale.cluster import RayOptions, connect, forwarded_env

if TYPE_CHECKING:
    import polars as pl

    from qmdlab.store import Index


class EmbedderSpec(NamedTuple):
    """How an actor builds its embedder (what ``qmdlab embed`` would load locally).

    Attributes
    ----------
    ref : str
        The embed model reference, resolved in the driver (``pkg:…``, ``hf:…``, a path,
        ``fake:keyword``), so the actors do not depend on their own environment or config.
    n_threads : int or None
        llama.cpp threads per actor (default: the actor's ``num_cpus``, at least 1).
    batch_size : int
        Texts per model call.
    """

    ref: str
    n_threads: int | None = None
    batch_size: int = 32

    def build(self) -> Any:
        """The embedder (lazy for llama.cpp models: weights load on the first batch)."""
        from qmdlab.models import load_models

        emb = load_models(
            embed=self.ref, expand="none", rerank="none", n_threads=self.n_threads, batch_size=self.batch_size
        ).embedder
        if emb is None:
            raise ModelError("the embed role is disabled ('none'); pick an embedder with --embed-model or --preset")
        return emb


class EmbedActor:
    """Ray Data callable class: one embedder per actor, ``(chunk_id, title, text)`` batches in,
    ``(chunk_id, vector, fingerprint)`` out."""

    def __init__(self, spec: EmbedderSpec, env: dict[str, str]):
        os.environ.update(env)
        self.embedder = spec.build()
        self.fingerprint = self.embedder.fingerprint

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        titles = ["" if t is None else str(t) for t in batch["title"]]
        texts = [str(t) for t in batch["text"]]
        mat = np.asarray(self.embedder.embed_documents(list(zip(titles, texts))), dtype=np.float32)
        return {
            "chunk_id": np.asarray(batch["chunk_id"], dtype=np.int64),
            "vector": mat,
            "fingerprint": np.array([self.fingerprint] * len(texts)),
        }


class RayEmbedReport(NamedTuple):
    """What :func:`embed_with_ray` did: chunks stored, write transactions, actors, seconds, and
    vectors computed but not stored (``dropped``: their chunks left the index meanwhile)."""

    chunks: int
    batches: int
    actors: int
    seconds: float
    dropped: int = 0


def embed_with_ray(
    idx: Index,
    todo: pl.DataFrame,
    spec: EmbedderSpec,
    fingerprint: str,
    options: RayOptions = RayOptions(),
    *,
    write_batch: int | None = None,
    progress: bool = True,
    store: Callable[[Sequence[int], np.ndarray, str], int | None] | None = None,
) -> RayEmbedReport:
    """Embed ``todo`` (``chunk_id, title, text``) on Ray and store the vectors under ``fingerprint``.

    Parameters
    ----------
    idx : qmdlab.store.Index
        The index the driver writes to (the actors never open it).
    todo : polars.DataFrame
        Chunks to embed, e.g. :meth:`~qmdlab.store.Index.chunks_needing_vectors`.
    spec : EmbedderSpec
    fingerprint : str
        The driver's embedder fingerprint; every actor's must equal it.
    options : RayOptions
        Address, actor count and per-actor resources.
    write_batch : int, optional
        Vectors per write transaction (default ``spec.batch_size``, as the local path).
    store : callable, optional
        ``store(chunk_ids, matrix, fingerprint)``; default :meth:`Index.store_vectors`.

    Raises
    ------
    ModelError
        An actor's embedder has another fingerprint than the driver's.
    """
    from tqdm import tqdm

    options.check()
    store = store or idx.store_vectors
    write_batch = write_batch or spec.batch_size
    n = todo.height
    t0 = time.perf_counter()
    if n == 0:
        return RayEmbedReport(0, 0, 0, 0.0)
    with connect(options.address) as ray:
        actors = min(options.actor_count(ray), max(1, -(-n // spec.batch_size)))
        if spec.n_threads is None and options.num_cpus >= 1:
            spec = spec._replace(n_threads=int(options.num_cpus))
        table = todo.select("chunk_id", "title", "text").with_columns(todo["title"].fill_null("")).to_arrow()
        # Blocks cut here, not by ``repartition``: a shuffle task would wait for a CPU that the
        # actor pool holds (a deadlock on a small cluster). A few blocks per actor keep all busy.
        step = max(spec.batch_size, -(-n // (actors * 4)))
        ds = ray.data.from_arrow([table.slice(i, step) for i in range(0, n, step)])
        ds = ds.map_batches(
            EmbedActor,
            fn_constructor_kwargs={"spec": spec, "env": forwarded_env()},
            batch_size=spec.batch_size,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=actors),
            num_cpus=options.num_cpus,
            num_gpus=options.num_gpus or None,
        )
        done = batches = dropped = 0
        batches_out = iter(ds.iter_batches(batch_size=write_batch, batch_format="numpy"))
        try:
            with tqdm(
                total=n, unit="chunk", desc=f"embed (ray, {actors} actors)", disable=not progress, delay=0.5
            ) as bar:
                for out in batches_out:
                    fps = set(out["fingerprint"].tolist())
                    if fps != {fingerprint}:
                        raise ModelError(
                            f"a Ray actor embeds with {sorted(fps - {fingerprint})} but this run stores "
                            f"under {fingerprint!r}: every node must have the same model file and "
                            "qmdlab version (run `qmdlab pull` there)"
                        )
                    got = len(out["chunk_id"])
                    kept = store(
                        [int(i) for i in out["chunk_id"]], np.asarray(out["vector"], dtype=np.float32), fingerprint
                    )
                    kept = got if kept is None else int(kept)  # a store that does not count stored all
                    done += kept
                    dropped += got - kept
                    batches += 1
                    bar.update(len(out["chunk_id"]))
        finally:
            close = getattr(batches_out, "close", None)
            if close is not None:  # a crash mid-run: stop the pipeline now, releasing its actors
                close()
    return RayEmbedReport(done, batches, actors, time.perf_counter() - t0, dropped)
