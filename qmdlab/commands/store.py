"""Index verbs: ``collection``, ``context``, ``update``, ``search``, ``get``, ``multi-get``, ``ls``, ``status``,
``cleanup``, and (from :mod:`qmdlab.commands.collections`) qmd's further collection verbs, ``trust`` and ``init``. Documents and context targets may be named as ``qmd://collection/path`` URIs too.

Thin wrappers over :class:`qmdlab.store.Index` and :mod:`qmdlab.search`; the index comes from
the global ``--index`` option (``ctx.obj["index"]``).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from qmdlab.commands.common import (
    collections_option,
    json_option,
    limit_option,
    line_numbers_option,
    open_index,
    print_report,
    progress_option,
    query_argument,
    run_watch,
    watch_options,
)
from qmdlab.commands.result_options import ResultOptions, pick_format, result_options
from qmdlab.display import printable, printable_text
from qmdlab.errors import QmdlabError, StoreError
from qmdlab.output import build_rows
from qmdlab.pipeline.config import BM25_MODES, PipelineConfig
from qmdlab.store.chunkers import CHUNKERS
from qmdlab.store.refs import line_window, resolve_ref, split_address, strip_scheme


def pending_embeddings(idx) -> int:
    """Chunks that no embedder has a vector for yet (what ``qmdlab embed`` would embed first)."""
    with idx._lock:
        row = idx.conn.execute(
            "SELECT COUNT(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM vectors v WHERE v.chunk_id = c.id)"
        ).fetchone()
    return int(row[0]) if row else 0


def _current_fingerprint() -> tuple[str, str] | None:
    """``(fingerprint, model id)`` of the embedder the index's preset and models name (no model is
    loaded: the fingerprint is its reference, template and settings); ``None`` when it cannot be
    built here (its extra not installed, the embed role off, a served model not approved)."""
    try:
        from qmdlab.models import load_models

        emb = load_models(None, expand="none", rerank="none").embedder
    except Exception:  # status reports the index whatever the models' state
        return None
    if emb is None:
        return None
    from qmdlab.store.vectors import document_fingerprint

    return document_fingerprint(emb.fingerprint), emb.model_id  # a query adapter searches its base's vectors


def embed_hint(n: int) -> str:
    """The next step after an update or in ``status`` when chunks lack vectors.

    >>> embed_hint(3)
    '3 chunks have no vectors yet: run `qmdlab embed` for vector search (vsearch, query)'
    """
    return f"{n} chunks have no vectors yet: run `qmdlab embed` for vector search (vsearch, query)"


def register(group: click.Group) -> None:
    """Add the index verbs to the ``qmdlab`` group."""

    from qmdlab.commands import collections as more

    @group.group("collection", cls=more.AliasGroup, aliases=more.COLLECTION_ALIASES)
    def collection() -> None:
        """Manage collections (named folders of markdown)."""

    more.register_collection_verbs(collection)
    more.register(group)

    @collection.command("add")
    @click.argument("path", type=click.Path(file_okay=False, path_type=Path))
    @click.option("--name", default=None, help="Collection name (default: the folder's name).")
    @click.option(
        "--mask", "--glob", "mask", default="**/*.md", show_default=True, help="Glob(s), comma-separated union."
    )
    @click.option("--ignore", multiple=True, help="Glob of paths to leave out (repeatable).")
    @click.option("--no-update", is_flag=True, help="Only register; index later with `qmdlab update`.")
    @click.option(
        "--chunker",
        type=click.Choice(CHUNKERS),
        default=None,
        help="Set the index's chunking strategy (it applies to every collection; see `update --chunker`).",
    )
    @click.pass_context
    def collection_add(
        ctx, path: Path, name: str | None, mask: str, ignore: tuple[str, ...], no_update: bool, chunker: str | None
    ) -> None:
        """Register PATH as a collection and index it."""
        from qmdlab.store import trust

        idx = open_index(ctx)
        coll = idx.add_collection(name or path.expanduser().resolve().name, path, mask, ignore)
        click.echo(f"added collection {coll.name}: {printable(str(coll.root))} ({printable(coll.mask)})")
        outside = trust.outside_root(idx.dir, coll)
        if outside is not None:  # a root outside the project, typed by the user: approved for this config
            trust.approve_roots(idx.config_path, [(coll, outside)])
            click.echo(f"  its root is outside the project {printable(str(idx.dir.parent))}: approved for this index")
        if chunker:
            rep = idx.set_chunker(chunker, progress=True)
            if rep.changed:
                click.echo(rep.summary())
        if not no_update:
            print_report(idx.update([coll.name], progress=True))

    @collection.command("list")
    @click.pass_context
    def collection_list(ctx) -> None:
        """List collections with their document counts."""
        idx = open_index(ctx)
        st = idx.status()
        excluded = {c.name for c in idx.collections() if not c.include}
        if not st["collections"]:
            click.echo("No collections; add one with `qmdlab collection add PATH --name NAME`.")
        for c in st["collections"]:
            click.echo(
                f"{c['name']}\t{c['documents']} docs\t{printable(c['root'])}\t{printable(c['mask'])}"
                + ("\texcluded" if c["name"] in excluded else "")
            )

    @collection.command("remove")
    @click.argument("name")
    @click.pass_context
    def collection_remove(ctx, name: str) -> None:
        """Forget a collection (its files are not touched)."""
        open_index(ctx).remove_collection(name)
        click.echo(f"removed collection {name} (files untouched)")

    @collection.command("rename")
    @click.argument("old")
    @click.argument("new")
    @click.pass_context
    def collection_rename(ctx, old: str, new: str) -> None:
        """Rename a collection (docnos change accordingly)."""
        open_index(ctx).rename_collection(old, new)
        click.echo(f"renamed collection {old} -> {new}")

    @group.group("context", cls=more.AliasGroup, aliases={"remove": "rm"})
    def context() -> None:
        """Free-text context attached to a collection, a path prefix or '/'."""

    @context.command("add")
    @click.argument("target")
    @click.argument("text", required=False)
    @click.pass_context
    def context_add(ctx, target: str, text: str | None) -> None:
        """Attach TEXT to TARGET: a collection, collection/prefix, qmd://collection/prefix, / (every
        collection) or a folder on disk inside a collection. With one argument, TEXT is attached to
        the current folder (as in qmd)."""
        from qmdlab.store.listing import context_target

        if text is None:
            target, text = ".", target
        idx = open_index(ctx)
        target = context_target(target, idx.collections())
        idx.add_context(target, text)
        click.echo(f"context set on {printable(target)}")

    @context.command("list")
    @click.pass_context
    def context_list(ctx) -> None:
        """List contexts."""
        ctxs = open_index(ctx).contexts()
        if not ctxs:
            click.echo("No contexts.")
        for c in ctxs:
            click.echo(f"{printable(c.target)}\t{printable(c.text)}")

    @context.command("rm")
    @click.argument("target")
    @click.pass_context
    def context_rm(ctx, target: str) -> None:
        """Remove the context on TARGET."""
        open_index(ctx).remove_context(target)
        click.echo(f"context removed from {target}")

    @group.command("update")
    @collections_option(help="Only these collections.")
    @progress_option()
    @click.option(
        "--chunker",
        type=click.Choice(CHUNKERS),
        default=None,
        help="Chunking strategy of the whole index (kept until changed; default breakpoints). "
        "A change re-chunks stored files; `qmdlab embed` then re-embeds the changed chunks.",
    )
    @click.option(
        "--allow-vanish",
        is_flag=True,
        help="Let all (or most) of a collection's files vanish at once; without it such an update "
        "is refused (an unmounted or emptied folder).",
    )
    @click.option(
        "--pull", is_flag=True, help="First run `git pull --ff-only` in each collection that is a git checkout."
    )
    @watch_options
    @click.pass_context
    def update(
        ctx,
        collections: tuple[str, ...],
        progress: bool,
        chunker: str | None,
        allow_vanish: bool,
        pull: bool,
        watch: bool,
        embed: bool,
        debounce: float,
        poll: bool,
    ) -> None:
        """Re-scan collections: new, changed, moved and vanished files. A collection's approved update
        command (`qmdlab collection update-cmd`, `qmdlab trust`) runs first. With --watch, keep
        re-scanning as files change until interrupted (Ctrl-C)."""
        from qmdlab.commands.collections import git_pull, run_update_commands

        if embed and not watch:
            raise click.UsageError("--embed goes with --watch (without it, run `qmdlab embed` after `update`)")
        idx = open_index(ctx)
        if pull:
            git_pull(idx, list(collections) or None)
        run_update_commands(idx, list(collections) or None)
        rep = idx.set_chunker(chunker, progress=progress) if chunker else idx.ensure_chunker(progress=progress)
        if rep.changed:
            click.echo(rep.summary())
        if watch:
            run_watch(
                ctx,
                idx,
                list(collections) or None,
                embed=embed,
                debounce=debounce,
                poll=poll,
                allow_vanish=allow_vanish,
            )
            return
        print_report(idx.update(list(collections) or None, progress=progress, allow_vanish=allow_vanish))
        pending = pending_embeddings(idx)
        if pending:
            click.echo(embed_hint(pending))

    @group.command("search")
    @query_argument()
    @limit_option()
    @collections_option()
    @click.option("--tag", "tags", multiple=True, help="Require a front-matter tag (repeatable; all required).")
    @click.option("--since", default=None, help="Documents dated on/after YYYY-MM-DD.")
    @click.option("--before", default=None, help="Documents dated before YYYY-MM-DD.")
    @click.option(
        "--mode",
        type=click.Choice(BM25_MODES),
        default="or",
        show_default=True,
        help="and = qmd's all-terms prefix query; or = any term, ranked; msm = or, but a document "
        "must match at least --min-match of the terms.",
    )
    @click.option(
        "--min-match",
        "min_match",
        type=float,
        default=PipelineConfig().bm25_min_match,
        show_default=True,
        help="--mode msm only: terms a document must match, a count (>= 1) or a share of the "
        "terms (below 1, rounded down, at least one); the pipeline's bm25_min_match.",
    )
    @result_options()
    @click.option("--min-score", default=0.0, show_default=True, help="Drop results below this normalised score.")
    @click.pass_context
    def search(
        ctx,
        query,
        limit,
        collections,
        tags,
        since,
        before,
        mode,
        min_match,
        result: ResultOptions,
        min_score,
    ) -> None:
        """BM25 full-text search."""
        from qmdlab.search import SearchFilters, bm25_search

        if min_match < 0:
            raise click.BadParameter(
                f"{min_match!r}: must be >= 0 (a count >= 1 or a share below 1)", param_hint="--min-match"
            )
        idx = open_index(ctx)
        hits = bm25_search(
            idx,
            query,
            limit=result.limit(limit),
            mode=mode,
            min_match=min_match,
            collections=list(collections) or None,
            filters=SearchFilters(tuple(tags), since, before),
        )
        hits = [h for h in hits if h.score >= min_score]
        click.echo(result.render(idx, build_rows(idx, hits, query)))

    @group.command("get")
    @click.argument("ref")
    @line_numbers_option()
    @click.option(
        "--from",
        "from_line",
        type=click.IntRange(min=1),
        default=None,
        help="First line to print (1-based; overrides a :from suffix).",
    )
    @click.option(
        "-l",
        "--max-lines",
        "max_lines",
        type=click.IntRange(min=0),
        default=None,
        help="Print at most this many lines (overrides a :count suffix).",
    )
    @click.option("--outline", is_flag=True, help="Print the heading tree with each section's #address instead.")
    @click.option(
        "--no-header",
        "no_header",
        is_flag=True,
        help="Print the lines only, without the `qmd://` URI, #docid and `Folder Context:` header.",
    )
    @click.pass_context
    def get(
        ctx,
        ref: str,
        line_numbers: bool,
        from_line: int | None,
        max_lines: int | None,
        outline: bool,
        no_header: bool,
    ) -> None:
        """Print a document: <docno|path|#docid>[:from[:count]] (1-based from), or one section of
        it: <docno|path|#docid>#<address> (addresses as printed by --outline, e.g. install/linux).
        As qmd's ``get``, the lines follow a header: ``qmd://collection/path  #docid``, the
        document's ``Folder Context:`` when it has one, then ``---`` and a blank line."""
        idx = open_index(ctx)

        def header(doc) -> None:
            if no_header:
                return
            click.echo(f"qmd://{printable(doc.docno)}  #{doc.docid}")
            context = idx.context_text(doc.docno)
            if context:
                click.echo(f"Folder Context: {printable_text(context)}")
            click.echo("---\n")

        ref = strip_scheme(ref)

        def lookup(name: str):
            if not name:  # `:3`, or `:3#section`: the reference names no document
                base, addr = split_address(ref)
                typed = base if addr is not None else ref
                raise QmdlabError(f"{typed!r}: expected <path|#docid>[:from[:count]]")
            return idx.get(name)

        doc, parsed = resolve_ref(lookup, ref, StoreError)
        address = parsed.address
        if outline or address is not None:
            from qmdlab.store.outline import DocumentOutline

            out = DocumentOutline.parse(doc.body, title=doc.title)
            if outline:
                click.echo(f"{printable(doc.docno)} (#{doc.docid}): {printable(str(doc.title))}")
                click.echo(printable(out.tree_text(), keep="\n"))
                return
            assert address is not None  # --outline alone returned above
            try:
                sec = out.section(address)
            except QmdlabError as err:
                raise QmdlabError(f"{doc.docno}: {err}; list them with `qmdlab get {doc.docno} --outline`") from err
            text = out.section_text(sec.address)
            header(doc)
            for no, line in enumerate(text.split("\n"), sec.line_start):
                click.echo(f"{no:>5}: {line}" if line_numbers else line)
            return
        lines = doc.body.split("\n")
        if doc.body.endswith("\n"):
            lines = lines[:-1]
        start = from_line if from_line is not None else parsed.start
        count = max_lines if max_lines is not None else parsed.n_lines
        try:
            first, last = line_window(len(lines), start, count)
        except ValueError as err:
            raise QmdlabError(f"{ref}: {err} of {doc.docno}") from None
        header(doc)
        for no in range(first, last + 1):
            text = lines[no - 1]
            click.echo(f"{no:>5}: {text}" if line_numbers else text)

    @group.command("multi-get")
    @click.argument("pattern")
    @click.option("--max-bytes", default=10240, show_default=True, help="Skip documents larger than this.")
    @click.option(
        "-l", "--max-lines", "max_lines", type=int, default=None, help="Show at most this many lines of each document."
    )
    @line_numbers_option()
    @click.option(
        "--format",
        "fmt",
        type=click.Choice(["cli", "json", "csv", "md", "xml", "files"]),
        default=None,
        help="Output format [default: cli].",
    )
    @click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
    @click.option("--csv", "as_csv", is_flag=True, help="Same as --format csv.")
    @click.option("--md", "as_md", is_flag=True, help="Same as --format md.")
    @click.option("--xml", "as_xml", is_flag=True, help="Same as --format xml.")
    @click.option("--files", "as_files", is_flag=True, help="Same as --format files.")
    @click.pass_context
    def multi_get(
        ctx, pattern: str, max_bytes: int, max_lines, line_numbers, fmt, as_json, as_csv, as_md, as_xml, as_files
    ) -> None:
        """Print several documents: a glob over docnos/paths (``*`` within a folder, ``**`` across),
        or a comma-separated list of refs (paths, #docids, qmd:// URIs)."""
        from qmdlab.store.multiget import collect, format_documents

        fmt = pick_format(fmt, as_json=as_json, as_csv=as_csv, as_md=as_md, as_xml=as_xml, as_files=as_files)
        found = collect(open_index(ctx), pattern, max_bytes=max_bytes, max_lines=max_lines)
        for miss in found.misses:
            click.echo(miss, err=True)
        if found.failed:  # qmd exits 1 when a glob or a single docid finds nothing
            ctx.exit(1)
        if found.items or fmt in ("json", "csv", "xml"):
            click.echo(format_documents(found.items, fmt, line_numbers=line_numbers, max_bytes=max_bytes))

    @group.command("ls")
    @click.argument("collection", required=False, metavar="[COLLECTION[/PREFIX]]")
    @click.option("--all", "all_docs", is_flag=True, help="With no COLLECTION: list every document, not the summary.")
    @click.pass_context
    def ls(ctx, collection: str | None, all_docs: bool) -> None:
        """List the collections (as qmd: one ``qmd://NAME/  (N files)`` line each), or the documents
        (docno, #docid, title) of a collection, under a path prefix (``notes/2024``,
        ``qmd://notes/2024``) or, with ``--all``, of every collection."""
        from qmdlab.store.listing import split_ls_target

        idx = open_index(ctx)
        if not collection and not all_docs:
            colls = idx.collections()
            if not colls:
                click.echo("No collections found. Run 'qmdlab collection add .' to index files.")
                return
            counts = dict(idx.documents()["collection"].value_counts().iter_rows())
            click.echo("Collections:\n")
            for c in colls:
                click.echo(f"  qmd://{printable(c.name)}/  ({counts.get(c.name, 0)} files)")
            return
        name, prefix = split_ls_target(collection, [c.name for c in idx.collections()]) if collection else (None, "")
        docs = idx.documents([name] if name else None)
        if prefix:
            docs = docs.filter(docs["path"].str.starts_with(prefix))
        if docs.height == 0:
            click.echo("No documents.")
        for docno, docid, title in zip(docs["docno"], docs["docid"], docs["title"]):
            click.echo(f"{printable(docno)}\t#{docid}\t{printable(title)}")  # format characters escaped

    @group.command("cleanup")
    @click.option("--cache", is_flag=True, help="Also clear the LLM cache (expansions, rerank scores).")
    @click.option("--no-vacuum", is_flag=True, help="Skip VACUUM (the file keeps its size).")
    @click.option("--dry-run", is_flag=True, help="Report what would be removed; remove nothing.")
    @click.pass_context
    def cleanup_cmd(ctx, cache: bool, no_vacuum: bool, dry_run: bool) -> None:
        """Drop inactive documents and orphaned content, chunks and vectors, then VACUUM; report what was freed."""
        from qmdlab.store.cleanup import cleanup

        click.echo(cleanup(open_index(ctx), cache=cache, vacuum=not no_vacuum, dry_run=dry_run).summary())

    @group.command("status")
    @json_option()
    @click.pass_context
    def status(ctx, as_json: bool) -> None:
        """Index location, collections, document/chunk/vector counts (after an integrity check
        of the database: a damaged one is reported, never called healthy)."""
        idx = open_index(ctx)
        st = idx.status(integrity=True)
        excluded = {c.name for c in idx.collections() if not c.include}
        st["pending_embeddings"] = pending_embeddings(idx)
        if as_json:
            click.echo(json.dumps(st, indent=2))
            return
        click.echo(f"index: {printable(st['index'])}")
        click.echo(
            f"documents: {st['documents']} active, {st['inactive_documents']} inactive; chunks: {st['chunks']}"
            + (f" ({st['chunker']})" if st.get("chunker") else "")
        )
        for c in st["collections"]:
            click.echo(
                f"  {c['name']}: {c['documents']} docs  {printable(c['root'])}  ({printable(c['mask'])})"
                + ("  excluded from unscoped queries" if c["name"] in excluded else "")
            )
        current = _current_fingerprint()
        for fp, v in st["vectors"].items():
            mark = ""
            if current is not None:
                mark = "  (the current embedder)" if fp == current[0] else "  (another embedder: not searched)"
            click.echo(f"vectors {fp}: {v['count']} x {v['dim']}-d{mark}")
            if v.get("mismatched") or v.get("unverified"):
                click.echo(
                    f"  {v.get('mismatched', 0)} vector(s) do not match their chunk's text, "
                    f"{v.get('unverified', 0)} unverified (stored by an older qmdlab); `qmdlab embed` "
                    "replaces the first, `qmdlab embed -f` re-computes all"
                )
            if v.get("invalid"):
                click.echo(
                    f"  {v['invalid']} vector(s) hold NaN or infinite values (left out of vector search); "
                    "`qmdlab embed -f` re-computes them"
                )
        if current is not None and st["vectors"] and current[0] not in st["vectors"]:
            click.echo(
                f"  the current embedder ({current[1]}) has no vectors here: `qmdlab embed` embeds every chunk "
                "with it (resumable); the vectors above stay until `qmdlab cleanup`"
            )
        if not st["vectors"]:
            click.echo("vectors: none (run `qmdlab embed`)")
        if st["pending_embeddings"]:
            click.echo(f"pending: {embed_hint(st['pending_embeddings'])}")
        click.echo(f"llm cache entries: {st['llm_cache_entries']}")
        exp = st.get("doc_expansions")
        if exp:
            click.echo(
                f"doc expansions {exp['generator']}: {exp['kept']} of {exp['generated']} generated queries kept, "
                f"in {exp['documents']} documents (searched with bm25_weight_doc_queries > 0)"
            )
        from qmdlab.mcp_server.daemon import read_pid

        running = read_pid((ctx.obj or {}).get("index"))
        if running is not None:
            click.echo(
                f"MCP: running (PID {running['pid']}, http://{running['host']}:{running['port']}/mcp; "
                "`qmdlab mcp --stop` stops it)"
            )
