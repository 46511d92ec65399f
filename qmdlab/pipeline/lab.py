"""The query workbench: run the whole traced pipeline (docs/design.md, pipeline) over an index.

.. code-block:: python

    import qmdlab
    trace = qmdlab.query("how do I undo a rebase?")
    trace.final, trace.notes

:class:`Lab` binds an index, a model set and a :class:`PipelineConfig`;
:meth:`Lab.query` returns a :class:`~qmdlab.pipeline.trace.Trace` of one query,
:meth:`Lab.run_queries` the concatenated trace of many. Every stage degrades
instead of failing: a missing embedder, expander or reranker, absent vectors or
a reranker exception skip that stage and add a row to ``trace.notes``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import polars as pl

from qmdlab.errors import QmdlabError
from qmdlab.pipeline.blend import blend
from qmdlab.pipeline.coded import CodedLists, Final, Fused, Names, final_table, fused_table, scores_for
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.expand import Expansion, filter_expansions, kept_lines, parse_query_document
from qmdlab.pipeline.finish import DocFlags, content_duplicates, doc_flags, finish
from qmdlab.pipeline.fuse import candidates, fuse, select_lists, selection_notes
from qmdlab.pipeline.probe import strong_signal
from qmdlab.pipeline.rerank import rerank, rerank_columns
from qmdlab.pipeline.retrieve import retrieve_columns, route
from qmdlab.pipeline.retune import code_fused, retune
from qmdlab.pipeline.select import select_chunk_columns, select_chunks
from qmdlab.pipeline.trace import SCHEMAS, Columns, Trace, as_frame, column, empty, height
from qmdlab.store import limits

_TYPED_LINE = re.compile(r"^\s*(lex|vec|hyde|intent)\s*:", re.IGNORECASE | re.MULTILINE)


def _cached(model: Any, wrapper_name: str, cache: Any) -> Any:
    """Wrap ``model`` in the models area's caching wrapper unless it already is one."""
    if model is None or cache is None or hasattr(model, "cache"):
        return model
    from qmdlab.models import cached as _c

    return getattr(_c, wrapper_name)(model, cache)


def _memo_embedder(embedder: Any) -> Any:
    """Wrap ``embedder`` in the models area's query-embedding memo unless it already is one."""
    from qmdlab.models.cached import MemoEmbedder

    if embedder is None or isinstance(embedder, MemoEmbedder):
        return embedder
    return MemoEmbedder(embedder)


class Lab:
    """An index, its models and a pipeline config; runs traced queries.

    Parameters
    ----------
    index : qmdlab.store.Index
    models : qmdlab.models.ModelSet or None
        ``(embedder, expander, reranker)``; any may be ``None``. The expander and
        reranker are wrapped in the LLM cache of ``index`` unless already cached; the
        embedder in an in-memory memo of query embeddings
        (:class:`~qmdlab.models.cached.MemoEmbedder`) unless already memoised.
    config : PipelineConfig, optional
    plan : qmdlab.pipeline.stages.StagePlan, optional
        The front end's stage choice (:func:`qmdlab.pipeline.stages.plan_stages`): every query's
        trace then starts its ``notes`` with a ``stages`` row saying which stages ran and why.
    """

    def __init__(self, index: Any, models: Any = None, config: PipelineConfig | None = None, plan: Any = None):
        self.index = index
        self.plan = plan
        embedder, expander, reranker = models if models is not None else (None, None, None)
        cache = getattr(index, "cache", None)
        self.embedder = _memo_embedder(embedder)
        self.expander = _cached(expander, "CachedExpander", cache)
        self.reranker = _cached(reranker, "CachedReranker", cache)
        self.config = config or PipelineConfig()
        have = getattr(index, "chunker", None) if self.config.chunker else None
        if isinstance(have, str) and have != self.config.chunker:
            from qmdlab.errors import ConfigError

            raise ConfigError(
                f"option 'chunker': the config asks for {self.config.chunker!r} but index "
                f"{getattr(index, 'dir', '')} is chunked with {have!r}; run `qmdlab update --chunker "
                f"{self.config.chunker}` and `qmdlab embed` on it, or drop the option"
            )

    # ------------------------------------------------------------------ one query
    def query(
        self,
        text: str,
        *,
        intent: str | None = None,
        qid: str = "q",
        searches: Sequence[tuple[str, str]] | None = None,
        collections: Sequence[str] | None = None,
        filters: Any = None,
        plan: Any = None,
        **overrides: Any,
    ) -> Trace:
        """Run the pipeline for one query.

        Parameters
        ----------
        text : str
            The query, or a qmd query document (``intent:``/``lex:``/``vec:``/``hyde:``
            lines; other lines form the plain query).
        intent : str, optional
            Disambiguating context: disables the strong-signal skip, is passed to the
            expander and adds ``intent_term_bonus`` in chunk selection.
        qid : str
            Query id of every trace row.
        searches : sequence of (type, text), optional
            Typed sub-queries given by the user; they replace the expander.
        collections, filters
            Restrict retrieval (``qmdlab.search.SearchFilters`` for filters).
        plan : qmdlab.pipeline.stages.StagePlan, optional
            This query's stage choice, instead of the lab's ``plan``.
        **overrides
            :class:`PipelineConfig` fields for this query only.
        """
        cfg = self.config.replace(**overrides)
        plan = plan if plan is not None else self.plan
        if searches is None and _TYPED_LINE.search(text):
            text, doc_intent, searches = parse_query_document(text)
            intent = intent or doc_intent
        text = text.strip()
        from qmdlab.search.lexical import check_query_length

        check_query_length(text)  # every query text is capped as keyword text is (vector ones too)
        check_query_length(intent, "intent")
        for kind, sub in searches or ():
            check_query_length(sub, f"{kind} search")
        if not text and not searches:
            if cfg.tags:
                return self._tag_listing(qid, cfg, collections, plan)
            raise QmdlabError("empty query: give query text, typed lex:/vec:/hyde: lines, or tags to list")
        run = _Run(qid)
        # 1. probe
        with run.stage("probe"):
            fts_hits, skip = self._probe(text, intent, collections, filters, cfg, run)
        # 2. expansion
        with run.stage("expand"):
            expansions = self._expand(text, intent, searches, cfg, skip, run)
        # 3. retrieval
        with run.stage("retrieve"):
            got = self._retrieve(text, expansions, qid, collections, filters, fts_hits, cfg, run)
        # The cheap stages run on the coded lists (qmdlab.pipeline.coded: the numpy functions retune
        # and a tuning study run on many queries); each table goes to the trace as plain columns, and
        # the trace builds a polars frame only for the tables a caller reads.
        # 4. fusion + candidates
        with run.stage("fuse"):
            lists, f, qids, docnos = self._fuse(got.lists, cfg, run)
            cands = candidates(f, cfg.candidate_limit)
            cand_docs = docnos.take(cands.doc)
        # 5.-6. chunk selection + rerank
        rerank_table, spans = self._select_and_rerank(cand_docs, text, intent, searches, qid, cfg, run)
        # 7.-8. blend + finish
        with run.stage("blend"):
            doc_tags = self._doc_tags(cfg)
            rr = scores_for([qid] * len(cand_docs), cand_docs, rerank_table) if cfg.rerank else None
            blended = blend(cands, rr, cfg)
            flags = doc_flags(doc_tags, docnos, cfg)
            done = finish(blended, cfg, flags)
            final = final_table(done, qids, docnos, frame=False)
            fused = fused_table(f, qids, docnos, frame=not isinstance(lists, Columns))
            self._finish_notes(done, blended, docnos, flags, cfg, run)
        with run.stage("snippets"):
            results = self._results(final, text, intent, searches, rerank_table, spans, run)
        queries = Columns({"qid": [qid], "text": [text], "intent": [intent]})
        exp_rows = Columns(
            {
                "qid": [qid] * len(expansions),
                "type": [e.type for e in expansions],
                "text": [e.text for e in expansions],
                "kept": [e.kept for e in expansions],
                "reason_dropped": [e.reason_dropped for e in expansions],
                "origin": [e.origin for e in expansions],
            }
        )
        trace = Trace(
            queries=queries,
            expansions=exp_rows,
            lists=lists,
            fused=fused,
            rerank=rerank_table,
            final=final,
            results=results,
            timings=run.timings(),
            notes=run.notes_frame(),
            config=cfg.to_dict(),
        )
        if plan is not None:
            run.first_note("stages", plan.line(trace))
            trace.notes = run.notes_frame()
        return trace

    def _fuse(
        self, lists: Columns, cfg: PipelineConfig, run: _Run | None = None
    ) -> tuple[Columns | pl.DataFrame, Fused, Names, Names]:
        """Fusion of one query's lists: ``(lists, fused arrays, qids, docnos)`` — the lists as given
        (a frame for ``fusion=learned``, whose model reads frames) and the names of the codes. Every
        retrieved list stays in the trace; what :func:`~qmdlab.pipeline.fuse.select_lists` leaves out
        of fusion (``expand_types``, the expansion gate) is noted on ``run``."""
        if cfg.fusion == "learned":
            frame = as_frame("lists", lists)
            f, qids, docnos = code_fused(fuse(frame, cfg, self._learned_docs(cfg, frame)))
            return frame, f, qids, docnos
        coded = CodedLists(lists)
        selection = select_lists(coded, cfg)
        if run is not None:
            for _, message in selection_notes(selection, coded.qids.list, cfg):
                run.note("fuse", message)
        return lists, fuse(coded, cfg, selection=selection), coded.qids, coded.docnos

    def _probe(
        self, text: str, intent: str | None, collections, filters, cfg: PipelineConfig, run: _Run
    ) -> tuple[dict[str, list], bool]:
        """The original query's BM25 hits (kept for retrieval) and the strong-signal decision: ``(hits
        by query text, skip expansion)``, with the decision noted."""
        fts_hits: dict[str, list] = {}
        if not text:
            return fts_hits, False
        from qmdlab.search import bm25_search

        hits = bm25_search(
            self.index,
            text,
            limit=max(cfg.probe_limit, cfg.list_limit),
            collections=collections,
            filters=filters,
            **cfg.lexical(),
        )
        fts_hits[text] = hits
        decision = strong_signal(
            [h.score for h in hits[: cfg.probe_limit]],
            min_score=cfg.strong_signal_min,
            min_gap=cfg.strong_signal_gap,
            intent=intent,
        )
        skip = decision.skip and cfg.strong_signal
        run.note(
            "probe",
            decision.message
            if skip or not decision.skip
            else f"strong signal (top {decision.top:.3f}, gap {decision.gap:.3f}) but the skip is off "
            "(strong_signal: false): expanding",
        )
        return fts_hits, skip

    def _retrieve(
        self,
        text: str,
        expansions,
        qid: str,
        collections,
        filters,
        fts_hits: dict[str, list],
        cfg: PipelineConfig,
        run: _Run,
    ):
        """Every route (the original query and the kept expansion lines) against the index, with the
        index's capacity notes and retrieval's own notes."""
        for msg in limits.index_notes(self.index, self.embedder if cfg.vector else None):
            run.note("capacity", msg)
        routes = route(text, kept_lines(expansions), cfg)
        got = retrieve_columns(
            self.index,
            self.embedder if cfg.vector else None,
            routes,
            cfg,
            qid=qid,
            collections=collections,
            filters=filters,
            fts_hits=fts_hits,
        )
        for stage, msg in got.notes:
            run.note(stage, msg)
        if not cfg.vector:
            run.note("retrieve", "vector search disabled")
        return got

    def _select_and_rerank(
        self, docnos: list[str], text: str, intent: str | None, searches, qid: str, cfg: PipelineConfig, run: _Run
    ) -> tuple[pl.DataFrame | Columns, dict[int, tuple[int, int]] | None]:
        """Chunk selection and rerank of the candidates — unless rerank is off or the query's time
        budget is used up (noted): ``(rerank rows, the selected chunks' line spans)``."""
        rerank_table: pl.DataFrame | Columns = Columns.empty("rerank")
        spans: dict[int, tuple[int, int]] | None = None
        budget = limits.query_budget_note(run.elapsed_ms())
        if budget is not None:
            run.note("capacity", budget[1])
        if not cfg.rerank:
            run.note("rerank", "rerank disabled: fusion order kept")
        elif budget is not None and budget[0] == "over" and docnos:
            run.note("rerank", "query time budget used up before rerank: rerank skipped, fusion order kept")
        elif docnos:
            with run.stage("select"):
                chunks = self.index.chunks(docnos)
                selected = select_chunk_columns(chunks, docnos, text or _search_text(searches), intent, cfg)
                # the snippets read these chunks' line spans instead of reading the chunks again
                spans = dict(
                    zip(
                        chunks.get_column("chunk_id").to_list(),
                        zip(chunks.get_column("line_start").to_list(), chunks.get_column("line_end").to_list()),
                    )
                )
            with run.stage("rerank"):
                rq = text or intent or _search_text(searches)
                rerank_table = self._rerank(rq, selected, qid, cfg, run)
        return rerank_table, spans

    def _finish_notes(
        self, final: Final, blended: Final, docnos: Names, flags: DocFlags | None, cfg: PipelineConfig, run: _Run
    ) -> None:
        """The notes of the finish step: the min-score fallback probe, and documents shown once
        because another has the same content."""
        if cfg.min_score_fallback > 0 and len(final.final_score) and final.final_score.max() < cfg.min_score:
            run.note(
                "finish",
                f"no result reached min_score {cfg.min_score:g}: the fallback probe at "
                f"{cfg.min_score - cfg.min_score_fallback:g} kept {len(final.final_score)} "
                f"(at most {cfg.fallback_max})",
            )
        if cfg.dedupe_content and flags is not None and flags.hash is not None:
            shown = set(final.doc.tolist())
            dup, kept = content_duplicates(blended.query, blended.doc, flags.hash)
            for d, k in zip(blended.doc[dup].tolist(), blended.doc[kept].tolist()):
                if k in shown:
                    run.note("finish", f"{docnos.list[d]}: same content as {docnos.list[k]} (shown once)")

    # ------------------------------------------------------------------ many queries
    def run_queries(self, queries: pl.DataFrame, progress: bool = True, **overrides: Any) -> Trace:
        """Run every row of ``queries`` (``qid, text`` and optionally ``intent``); one concatenated trace."""
        for col in ("qid", "text"):
            if col not in queries.columns:
                raise QmdlabError(f"run_queries: the queries table needs a {col!r} column (has {queries.columns})")
        rows = queries.to_dicts()
        it: Any = rows
        if progress:
            try:
                from tqdm import tqdm

                it = tqdm(rows, desc="queries", unit="q")
            except ImportError:  # tqdm is a dependency; stay quiet if it is missing
                pass
        traces = [self.query(r["text"], intent=r.get("intent") or None, qid=str(r["qid"]), **overrides) for r in it]
        return Trace.concat(traces)

    def retune(
        self,
        trace: Trace,
        config: PipelineConfig | None = None,
        *,
        compute_missing: bool = False,
        results: bool = False,
        **overrides: Any,
    ) -> Trace:
        """:func:`qmdlab.retune` with this lab's config (plus ``overrides``); with
        ``compute_missing`` newly promoted candidates are reranked (from the cache when
        possible) instead of left without a score; with ``results`` every final row gets its
        title, context and snippet as a query would give it (not only the rows that had one)."""
        cfg = (config or self.config).replace(**overrides)
        fn = self.rerank_fn(trace, cfg) if compute_missing else None
        out = retune(trace, cfg, rerank_fn=fn, doc_tags=self._doc_tags(cfg), docs=self._learned_docs(cfg, trace.lists))
        if results:
            out.results = self._rebuilt_results(out)
        return out

    def _rebuilt_results(self, trace: Trace) -> pl.DataFrame:
        """The ``results`` table of each query of ``trace`` built anew from its ``final`` and ``rerank``
        rows, as :meth:`query` builds it."""
        parts = [empty("results")]
        for qid, text, intent in trace.queries.select("qid", "text", "intent").iter_rows():
            final = trace.final.filter(pl.col("qid") == qid)
            if not final.height:
                continue
            user = trace.expansions.filter((pl.col("qid") == qid) & (pl.col("origin") == "user"))
            searches = list(user.select("type", "text").iter_rows()) or None
            rerank_rows = trace.rerank.filter(pl.col("qid") == qid)
            parts.append(as_frame("results", self._results(final, text or "", intent, searches, rerank_rows)))
        return pl.concat(parts, how="vertical")

    def _learned_docs(self, cfg: PipelineConfig, lists: pl.DataFrame) -> pl.DataFrame | None:
        """Per-document features for ``fusion=learned`` (None for every other method)."""
        if cfg.fusion != "learned":
            return None
        from qmdlab.pipeline.learned import doc_features

        return doc_features(self.index, lists["docno"].unique().to_list())

    def rerank_fn(self, trace: Trace, config: PipelineConfig | None = None):
        """A ``rerank_fn`` for :func:`qmdlab.retune` that selects chunks and reranks
        missing (qid, docno) pairs with this lab's (cached) reranker."""
        cfg = config or self.config
        texts = {q: (t, i) for q, t, i in trace.queries.iter_rows()}

        def fn(missing: pl.DataFrame) -> pl.DataFrame:
            out = []
            for (qid,), part in missing.group_by("qid", maintain_order=True):
                text, intent = texts.get(qid, ("", None))
                docnos = part["docno"].to_list()
                sel = select_chunks(self.index.chunks(docnos), docnos, text, intent, cfg)
                out.append(rerank(self.reranker, text or intent or "", sel, qid=qid, budget_s=cfg.stage_budget_s).table)
            return pl.concat(out) if out else empty("rerank")

        return fn

    # ------------------------------------------------------------------ helpers
    def _expand(
        self,
        text: str,
        intent: str | None,
        searches: Sequence[tuple[str, str]] | None,
        cfg: PipelineConfig,
        skip: bool,
        run: _Run,
    ) -> list[Expansion]:
        if searches:
            run.note("expand", f"{len(searches)} typed searches given: expander not used")
            return filter_expansions(text, searches, cfg, origin="user", check_terms=False)
        if not cfg.expand:
            run.note("expand", "expansion disabled")
            return []
        if skip:
            return []
        if self.expander is None:
            run.note("expand", "no expander: original query only")
            return []
        from qmdlab.pipeline import speed
        from qmdlab.pipeline.budget import StageBusy, StageTimeout, call_with_budget

        limit_s, deadline = cfg.stage_budget_s, False
        peek = getattr(self.expander, "peek", None)
        if cfg.budget_s > 0 and (peek is None or peek(text, intent=intent) is None):
            fit = run.fit_budget(self.expander, "expand", 1, cfg, stage="expansion", fallback="original query only")
            if fit is None:
                return []
            limit_s, deadline = fit
        t0 = time.perf_counter()
        try:
            res = call_with_budget(
                self.expander.expand, text, intent=intent, budget_s=limit_s, model=self.expander, peek=peek
            )
            lines, dropped = list(res.lines), list(res.dropped)  # a malformed answer fails here, not later
        except StageTimeout:
            speed.observe(self.expander, "expand", time.perf_counter() - t0, persist=cfg.budget_s > 0)  # at least
            if deadline:
                run.note_budget_cut("expansion", limit_s, cfg, fallback="original query only")
            run.note(
                "expand",
                f"expander over its {limit_s:g} s budget ("
                f"{'--budget' if deadline else 'stage_budget_s'}; the call was "
                "stopped): expansion cut, original query only",
            )
            return []
        except StageBusy as err:
            run.note("expand", f"expansion skipped ({err}): original query only")
            return []
        except Exception as err:  # fail-open: the original query still runs
            run.note("expand", f"expander failed ({type(err).__name__}: {err}): original query only")
            return []
        out = [Expansion("?", line, False, f"unparseable: {why}", "expander") for line, why in dropped]
        out += filter_expansions(text, lines, cfg)
        kept = sum(e.kept for e in out)
        cached = getattr(self.expander, "last_cached", None)
        if not cached:
            speed.observe(self.expander, "expand", time.perf_counter() - t0, persist=cfg.budget_s > 0)
        run.note("expand", f"{kept} of {len(out)} lines kept" + (" (from cache)" if cached else ""))
        return out

    def _rerank(self, query: str, selected: dict[str, list], qid: str, cfg: PipelineConfig, run: _Run) -> Columns:
        """Rerank ``selected`` — unless the query's deadline (``budget_s``) leaves too little time for
        the pairs not cached, judged from the reranker's measured speed — and time the pairs computed."""
        from qmdlab.pipeline import speed

        limit_s, deadline = cfg.stage_budget_s, False
        texts = selected["text"]
        peek = getattr(self.reranker, "peek_cached", None)
        if cfg.budget_s > 0 and self.reranker is not None and texts and (peek is None or peek(query, texts) is None):
            fit = run.fit_budget(self.reranker, "rerank", len(texts), cfg, stage="rerank", fallback="fusion order kept")
            if fit is None:
                return Columns.empty("rerank")
            limit_s, deadline = fit
        t0 = time.perf_counter()
        res = rerank_columns(self.reranker, query, selected, qid=qid, budget_s=limit_s)
        seconds = time.perf_counter() - t0
        for stage, msg in res.notes:
            run.note(stage, msg)
        table = res.table
        computed = sum(not c for c in table["cached"])
        if self.reranker is not None and texts and computed:
            speed.observe(self.reranker, "rerank", seconds, computed, persist=cfg.budget_s > 0)
        elif self.reranker is not None and texts and not table["qid"] and limit_s and seconds >= limit_s:
            speed.observe(self.reranker, "rerank", seconds, len(texts), persist=cfg.budget_s > 0)  # at least
            if deadline:
                run.note_budget_cut("rerank", limit_s, cfg, fallback="fusion order kept")
        return table

    def _doc_tags(self, cfg: PipelineConfig) -> pl.DataFrame | None:
        """``docno, tags`` (tag lift) and ``hash`` (content dedupe) of the active documents, or None."""
        if cfg.dedupe_content:
            cols: tuple[str, ...] = ("docno", "tags", "hash")
        elif cfg.tags and cfg.tag_lift:
            cols = ("docno", "tags")
        else:
            return None
        docs = self.index.documents()
        cached = getattr(self, "_doc_tags_cache", None)
        # the same frame while the index's documents frame is unchanged: finish's docno → hash
        # lookup is then built once (qmdlab.pipeline.finish.doc_hashes), not per query
        if cached is not None and cached[0] is docs and cached[1] == cols:
            return cached[2]
        out = docs.select(*cols)
        self._doc_tags_cache = (docs, cols, out)
        return out

    def _tag_listing(self, qid: str, cfg: PipelineConfig, collections: Sequence[str] | None, plan: Any = None) -> Trace:
        """No query text, only tags: the documents carrying any requested tag, by docno."""
        want = [t.lower() for t in cfg.tags]
        docs = (
            self.index.documents(collections)
            .filter(pl.col("tags").list.eval(pl.element().str.to_lowercase().is_in(want)).list.any())
            .head(cfg.limit)
        )
        n = docs.height
        final = pl.DataFrame(
            {
                "qid": [qid] * n,
                "docno": docs["docno"],
                "fused_rank": list(range(1, n + 1)),
                "position_score": [None] * n,
                "blend_weight": [None] * n,
                "rerank_score": [None] * n,
                "final_score": [1.0] * n,
                "final_rank": list(range(1, n + 1)),
            },
            schema=SCHEMAS["final"],
        )
        run = _Run(qid)
        if plan is not None:
            run.note("stages", "stages: tag listing (no query text: no retrieval, expansion or rerank)")
        run.note("finish", f"no query: {n} documents tagged {', '.join(cfg.tags)} (tags filter)")
        return Trace(
            queries=pl.DataFrame({"qid": [qid], "text": [""], "intent": [None]}, schema=SCHEMAS["queries"]),
            final=final,
            results=self._results(final, "", None, None),
            notes=run.notes_frame(),
            config=cfg.to_dict(),
        )

    def _results(
        self,
        final: pl.DataFrame | Columns,
        text: str,
        intent: str | None,
        searches: Sequence[tuple[str, str]] | None,
        rerank_table: pl.DataFrame | Columns | None = None,
        spans: dict[int, tuple[int, int]] | None = None,
        run: _Run | None = None,
    ) -> Columns:
        """Title, docid, context and a line-numbered snippet per final row (:mod:`qmdlab.pipeline.results`),
        taken from the chunk that was reranked when there is one. A row whose document left the
        index while the query ran (renamed or removed by an ``update``) is left out, with a note."""
        if height(final) == 0:
            return Columns.empty("results")
        from qmdlab.pipeline.results import build_rows, vanished_note
        from qmdlab.search import Hit

        chunk_of = (
            {} if rerank_table is None else dict(zip(column(rerank_table, "docno"), column(rerank_table, "chunk_id")))
        )
        ranks = column(final, "final_rank")
        hits = [
            Hit(d, chunk_of.get(d), r, s, s)
            for d, r, s in zip(column(final, "docno"), ranks, column(final, "final_score"))
        ]
        words = " ".join(x for x in (text, intent or "", _search_text(searches)) if x)
        vanished: list[str] = []
        rows = build_rows(self.index, hits, words, spans=spans, vanished=vanished)
        if vanished:
            gone = set(vanished)
            ranks = [r for d, r in zip(column(final, "docno"), ranks) if d not in gone]
            if run is not None:
                run.note("finish", vanished_note(vanished))
        qid = column(final, "qid")[0]
        return Columns(
            {
                "qid": [qid] * len(rows),
                "docno": [r.docno for r in rows],
                "docid": [r.docid for r in rows],
                "title": [r.title for r in rows],
                "final_rank": list(ranks),
                "final_score": [r.score for r in rows],
                "line": [r.line for r in rows],
                "context": [r.context for r in rows],
                "snippet": [r.snippet for r in rows],
            }
        )


def _search_text(searches: Sequence[tuple[str, str]] | None) -> str:
    return " ".join(t for _, t in searches or ())


class _Run:
    """Collects notes and stage timings of one query."""

    def __init__(self, qid: str):
        self.qid = qid
        self._notes: list[tuple[str, str]] = []
        self._times: list[tuple[str, float]] = []
        self._t0 = time.perf_counter()

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self._t0) * 1000.0

    def note(self, stage: str, message: str) -> None:
        self._notes.append((stage, message))

    def first_note(self, stage: str, message: str) -> None:
        self._notes.insert(0, (stage, message))

    def fit_budget(
        self, model: Any, kind: str, units: int, cfg: PipelineConfig, *, stage: str, fallback: str
    ) -> tuple[float, bool] | None:
        """Whether a model stage (``kind`` expand|rerank, ``units`` calls/pairs) fits what is left of
        the query's deadline (``cfg.budget_s``), judged by :func:`qmdlab.pipeline.speed.fits`:
        ``(limit_s, deadline)`` — the stage's time limit, and whether that limit is the deadline's
        rather than ``stage_budget_s`` — or None when the stage is skipped (noted, with ``fallback``:
        what the query does instead)."""
        from qmdlab.pipeline import speed

        fit = speed.fits(
            model,
            kind,
            units,
            cfg.budget_s - self.elapsed_ms() / 1000.0,
            cfg.budget_s,
            cfg.stage_budget_s,
            stage=stage,
        )
        if not fit.ok:
            self.note("budget", fit.note)
            self.note(kind, f"{stage} skipped (--budget): {fallback}")
            return None
        return fit.cap_s, not cfg.stage_budget_s or fit.cap_s < cfg.stage_budget_s

    def note_budget_cut(self, stage: str, limit_s: float, cfg: PipelineConfig, *, fallback: str) -> None:
        """Note a stage stopped at ``limit_s``, the rest of the query's deadline (:meth:`fit_budget`)."""
        self.note(
            "budget",
            f"{stage} cut at {limit_s:.1f} s, what was left of the {cfg.budget_s:g} s budget (--budget): {fallback}",
        )

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._times.append((name, (time.perf_counter() - t0) * 1000.0))

    def timings(self) -> Columns:
        return Columns(
            {
                "qid": [self.qid] * len(self._times),
                "stage": [s for s, _ in self._times],
                "ms": [m for _, m in self._times],
            }
        )

    def notes_frame(self) -> Columns:
        return Columns(
            {
                "qid": [self.qid] * len(self._notes),
                "stage": [s for s, _ in self._notes],
                "message": [m for _, m in self._notes],
            }
        )


_DEFAULTS: dict[tuple, tuple[Any, Any]] = {}


def query(
    text: str,
    *,
    index: Any = None,
    config: PipelineConfig | None = None,
    expand: bool | None = None,
    rerank: bool | None = None,
    models: Any = None,
    preset: str | None = None,
    **overrides: Any,
) -> Trace:
    """Run one query with the default index and models; the notebook/script entry point.

    Parameters
    ----------
    text : str
        Query text or query document.
    index : qmdlab.store.Index, str or None
        An open index, an index name/directory, or ``None`` for the default index.
    config : PipelineConfig, optional
    expand, rerank : bool, optional
        Switch the stage on or off; ``None`` (the default) = the config's choice where it makes one,
        else the preset's default (:func:`qmdlab.pipeline.stages.plan_stages`: the offline preset
        runs BM25 + vectors + fusion, the qmd preset qmd's whole pipeline). The trace's first note
        (stage ``stages``) says which stages ran and why.
    models : ModelSet, optional
        Defaults to ``qmdlab.models.load_models(preset)`` (lazy; loaded once per process).
    preset : str, optional
        Model preset for ``load_models`` and the stage defaults (``None``: ``$QMDLAB_PRESET``, the
        model config, else ``offline``).
    **overrides
        Other :class:`PipelineConfig` fields, or ``intent``, ``qid``, ``searches``,
        ``collections``, ``filters`` of :meth:`Lab.query`.
    """
    from qmdlab.pipeline.stages import plan_stages, preset_name

    q_kwargs = {k: overrides.pop(k) for k in ("intent", "qid", "searches", "collections", "filters") if k in overrides}
    base = (config or PipelineConfig()).replace(**overrides)
    name = preset_name(preset, models_given=models is not None)
    cfg, plan = plan_stages(base, name, expand=expand, rerank=rerank)
    idx = index if index is not None and hasattr(index, "chunks") else None
    key = (str(index) if idx is None else id(idx), id(models) if models is not None else preset)
    if key not in _DEFAULTS:
        if idx is None:
            from qmdlab.store import Index

            idx = Index.open(index)
        if models is None:
            from qmdlab.models import load_models

            models = load_models(preset)
        _DEFAULTS[key] = (idx, models)
    idx, models = _DEFAULTS[key]
    return Lab(idx, models, cfg, plan=plan).query(text, **q_kwargs)


__all__ = ["Lab", "query"]
