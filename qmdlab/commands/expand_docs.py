"""``qmdlab expand-docs``: document expansion at index time (doc2query) — a thin wrapper over
:func:`qmdlab.pipeline.doc_expand.expand_documents`.

Resumable like ``qmdlab embed``: samples are stored per batch, and a second run generates only what
is missing for the generator (its fingerprint: the model file and the sampling settings).
"""

from __future__ import annotations

import click

from qmdlab.commands.common import collections_option, llama_threads_option, progress_option
from qmdlab.pipeline.doc_expand import DEFAULT_PER_CHUNK, DEFAULT_TOP_K


def register(group: click.Group) -> None:
    """Add ``expand-docs`` to the ``qmdlab`` group."""

    @group.command("expand-docs")
    @click.option(
        "--generator",
        "generator_ref",
        metavar="MODEL",
        default=None,
        help="The doc -> query model: a GGUF (pkg:NAME, hf:ORG/REPO/FILE.gguf, a .gguf path) or a Hugging Face "
        "model folder (what `qmdlab train doc2query` writes).",
    )
    @click.option(
        "-n",
        "--per-chunk",
        default=DEFAULT_PER_CHUNK,
        show_default=True,
        type=click.IntRange(min=1),
        help="Queries generated per chunk (samples already stored count).",
    )
    @click.option(
        "--top-k",
        default=DEFAULT_TOP_K,
        show_default=True,
        type=click.IntRange(min=1),
        help="Round-trip filter depth: a query is kept when BM25 (without the doc-queries column) ranks its "
        "source document within the top K.",
    )
    @collections_option(help="Only this collection (repeatable).")
    @click.option(
        "--temperature",
        default=0.7,
        show_default=True,
        type=click.FloatRange(min=0),
        help="Sampling temperature (0 = greedy: every sample of a chunk is the same).",
    )
    @click.option("--seed", default=0, show_default=True, type=int, help="Sampling seed.")
    @click.option(
        "--max-chunks",
        default=None,
        type=click.IntRange(min=0),
        help="Generate for at most this many chunks now (a quick try; run again for the rest).",
    )
    @click.option("--no-filter", is_flag=True, help="Keep every usable generated query (no round trip).")
    @click.option("--refilter", is_flag=True, help="Judge every stored query again (after the collection changed).")
    @click.option(
        "--clear",
        is_flag=True,
        help="Empty the doc-queries column and unset the active generator (stored queries stay).",
    )
    @llama_threads_option()
    @progress_option()
    @click.pass_context
    def expand_docs(
        ctx,
        generator_ref,
        per_chunk,
        top_k,
        collections,
        temperature,
        seed,
        max_chunks,
        no_filter,
        refilter,
        clear,
        threads,
        progress,
    ) -> None:
        """Generate search queries for each chunk, keep those that find their document again, and add
        them to the documents' BM25 doc-queries column (weighted by bm25_weight_doc_queries; never
        embedded)."""
        from tqdm import tqdm

        from qmdlab.commands.common import open_index
        from qmdlab.models.doc_query_gen import load_generator
        from qmdlab.pipeline.doc_expand import clear_doc_expansions, expand_documents

        idx = open_index(ctx)
        if clear:
            if generator_ref:
                raise click.UsageError("--clear empties the column; drop --generator (or --clear)")
            n = clear_doc_expansions(idx)
            click.echo(f"doc expansions cleared: {n} documents rewritten")
            return
        if not generator_ref:
            raise click.UsageError("give the doc -> query model with --generator MODEL (or --clear)")
        gen = load_generator(generator_ref, temperature=temperature, seed=seed, n_threads=threads)
        bar = tqdm(unit="chunk", desc="expand-docs", disable=not progress, delay=0.5)

        def on_progress(done: int, total: int) -> None:
            bar.total = total
            bar.n = done
            bar.refresh()

        try:
            rep = expand_documents(
                idx,
                gen,
                per_chunk=per_chunk,
                top_k=top_k,
                collections=list(collections) or None,
                max_chunks=max_chunks,
                filter=not no_filter,
                refilter=refilter,
                on_progress=on_progress,
            )
        finally:
            bar.close()
        click.echo(
            f"chunks {rep.chunks}, generated {rep.generated} ({rep.usable} usable queries), kept {rep.kept}, "
            f"dropped {rep.dropped}, documents rewritten {rep.documents}, {rep.seconds:.1f} s"
        )
        click.echo(f"generator {rep.generator} is active; search with bm25_weight_doc_queries > 0 to use it")
