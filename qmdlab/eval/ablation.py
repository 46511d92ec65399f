"""The ablation matrix: every configuration cut from ONE set of expensive traces.

The runner records the full pipeline once per query (expansion on: ``lex``/``vec``/``hyde``
lists; vector search on; every candidate reranked). Each row below is then a
:meth:`qmdlab.eval.study.Study.evaluate` call — a filter on the recorded ``lists`` table (by
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
``+phrase list`` … (below)  all, of ANOTHER recording                       config + the variant
==========================  =============================================  =====================

The ``chunker=<c>`` rows (``qmdlab eval --ablate --chunkers all``; :func:`chunker_evaluations`) are the
exception to "one set of traces": chunks are stored in the index, so each chunker gets its own suite
index (:func:`qmdlab.eval.record.index_dir`) and its own recording of the same queries under the same config
(``chunker: c``, which keys its trace cache); the row is that recording evaluated as recorded.
``chunker=breakpoints`` (the default) is the main recording itself; pass
``--baseline chunker=breakpoints`` for p-values of each chunker against the default one.

The *recorded variants* (``qmdlab eval --ablate --variants all|NAME,…``; :func:`variant_evaluations`)
are the same exception for features that change what is retrieved, so no cut of the main recording
can show them. Each is the main config with a few options overridden (:data:`RECORDED_VARIANTS`),
recorded over the same queries (its own trace-cache entry: the key hashes the config's ``to_dict()``)
and evaluated as recorded; its paired p-values against the baseline come from the same code as
every other row:

=================  =========================  ==================================================
``--variants``     row                        overrides
=================  =========================  ==================================================
``phrase``         ``+phrase list``           ``weight_original_phrase: 1.0`` (verbatim whole query)
``like``           ``+like list``             ``weight_original_like: 1.0`` (substring leg)
``trigram``        ``+trigram list``          ``weight_original_trigram: 1.0`` (CJK trigrams)
``heading``        ``+heading list``          ``weight_original_heading: 1.0`` (section headings)
``two-unit-gate``  ``two-unit gate``          ``bm25_mode: msm``, ``bm25_min_match: 2``
``field-weights``  ``field weights``          ``qmdlab/eval/configs/content-first-fields.yaml`` (0.25/0.5/1.0)
``no-skip``        ``no strong-signal skip``  ``strong_signal: false`` (every query expanded)
``doc-queries``    ``+doc-queries column``    ``bm25_weight_doc_queries: 1.0`` (doc2query column)
=================  =========================  ==================================================

A variant whose overrides the main config already holds is the main recording itself (no second
recording); so is ``no-skip`` when the main recording has nothing to skip (expansion off, no
expander, or no query with a strong signal), which its description says; and ``doc-queries`` when the
suite's index has no generated queries written (``qmdlab --index <suite index> expand-docs --generator
MODEL`` writes them; :mod:`qmdlab.pipeline.doc_expand`).

What the cut cannot reproduce, and why it is still exact: BM25-only and vector-only runs
would issue the same original-query searches, so their lists are identical to the recorded
ones. Expansion is decided once (the strong-signal skip and the expander's lines are the same
in every row). Rerank scores exist for the recorded run's candidates; a fusion method that
promotes other documents into the candidate pool leaves them unscored — the ``unscored``
column counts such final results (pass ``rerank_fn`` through :class:`qmdlab.eval.study.Study` users,
or re-run with ``qmdlab eval --config``, when it is not 0).

The strong-signal skip (docs/design.md, pipeline step 1) gets its own row when the recording ran with the skip
*off* (``strong_signal: false`` in the ``--config`` file: every query expanded, and the probe note
of a query whose BM25 signal was strong says so): the ``strong-signal skip`` row drops the
expansion lists of exactly those queries (:func:`strong_signal_qids`) — what the pipeline with the
skip on retrieves — while the other rows are the skip-off pipeline. A recording with the skip on
cannot show what the skipped queries would have gained, so the row is left out then (the
recorded variant ``no-skip`` measures it instead: every query recorded again with the skip off); with
expansion off the skip has nothing to skip and the row is left out too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

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


def variants(
    config: PipelineConfig,
    *,
    has_vector: bool = True,
    has_expansion: bool = True,
    has_rerank: bool = True,
    skip_qids: Sequence[str] | None = None,
) -> list[Variant]:
    """The ablation rows that the recorded trace supports (see the module table).

    ``skip_qids`` (:func:`strong_signal_qids` of the trace) adds the ``strong-signal skip`` row
    when expansion lists were recorded.
    """
    off = {"rerank": False}
    out = [Variant("bm25", (pl.col("source") == "fts") & ORIGINAL, off, "BM25 of the original query")]
    if has_vector:
        out += [
            Variant("vector", (pl.col("source") == "vec") & ORIGINAL, off, "vector search of the original query"),
            Variant("bm25+vector", ORIGINAL, off, f"{config.fusion} of the two original-query lists"),
        ]
    if has_expansion:
        out += [Variant("+lex", ORIGINAL | (pl.col("query_type") == "lex"), off, "+ lex expansion lists (BM25)")]
        if has_vector:
            out += [
                Variant("+lex+vec", pl.col("query_type") != "hyde", off, "+ vec expansion lists"),
                Variant("+lex+vec+hyde", None, off, "+ hyde lists: full retrieval, no rerank"),
            ]
    if has_rerank:
        out.append(Variant("+rerank", None, {"rerank": True}, f"full pipeline, {config.blend} blend"))
    if has_expansion and skip_qids is not None:
        keep = ORIGINAL | ~pl.col("qid").is_in(list(skip_qids))
        out.append(
            Variant(
                "strong-signal skip",
                keep,
                {"rerank": has_rerank and config.rerank, "strong_signal": True},
                f"full pipeline, expansion skipped for the {len(skip_qids)} strong-signal queries",
            )
        )
    for m in FUSION_METHODS:
        out.append(
            Variant(
                f"fusion={m}",
                None,
                {"fusion": m, "rerank": has_rerank and config.rerank},
                "full pipeline with this fusion",
            )
        )
    if has_rerank:
        for m in BLEND_METHODS:
            out.append(Variant(f"blend={m}", None, {"blend": m, "rerank": True}, "full pipeline with this blend"))
    return out


class RecordedVariant(NamedTuple):
    """A row of its own recording (:data:`RECORDED_VARIANTS`): the main config with ``overrides``.

    ``inert(config, study, models, suite)`` gives the reason the overrides cannot change what the main
    recording retrieved (the row is then the main recording itself), or ``""``.
    """

    row: str
    overrides: dict
    description: str
    inert: Callable | None = None


def _skip_inert(config: PipelineConfig, study, models, suite=None) -> str:
    if not config.expand or (models is not None and models[1] is None):
        return "expansion off: nothing to skip"
    if not strong_signal_qids(study.trace.notes):
        return "no query had a strong signal"
    return ""


#: The doc-queries column's weight in the ``doc-queries`` variant and the frontier's expansion row
#: (the body's weight: a generated query counts as much as a word of the text).
DOC_QUERY_WEIGHT = 1.0


def index_has_doc_queries(suite, config: PipelineConfig) -> bool:
    """Whether the suite's index for ``config``'s chunker holds generated queries in its
    doc-queries column (no index yet: ``False``; nothing is created or written)."""
    from qmdlab.paths import DB_NAME
    from qmdlab.store import Index
    from qmdlab.store.doc_expansions import has_doc_expansions

    from .record import index_dir

    path = index_dir(suite, config.chunker)
    if not (path / DB_NAME).is_file():
        return False
    with Index.open(path, create=False) as idx:
        return has_doc_expansions(idx)


def _expansions_inert(config: PipelineConfig, study, models, suite=None) -> str:
    if suite is not None and index_has_doc_queries(suite, config):
        return ""
    return "the suite's index has no doc-queries: run `qmdlab --index <suite index> expand-docs --generator MODEL`"


RECORDED_VARIANTS: dict[str, RecordedVariant] = {
    "phrase": RecordedVariant(
        "+phrase list", {"weight_original_phrase": 1.0}, "own recording: + verbatim whole-query phrase list (weight 1)"
    ),
    "like": RecordedVariant(
        "+like list", {"weight_original_like": 1.0}, "own recording: + substring LIKE list (weight 1)"
    ),
    "trigram": RecordedVariant(
        "+trigram list", {"weight_original_trigram": 1.0}, "own recording: + CJK trigram list (weight 1)"
    ),
    "heading": RecordedVariant(
        "+heading list", {"weight_original_heading": 1.0}, "own recording: + section-heading list (weight 1)"
    ),
    "two-unit-gate": RecordedVariant(
        "two-unit gate", {"bm25_mode": "msm", "bm25_min_match": 2.0}, "own recording: BM25 needs 2 query terms (msm)"
    ),
    # the values of qmdlab/eval/configs/content-first-fields.yaml (tests/eval/test_ablation_variants.py pins them)
    "field-weights": RecordedVariant(
        "field weights",
        {"bm25_weight_filepath": 0.25, "bm25_weight_title": 0.5, "bm25_weight_body": 1.0},
        "own recording: content-first BM25 columns 0.25/0.5/1",
    ),
    "no-skip": RecordedVariant(
        "no strong-signal skip", {"strong_signal": False}, "own recording: every query expanded (skip off)", _skip_inert
    ),
    "doc-queries": RecordedVariant(
        "+doc-queries column",
        {"bm25_weight_doc_queries": DOC_QUERY_WEIGHT},
        f"own recording: BM25 with the generated-query column (weight {DOC_QUERY_WEIGHT:g})",
        _expansions_inert,
    ),
}
"""RecordingInfo variants by ``--variants`` name (see the module table)."""

RENAMED_VARIANTS = {"expansions": "doc-queries"}
"""Earlier ``--variants`` names, still accepted."""


def check_variant(name: str, flag: str = "--variants") -> str:
    """``name`` if it is a recorded variant, else a :class:`~qmdlab.errors.ConfigError` naming them.

    >>> check_variant("like")
    'like'
    >>> check_variant("bigram")
    Traceback (most recent call last):
    ...
    qmdlab.errors.ConfigError: --variants 'bigram': unknown variant; use all or one of phrase, like, trigram, heading, two-unit-gate, field-weights, no-skip, doc-queries
    """
    from qmdlab.errors import ConfigError

    name = RENAMED_VARIANTS.get(name, name)
    if name not in RECORDED_VARIANTS:
        raise ConfigError(f"{flag} {name!r}: unknown variant; use all or one of {', '.join(RECORDED_VARIANTS)}")
    return name


def recorded_evaluation(
    study, suite, models, overrides: dict, *, name: str, progress: bool = False, log=print, remote=None
):
    """``study``'s queries recorded again under ``study.config.replace(**overrides)`` (its own trace
    cache entry) and evaluated as recorded; the study itself when the overrides change nothing."""
    from .record import record
    from .study import Study

    cfg = study.config.replace(**overrides)
    if cfg == study.config:
        return study.evaluate(study.config)
    rec = record(suite, models, cfg, qids=study.qids, name=name, progress=progress, log=log, remote=remote)
    other = Study.from_recording(rec, metrics=study.metrics)
    missing = set(study.qids) - set(other.qids)
    if missing:
        raise ValueError(f"{name}: the recording lacks queries {sorted(missing)[:5]}")
    return other.evaluate(rec.config)


class RecordedRow(NamedTuple):
    """A recorded variant's row (:func:`variant_evaluations`): its evaluation and description."""

    evaluation: object  # qmdlab.eval.study.Evaluation
    description: str


def variant_evaluations(
    study, suite, models, names: Sequence[str], *, progress: bool = False, log=print, remote=None
) -> dict:
    """``{row: RecordedRow}`` of each recorded variant in ``names`` (:data:`RECORDED_VARIANTS`): the
    main recording's queries recorded under ``study.config`` with the variant's overrides, evaluated as
    recorded. A variant that cannot change the main recording (its overrides already hold, or its
    ``inert`` reason) is the study itself, and its description says why. Arguments as
    :func:`chunker_evaluations`.
    """
    out = {}
    for name in names:
        v = RECORDED_VARIANTS[check_variant(name)]
        reason = v.inert(study.config, study, models, suite) if v.inert else ""
        if not reason and study.config.replace(**v.overrides) == study.config:
            reason = "the main config already has it"
        if reason:
            out[v.row] = RecordedRow(study.evaluate(study.config), f"= the main recording ({reason})")
        else:
            out[v.row] = RecordedRow(
                recorded_evaluation(
                    study, suite, models, v.overrides, name=v.row, progress=progress, log=log, remote=remote
                ),
                v.description,
            )
    return out


def chunker_evaluations(
    study, suite, models, chunkers: Sequence[str], *, progress: bool = False, log=print, remote=None
) -> dict:
    """``{"chunker=<c>": Evaluation}``: each chunker's own recording of ``study``'s queries under
    ``study.config`` with ``chunker: c`` (its own index and trace cache), evaluated as recorded. The
    chunker the study was recorded with is the study itself (no second recording).

    Parameters
    ----------
    study : qmdlab.eval.study.Study
        The main recording's study (its config and metrics are used).
    suite : qmdlab.eval.suites.Suite
    models : ModelSet or None
        The models of the main recording (same roles, so the rows differ only in the chunks).
    chunkers : sequence of str
        Names from :data:`qmdlab.store.chunkers.CHUNKERS`.
    """
    from qmdlab.store.chunkers import DEFAULT_CHUNKER, check_chunker

    own = study.config.chunker or DEFAULT_CHUNKER
    out = {}
    for name in chunkers:
        check_chunker(name, "--chunkers")
        if name == own:
            out[f"chunker={name}"] = study.evaluate(study.config)
            continue
        out[f"chunker={name}"] = recorded_evaluation(
            study,
            suite,
            models,
            {"chunker": "" if name == DEFAULT_CHUNKER else name},
            name=f"chunker={name}",
            progress=progress,
            log=log,
            remote=remote,
        )
    return out


def ablate(
    study,
    *,
    baseline: str = "best-leg",
    metric: str = HEADLINE,
    rows: Sequence[Variant] | None = None,
    extra: dict[str, PipelineConfig] | None = None,
    chunkers: dict | None = None,
    recorded: dict | None = None,
) -> pl.DataFrame:
    """Evaluate every ablation row of ``study`` and compare each with ``baseline``.

    Parameters
    ----------
    study : qmdlab.eval.study.Study
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
    recorded : dict of row → RecordedRow, optional
        RecordingInfo-variant rows (:func:`variant_evaluations`), compared per query the same way.

    Returns
    -------
    pl.DataFrame
        ``config, description, <metrics…>, delta, p_ttest, p_fisher, wins, ties, losses,
        unscored, baseline`` — one row per configuration.
    """
    lists = study.trace.lists
    rows = (
        list(rows)
        if rows is not None
        else variants(
            study.config,
            has_vector=bool(lists.filter(pl.col("source") == "vec").height),
            has_expansion=bool(lists.filter(~ORIGINAL).height),
            has_rerank=bool(study.trace.rerank.drop_nulls("rerank_score").height),
            skip_qids=None if study.config.strong_signal else strong_signal_qids(study.trace.notes),
        )
    )
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
    for name, row in (recorded or {}).items():
        evals[name], desc[name] = row.evaluation, row.description
    if baseline == "best-leg":
        legs = [n for n in ("bm25", "vector") if n in evals]
        baseline = max(legs, key=lambda n: evals[n].metrics[metric])
    sig = compare_to_baseline({n: e.per_query for n, e in evals.items()}, baseline, metric)
    means = pl.DataFrame(
        [{"config": n, "description": desc[n], **e.metrics, "unscored": e.unscored} for n, e in evals.items()]
    )
    table = means.join(sig.drop("mean").rename({"run": "config"}), on="config", how="left", maintain_order="left")
    cols = [
        "config",
        "description",
        *study.metrics,
        "delta",
        "p_ttest",
        "p_fisher",
        "wins",
        "ties",
        "losses",
        "unscored",
    ]
    return table.select(cols).with_columns(pl.lit(baseline).alias("baseline"))


def format_ablation(table: pl.DataFrame, metric: str = HEADLINE) -> str:
    """A fixed-width text rendering of an :func:`ablate` table (for terminals and logs)."""
    base = table["baseline"][0] if table.height else ""

    def p(value: float) -> str:  # a randomisation p-value of 0 means "below 1/permutations"
        return "<0.001" if value == 0 else f"{value:.3g}"

    width = max([22, *(len(c) for c in table["config"].to_list())]) if table.height else 22
    lines = [
        f"{'configuration':<{width}} {metric:>8} {'Δ':>7} {'p(t)':>8} {'p(Fisher)':>9} {'W/T/L':>10}  "
        f"(baseline: {base})"
    ]
    for r in table.iter_rows(named=True):
        star = "*" if r["p_ttest"] < 0.05 and r["config"] != base else " "
        lines.append(
            f"{r['config']:<{width}} {r[metric]:>8.4f} {r['delta']:>+7.4f} {r['p_ttest']:>8.3g} "
            f"{p(r['p_fisher']):>9} {r['wins']:>3}/{r['ties']}/{r['losses']:<3}{star}"
            + (f"  ({r['unscored']} unscored)" if r["unscored"] else "")
        )
    return "\n".join(lines)
