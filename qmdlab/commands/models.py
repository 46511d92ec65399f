"""Model verbs: ``models``, ``pull``, ``embed``, ``vsearch``.

``pull`` is idempotent: already-assembled packaged models are checked by their stamp (no
re-hashing) and ``hf:`` models already downloaded are used as they are; ``pull --refresh`` asks
the server whether an ``hf:`` model changed (a conditional GET) and downloads it again if so.
``embed`` stores each batch in its own transaction, so an interrupted run — Ctrl-C, a crash, or
``--timeout`` — keeps finished batches and the next run embeds only what is missing for the
current embedder fingerprint; ``--max-docs-per-batch`` and ``--max-batch-mb`` cap a batch
(:func:`qmdlab.models.batching.plan_batches`).
"""

from __future__ import annotations

import time

import click

from qmdlab.commands.common import (
    collections_option,
    limit_option,
    llama_threads_option,
    progress_option,
    query_argument,
)
from qmdlab.commands.result_options import ResultOptions, result_options
from qmdlab.errors import ModelError, QmdlabError, StoreError
from qmdlab.role_options import model_options
from qmdlab.scale.cli_options import ray_options, ray_options_from


def _human(n: float) -> str:
    """Bytes as a short human-readable size.

    >>> _human(0), _human(512), _human(46226496), _human(491400064)
    ('-', '512 B', '44.1 MiB', '468.6 MiB')
    """
    if not n:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n:.1f} GiB"


def _open_index(ctx: click.Context):
    from qmdlab.store import Index
    from qmdlab.store.index import creates_index

    obj = ctx.find_root().ensure_object(dict)
    if obj.get("_store_index") is None:  # a reading verb (vsearch) never creates an index
        obj["_store_index"] = Index.open(obj.get("index"), create=creates_index(ctx))
        ctx.call_on_close(obj["_store_index"].close)
    return obj["_store_index"]


def _held_models() -> dict[str, str]:
    """``role → reference`` of the served models the running command's index names that wait for
    ``qmdlab trust`` (:func:`qmdlab.store.trust.pending_models`)."""
    from qmdlab.models.registry import _index_config
    from qmdlab.store import trust

    found = _index_config()
    return {} if found is None else dict(trust.pending_models(*found))


def _embedder(preset, roles, threads=None, batch_size=32):
    from qmdlab.models import load_models

    emb = load_models(
        preset, embed=roles.get("embed"), expand="none", rerank="none", n_threads=threads, batch_size=batch_size
    ).embedder
    if emb is None:
        raise ModelError("the embed role is disabled ('none'); pick an embedder with --embed-model or --preset")
    return emb


def _licence(ref: str) -> str:
    """The licence a packaged model comes under when it is not a permissive one (EmbeddingGemma's
    Gemma Terms of Use), shown where the model is pulled as qmd shows it; ``""`` otherwise."""
    from qmdlab.models import packaged

    if not ref.startswith("pkg:"):
        return ""
    model = packaged.PACKAGED.get(ref[4:])
    return model.license if model is not None else ""


def _dropped_note(dropped: int) -> str:
    """``embed``'s words for vectors computed but not stored (their chunks left the index meanwhile).

    >>> _dropped_note(0), _dropped_note(150)
    ('', '; 150 computed vector(s) not stored: their chunks were removed meanwhile (an update or cleanup ran)')
    """
    if not dropped:
        return ""
    return f"; {dropped} computed vector(s) not stored: their chunks were removed meanwhile (an update or cleanup ran)"


def parse_timeout(value: str | None) -> float | None:
    """``embed --timeout`` in seconds: a bare number is minutes, as in qmd; ``90s``, ``5m`` and
    ``2h`` name their unit; ``0`` (or nothing) is no limit.

    >>> parse_timeout("30"), parse_timeout("90s"), parse_timeout("1.5h"), parse_timeout("0"), parse_timeout(None)
    (1800.0, 90.0, 5400.0, None, None)
    >>> parse_timeout("soon")
    Traceback (most recent call last):
    ...
    click.exceptions.BadParameter: 'soon': give minutes (30), or a number with s, m or h (90s, 2h); 0 = no limit
    """
    if value is None:
        return None
    text = value.strip().lower()
    unit = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(text[-1:], None)
    number = text[:-1] if unit is not None else text
    try:
        amount = float(number)
    except ValueError:
        amount = -1.0
    if amount < 0 or amount != amount:
        raise click.BadParameter(
            f"{value!r}: give minutes (30), or a number with s, m or h (90s, 2h); 0 = no limit", param_hint="--timeout"
        )
    seconds = amount * (unit if unit is not None else 60.0)
    return seconds or None


def register(group: click.Group) -> None:
    """Add the model verbs to the ``qmdlab`` group."""

    @group.command("models")
    @model_options()
    def models_cmd(preset, roles) -> None:
        """List each role's model: reference, file, size and whether it is ready."""
        from qmdlab.display import printable
        from qmdlab.models.registry import ref_status, resolve_refs

        name, refs = resolve_refs(preset, roles, check=False)  # listed, not used: a served one unapproved is marked
        held = _held_models()
        click.echo(f"preset: {name}")
        for role, ref in refs.items():
            if ref is None:
                click.echo(f"{role:<7} none (stage disabled)")
                continue
            st = ref_status(str(ref))
            state = "ready" if st["ready"] else f"missing (run `qmdlab pull --preset {name}`)"
            if held.get(role) == ref:
                state = "not approved: `qmdlab trust` (nothing is sent to it before)"
            path = printable(str(st["path"])) if st["path"] else "-"
            click.echo(f"{role:<7} {printable(str(ref))}\n        file: {path}  size: {_human(st['size'])}  {state}")

    @group.command("pull")
    @model_options()
    @click.option(
        "--refresh",
        is_flag=True,
        help="Check downloaded hf: models for a newer version (ETag) and fetch it if there is one.",
    )
    @click.option(
        "--progress/--no-progress",
        default=True,
        help="Show a download progress bar (qmd's --progress; on by default here).",
    )
    def pull(preset, roles, refresh, progress) -> None:
        """Download / assemble / convert the models of a preset (idempotent; files present are kept
        unless --refresh finds a newer one)."""
        from qmdlab.display import printable
        from qmdlab.models._http import is_remote
        from qmdlab.models.registry import resolve_path, resolve_refs

        name, refs = resolve_refs(preset, roles, check=False)  # a served model is not called here
        done: dict[str, str] = {}
        for role, ref in refs.items():
            if ref is None or str(ref).startswith("fake:"):
                click.echo(f"{role:<7} {printable(str(ref or 'none'))}: nothing to fetch")
                continue
            if is_remote(ref):  # its server holds the weights; the other roles are still fetched
                click.echo(f"{role:<7} {printable(str(ref))}: served over HTTP, nothing to fetch")
                continue
            ref = str(ref)
            if ref not in done:
                t0 = time.perf_counter()
                path = resolve_path(ref, refresh=refresh, progress=progress)
                done[ref] = f"{printable(str(path))} ({_human(path.stat().st_size)}, {time.perf_counter() - t0:.1f} s)"
            click.echo(f"{role:<7} {printable(ref)}: {done[ref]}")
            licence = _licence(ref)
            if licence:
                click.echo(f"        licence: {licence}; using the model means accepting it")
        click.echo(f"preset {name}: ready")

    @group.command("embed")
    @click.option("-f", "--force", is_flag=True, help="Re-embed every chunk, not only those missing vectors.")
    @collections_option(help="Only this collection (repeatable).")
    @click.option(
        "--batch-size",
        default=32,
        show_default=True,
        type=click.IntRange(min=1),
        help="Chunks per model call and per transaction.",
    )
    @click.option(
        "--max-docs-per-batch",
        type=click.IntRange(min=1),
        default=None,
        help="Also cap a batch at the chunks of this many documents.",
    )
    @click.option(
        "--max-batch-mb",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Also cap a batch at this many MB of chunk text (a larger chunk is a batch of its own).",
    )
    @click.option(
        "--timeout",
        default=None,
        metavar="MINUTES",
        help="Stop cleanly after this many minutes, as qmd's --timeout (between batches; 0 = no limit; "
        "90s or 2h for seconds or hours); run again to continue [default: no limit].",
    )
    @llama_threads_option()
    @model_options("embed")
    @progress_option(help="Show a progress bar.")
    @ray_options
    @click.pass_context
    def embed(
        ctx,
        force,
        collections,
        batch_size,
        max_docs_per_batch,
        max_batch_mb,
        timeout,
        threads,
        preset,
        roles,
        progress,
        ray_address,
        ray_actors,
        ray_cpus,
        ray_gpus,
    ) -> None:
        """Embed chunks that have no vector for the current embedder (resumable).
        With --ray, Ray actors embed and this process stores the vectors (same fingerprint rules)."""

        from tqdm import tqdm

        from qmdlab.models.batching import Deadline, EmbedCount, embed_batches, plan_batches

        ray_opts = ray_options_from(ray_address, ray_actors, ray_cpus, ray_gpus)
        if ray_opts is not None and (timeout is not None or max_docs_per_batch or max_batch_mb):
            raise click.UsageError(
                "--timeout, --max-docs-per-batch and --max-batch-mb apply to local embedding; drop them or --ray"
            )
        timeout_given, timeout = timeout, parse_timeout(timeout)
        deadline = Deadline(timeout)
        idx = _open_index(ctx)
        emb = _embedder(preset, roles, threads, batch_size)
        fp = emb.fingerprint
        colls = list(collections) or None
        if force:
            docs = idx.documents(colls).select("docno", "title")
            todo = (
                idx.chunks(docs["docno"].to_list())
                .join(docs, on="docno", how="left")
                .unique("chunk_id", keep="first", maintain_order=True)
                .select("chunk_id", "docno", "title", "text")
            )
        else:
            todo = idx.chunks_needing_vectors(fp, colls)
        n = todo.height
        if n == 0:
            click.echo(f"all chunks already embedded ({fp})")
            return
        from qmdlab.store.vectors import document_fingerprint

        if force and document_fingerprint(fp) in idx.vector_fingerprints():
            # vectors of another dimension under the same fingerprint (a served model that changed
            # its dimension under the same name) are replaced, not refused
            idx.drop_other_dimensions(fp, emb.dim)
        t0 = time.perf_counter()
        if ray_opts is not None:
            from qmdlab.models.registry import resolve_refs
            from qmdlab.scale.ray_embed import EmbedderSpec, embed_with_ray

            spec = EmbedderSpec(str(resolve_refs(preset, roles)[1]["embed"]), threads, batch_size)
            rep = embed_with_ray(idx, todo, spec, fp, ray_opts, progress=progress)
            click.echo(
                f"embedded {rep.chunks} chunks with {emb.model_id} ({fp}) on Ray, {rep.actors} actors, "
                f"{rep.batches} write batches, in {rep.seconds:.1f} s ({1000 * rep.seconds / n:.1f} ms/chunk)"
                + _dropped_note(rep.dropped)
            )
            return
        batches = plan_batches(
            todo["docno"].to_list(),
            todo["text"].to_list(),
            batch_size=batch_size,
            max_docs=max_docs_per_batch,
            max_bytes=None if max_batch_mb is None else int(max_batch_mb * 1024 * 1024),
        )
        # delay: nothing is drawn until the first batch is stored after 0.5 s, so a model that fails
        # to load leaves only its one-line error on stderr
        bar = tqdm(total=n, unit="chunk", desc="embed", disable=not progress, delay=0.5)
        count = EmbedCount()  # chunks embedded; vectors stored (a chunk removed meanwhile gets none)
        try:
            embed_batches(idx, emb, todo, batches, count, deadline=deadline, on_batch=bar.update)
        except Exception as err:
            stored = count.stored
            if stored == 0:
                raise
            # earlier batches are committed: "nothing was changed" would be false
            from qmdlab.store.failures import after_committed, as_user_error

            mapped = as_user_error(err, idx)
            if mapped is None:
                raise
            raise StoreError(after_committed(str(mapped), f"{stored} vector(s) stored by this run")) from err
        finally:
            bar.close()
        done, stored = count.done, count.stored
        dt = time.perf_counter() - t0
        if done < n:
            click.echo(
                f"stopped after {dt:.1f} s (--timeout {timeout_given}): embedded {stored} of {n} chunks with "
                f"{emb.model_id} ({fp}); run `qmdlab embed` again to embed the other {n - done}"
                + _dropped_note(done - stored)
            )
            return
        click.echo(
            f"embedded {stored} chunks with {emb.model_id} ({emb.dim}-d, {fp}) in {dt:.1f} s "
            f"({1000 * dt / n:.1f} ms/chunk, {len(batches)} batches)" + _dropped_note(done - stored)
        )

    @group.command("vsearch")
    @query_argument()
    @limit_option()
    @collections_option()
    @click.option("--min-score", default=0.0, show_default=True, help="Drop results below this cosine similarity.")
    @click.option(
        "--intent",
        default=None,
        help="What the query means (qmd's --intent): its words also steer which line of each hit is the snippet.",
    )
    @result_options()
    @model_options("embed")
    @click.option(
        "--ann",
        is_flag=True,
        help="Approximate search through an HNSW graph kept next to the index "
        "(built on first use, rebuilt when vectors change; needs `pip install 'qmdlab[ann]'`).",
    )
    @click.option(
        "--ann-ef",
        type=click.IntRange(min=1),
        default=None,
        help="With --ann: the search's candidate list (default 512; higher = better recall, slower).",
    )
    @click.pass_context
    def vsearch(
        ctx,
        query,
        limit,
        collections,
        min_score,
        intent,
        result: ResultOptions,
        preset,
        roles,
        ann,
        ann_ef,
    ) -> None:
        """Vector search: the query's embedding against the chunk vectors (run `qmdlab embed` first)."""
        from qmdlab.output import build_rows
        from qmdlab.search.vector import vector_search

        if ann_ef is not None and not ann:
            raise QmdlabError("--ann-ef needs --ann (it sets the approximate search's candidate list)")
        idx = _open_index(ctx)
        emb = _embedder(preset, roles)
        if not query.strip():
            raise QmdlabError("vsearch needs a non-empty QUERY")
        ann_cfg = None
        if ann:
            from qmdlab.pipeline.config import PipelineConfig

            ann_cfg = PipelineConfig(vector_index="hnsw", **({"ann_ef_search": ann_ef} if ann_ef else {})).ann()
        query = query.encode("utf-8", "ignore").decode("utf-8")  # bytes that were not UTF-8 are dropped
        from qmdlab.search.lexical import check_query_length

        check_query_length(query, "vsearch query")
        hits = vector_search(
            idx,
            emb.embed_query(query),
            fingerprint=emb.fingerprint,
            limit=result.limit(limit),
            collections=list(collections) or None,
            ann=ann_cfg,
        )
        hits = [h for h in hits if h.score >= min_score]
        click.echo(result.render(idx, build_rows(idx, hits, f"{query} {intent}" if intent else query)))
