"""The ablation matrix: every configuration cut from ONE set of expensive traces.

The runner records the full pipeline once per query (expansion on: ``lex``/``vec``/``hyde``
lists; vector search on; every candidate reranked). Each row below is then a
:meth:`eval.study.Study.evaluate` call — a filter on the recorded ``lists`` table (by
``source`` ∈ {fts, vec} and ``query_type`` ∈ {original, lex, vec, hyde}) plus config
switches, re-fused and re-blended by :func:`qmdlab.retune` without any model call:

==========================  =============================================  =====================
row                         lists kept                                      config
==========================  =============================================  =====================
``bm25``                    fts/original                                    rerank off
``vector``                  vec/original                                    rerank off
``bm25+vector``             */original                                      rerank off
``+lex``                    original + lex                                  rerank off
``+lex+vec``                original + lex + vec                            rerank off
``+lex+vec+hyde``           all                                             rerank off
``+rerank``                 all                                             recorded (qmd default)
``strong-signal skip``      original, + expansions of non-strong queries    rerank as recorded
``fusion=<m>``              all                                             fusion m (each method)
``blend=<m>``               all                                             blend m (each method)
``chunker=<c>``             all, of ANOTHER recording                       the recorded config
==========================  =============================================  =====================

The ``chunker=<c>`` rows (``qmdlab eval --ablate --chunkers all``; :func:`chunker_evaluations`) are the
exception to "one set of traces": chunks are stored in the index, so each chunker gets its own suite
index (:func:`eval.record.index_dir`) and its own recording of the same queries under the same config
(``chunker: c``, which keys its trace cache); the row is that recording evaluated as recorded.
``chunker=breakpoints`` (the default) is the main recording itself; pass
``--baseline chunker=breakpoints`` for p-values of each chunker against the default one.

What the cut cannot reproduce, and why it is still exact: BM25-only and vector-only runs
would issue the same original-query searches, so their lists are identical to the recorded
ones. Expansion is decided once (the strong-signal skip and the expander's lines are the same
in every row). Rerank scores exist for the recorded run's candidates; a fusion method that
promotes other documents into the candidate pool leaves them unscored — the ``unscored``
column counts such final results (pass ``rerank_fn`` through :class:`eval.study.Study` users,
or re-run with ``qmdlab eval --config``, when it is not 0).

The strong-signal skip (DESIGN §3 step 1) gets its own row when the recording ran with the skip
*off* (``strong_signal: false`` in the ``--config`` file: every query expanded, and the probe note
of a query whose BM25 signal was strong says so): the ``strong-signal skip`` row drops the
expansion lists of exactly those queries (:func:`strong_signal_qids`) — what the pipeline with the
skip on retrieves — while the other rows are the skip-off pipeline. A recording with the skip on
cannot show what the skipped queries would have gained, so the row is left out then; with
expansion off the skip has nothing to skip and the row is left out too.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import polars as pl

from qmdlab.pipeline.config import BLEND_METHODS, FUSION_METHODS, PipelineConfig

from .metrics import HEADLINE
from .significance import compare_to_baseline

ORIGINAL = pl.col("query_type") == "original"


class Variant(NamedTuple):
    """One ablation row: a name, a ``lists`` filter (None = all lists) and config overrides."""

    name: str
    lists: pl.Expr | None
    overrides: dict
    description: str


def strong_signal_qids(notes: pl.DataFrame) -> list[str]:
    """Queries whose recorded probe found a strong BM25 signal (skip taken, or skip off but it would
    have been): the ``probe`` notes that start with ``strong signal``.

    >>> n = pl.DataFrame({"qid": ["1", "2", "3"], "stage": ["probe"] * 3,
    ...                   "message": ["strong signal (top 0.9, gap 0.2) but the skip is off (strong_signal: false): "
    ...                               "expanding", "no strong signal (top 0.5, gap 0.1): expanding",
    ...                               "strong signal (top 0.95 >= 0.85, gap 0.3 >= 0.15): expansion skipped"]})
    >>> strong_signal_qids(n)
    ['1', '3']
    """
    if notes.height == 0:
        return []
    hit = notes.filter((pl.col("stage") == "probe") & pl.col("message").str.starts_with("strong signal"))
    return sorted(set(hit["qid"].to_list()))


def variants(config: PipelineConfig, *, has_vector: bool = True, has_expansion: bool = True,
             has_rerank: bool = True, skip_qids: Sequence[str] | None = None) -> list[Variant]:
    """The ablation rows that the recorded trace supports (see the module table).

    ``skip_qids`` (:func:`strong_signal_qids` of the trace) adds the ``strong-signal skip`` row
    when expansion lists were recorded.
    """
    off = {"rerank": False}
    out = [Variant("bm25", (pl.col("source") == "fts") & ORIGINAL, off, "BM25 of the original query")]
    if has_vector:
        out += [Variant("vector", (pl.col("source") == "vec") & ORIGINAL, off, "vector search of the original query"),
                Variant("bm25+vector", ORIGINAL, off, f"{config.fusion} of the two original-query lists")]
    if has_expansion:
        out += [Variant("+lex", ORIGINAL | (pl.col("query_type") == "lex"), off, "+ lex expansion lists (BM25)")]
        if has_vector:
            out += [Variant("+lex+vec", pl.col("query_type") != "hyde", off, "+ vec expansion lists"),
                    Variant("+lex+vec+hyde", None, off, "+ hyde lists: full retrieval, no rerank")]
    if has_rerank:
        out.append(Variant("+rerank", None, {"rerank": True}, f"full pipeline, {config.blend} blend"))
    if has_expansion and skip_qids is not None:
        keep = ORIGINAL | ~pl.col("qid").is_in(list(skip_qids))
        out.append(Variant("strong-signal skip", keep, {"rerank": has_rerank and config.rerank, "strong_signal": True},
                           f"full pipeline, expansion skipped for the {len(skip_qids)} strong-signal queries"))
    for m in FUSION_METHODS:
        out.append(Variant(f"fusion={m}", None, {"fusion": m, "rerank": has_rerank and config.rerank},
                           "full pipeline with this fusion"))
    if has_rerank:
        for m in BLEND_METHODS:
            out.append(Variant(f"blend={m}", None, {"blend": m, "rerank": True}, "full pipeline with this blend"))
    return out


def chunker_evaluations(study, suite, models, chunkers: Sequence[str], *, progress: bool = False, log=print,
                        remote=None) -> dict:
    """``{"chunker=<c>": Evaluation}``: each chunker's own recording of ``study``'s queries under
    ``study.config`` with ``chunker: c`` (its own index and trace cache), evaluated as recorded. The
    chunker the study was recorded with is the study itself (no second recording).

    Parameters
    ----------
    study : eval.study.Study
        The main recording's study (its config and metrics are used).
    suite : eval.suites.Suite
    models : ModelSet or None
        The models of the main recording (same roles, so the rows differ only in the chunks).
    chunkers : sequence of str
        Names from :data:`qmdlab.store.chunkers.CHUNKERS`.
    """
    from qmdlab.store.chunkers import DEFAULT_CHUNKER, check_chunker

    from .record import record
    from .study import Study

    own = study.config.chunker or DEFAULT_CHUNKER
    out = {}
    for name in chunkers:
        check_chunker(name, "--chunkers")
        if name == own:
            out[f"chunker={name}"] = study.evaluate(study.config)
            continue
        cfg = study.config.replace(chunker="" if name == DEFAULT_CHUNKER else name)
        rec = record(suite, models, cfg, qids=study.qids, name=f"chunker={name}", progress=progress, log=log,
                     remote=remote)
        other = Study.from_recording(rec, metrics=study.metrics)
        missing = set(study.qids) - set(other.qids)
        if missing:
            raise ValueError(f"chunker {name}: the recording lacks queries {sorted(missing)[:5]}")
        out[f"chunker={name}"] = other.evaluate(rec.config)
    return out


def ablate(study, *, baseline: str = "best-leg", metric: str = HEADLINE, rows: Sequence[Variant] | None = None,
           extra: dict[str, PipelineConfig] | None = None, chunkers: dict | None = None) -> pl.DataFrame:
    """Evaluate every ablation row of ``study`` and compare each with ``baseline``.

    Parameters
    ----------
    study : eval.study.Study
    baseline : str
        A row name, or ``"best-leg"``: whichever of ``bm25`` / ``vector`` scores higher.
    metric : str
        The metric of the significance tests (every metric of the study is reported).
    rows : sequence of Variant, optional
        Defaults to :func:`variants` of what the trace holds.
    extra : dict of name → PipelineConfig, optional
        More rows evaluated on all lists (e.g. a tuned config).
    chunkers : dict of name → Evaluation, optional
        Rows evaluated on other recordings (:func:`chunker_evaluations`), compared per query.

    Returns
    -------
    pl.DataFrame
        ``config, description, <metrics…>, delta, p_ttest, p_fisher, wins, ties, losses,
        unscored, baseline`` — one row per configuration.
    """
    lists = study.trace.lists
    rows = list(rows) if rows is not None else variants(
        study.config, has_vector=bool(lists.filter(pl.col("source") == "vec").height),
        has_expansion=bool(lists.filter(~ORIGINAL).height),
        has_rerank=bool(study.trace.rerank.drop_nulls("rerank_score").height),
        skip_qids=None if study.config.strong_signal else strong_signal_qids(study.trace.notes))
    evals, desc = {}, {}
    for v in rows:
        evals[v.name] = study.evaluate(study.config.replace(**v.overrides), lists=v.lists)
        desc[v.name] = v.description
    for name, cfg in (extra or {}).items():
        evals[name] = study.evaluate(cfg)
        desc[name] = "extra configuration"
    for name, ev in (chunkers or {}).items():
        evals[name] = ev
        desc[name] = f"own index chunked with {name.split('=', 1)[-1]}, recorded config"
    if baseline == "best-leg":
        legs = [n for n in ("bm25", "vector") if n in evals]
        baseline = max(legs, key=lambda n: evals[n].metrics[metric])
    sig = compare_to_baseline({n: e.per_query for n, e in evals.items()}, baseline, metric)
    means = pl.DataFrame([{"config": n, "description": desc[n], **e.metrics, "unscored": e.unscored}
                          for n, e in evals.items()])
    table = means.join(sig.drop("mean").rename({"run": "config"}), on="config", how="left", maintain_order="left")
    cols = ["config", "description", *study.metrics, "delta", "p_ttest", "p_fisher", "wins", "ties", "losses",
            "unscored"]
    return table.select(cols).with_columns(pl.lit(baseline).alias("baseline"))


def format_table(table: pl.DataFrame, metric: str = HEADLINE) -> str:
    """A fixed-width text rendering of an :func:`ablate` table (for terminals and logs)."""
    base = table["baseline"][0] if table.height else ""

    def p(value: float) -> str:  # a randomisation p-value of 0 means "below 1/permutations"
        return "<0.001" if value == 0 else f"{value:.3g}"

    width = max([22, *(len(c) for c in table["config"].to_list())]) if table.height else 22
    lines = [f"{'configuration':<{width}} {metric:>8} {'Δ':>7} {'p(t)':>8} {'p(Fisher)':>9} {'W/T/L':>10}  "
             f"(baseline: {base})"]
    for r in table.iter_rows(named=True):
        star = "*" if r["p_ttest"] < 0.05 and r["config"] != base else " "
        lines.append(f"{r['config']:<{width}} {r[metric]:>8.4f} {r['delta']:>+7.4f} {r['p_ttest']:>8.3g} "
                     f"{p(r['p_fisher']):>9} {r['wins']:>3}/{r['ties']}/{r['losses']:<3}{star}"
                     + (f"  ({r['unscored']} unscored)" if r["unscored"] else ""))
    return "\n".join(lines)
