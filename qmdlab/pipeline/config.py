"""Every knob of the hybrid query pipeline in one frozen dataclass.

The defaults reproduce qmd 2.8.3 (docs/design.md, pipeline) except where a docstring says
otherwise. A notebook slider, a YAML/TOML file or a CLI flag changes a field via
:meth:`PipelineConfig.replace`; nothing else in :mod:`qmdlab.pipeline` holds a
constant of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from qmdlab.errors import ConfigError

FUSION_METHODS = ("qmd_rrf", "rrf", "norm_sum", "gated_rrf", "wsum_minmax", "combmnz")
"""The formula fusion methods (each needs only the lists; ablations iterate over these)."""
FUSION_CHOICES = FUSION_METHODS + ("learned",)
"""Every valid ``fusion`` value: the formulas plus ``learned`` (needs a model file)."""
BLEND_METHODS = ("position", "score", "rerank_only", "none")
BM25_MODES = ("and", "or", "msm")
EXPAND_TYPES = ("lex", "vec", "hyde")
"""The expansion line types, in the canonical order of ``expand_types``."""
EXPAND_GATES = ("off", "overlap", "rerank")
"""The ``expand_gate`` values: no gate, the top-k overlap gate, or expansion that only re-ranks the
original top k (:mod:`qmdlab.pipeline.fuse`)."""
DEFAULT_TAG_LIFT = 3
"""Places a preferred-tag result moves up when tags are preferred and neither the request nor the
base config gives a ``tag_lift`` (``qmdlab query --prefer-tag``, the MCP ``query`` tool's
``preferTags``, the explore notebook): :meth:`PipelineConfig.tag_preference`."""
LIST_KEYS = (
    "original_fts",
    "original_vec",
    "lex",
    "vec",
    "hyde",
    "original_phrase",
    "original_like",
    "original_trigram",
)
CONFIG_STAGES: dict[str, str] = {
    "probe": "Probe and strong-signal skip",
    "switches": "Stage switches",
    "bm25": "Retrieval: BM25",
    "vectors": "Retrieval: vectors",
    "channels": "Retrieval: extra keyword channels",
    "fusion": "Fusion",
    "selection": "Chunk selection",
    "blend": "Blend",
    "finish": "Finish",
    "budget": "Budget",
}
"""The stages a :class:`PipelineConfig` field belongs to (docs/design.md's order) and their titles
in docs/reference/config.md. Each field declares its stage with :func:`_option`."""


def _option(default: Any, stage: str, *, recorded: bool = True, keyed_at_default: bool = True, item: str = "") -> Any:
    """A :class:`PipelineConfig` field with what the rest of qmdlab needs to know about it.

    Parameters
    ----------
    default
        The field's default (immutable: a tuple, not a list).
    stage : str
        Its stage (:data:`CONFIG_STAGES`): the reference groups the options by it, and the BM25
        re-run (:data:`qmdlab.pipeline.rerun_bm25.LEXICAL_FIELDS`) takes the ``bm25`` stage's fields.
    recorded : bool
        Whether a change of it changes what a recording holds, so that the queries must be recorded
        again (``False``: the cheap stages — fusion, candidate selection, blend, finish — re-run it on
        recorded lists and rerank scores, :func:`qmdlab.pipeline.retune.retune`).
    keyed_at_default : bool
        ``False`` for options added after traces were first recorded: :meth:`PipelineConfig.to_dict`
        leaves them out while they hold their default, so the trace-cache key
        (``qmdlab/eval/record.py`` hashes ``to_dict()``) of every config that does not use them
        stays what it was (:data:`OMITTED_AT_DEFAULT`).
    item : str
        For a tuple option, the flat name of its items (``blend_weight`` → ``blend_weight_1..3``;
        :data:`BLEND_ITEMS`).
    """
    if stage not in CONFIG_STAGES:
        raise ValueError(f"unknown config stage {stage!r}; choose one of {', '.join(CONFIG_STAGES)}")
    return field(
        default=default,
        metadata={"stage": stage, "recorded": recorded, "keyed_at_default": keyed_at_default, "item": item},
    )


RENAMED_OPTIONS = {"bm25_weight_expansions": "bm25_weight_doc_queries"}
"""Earlier option names a config file or mapping may still use, and what they are called now."""


def _read_config_file(path: Path, parse: Callable[[str], Any], errors: type[Exception], kind: str) -> Any:
    """``parse`` of the config file at ``path``; a missing or malformed file is a :class:`ConfigError`
    naming it and the fix."""
    try:
        return parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found (check the --config path)") from None
    except errors as err:
        raise ConfigError(f"{path}: malformed {kind} ({str(err).splitlines()[0]}); fix the file") from None


def _renamed(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """``data`` with earlier option names (:data:`RENAMED_OPTIONS`) under their current names.

    >>> _renamed({"bm25_weight_expansions": 0.5, "rrf_k": 30}, "config")
    {'bm25_weight_doc_queries': 0.5, 'rrf_k': 30}
    >>> _renamed({"bm25_weight_expansions": 0.5, "bm25_weight_doc_queries": 1.0}, "c.yaml")
    Traceback (most recent call last):
    ...
    qmdlab.errors.ConfigError: c.yaml: 'bm25_weight_expansions' is the earlier name of 'bm25_weight_doc_queries'; give one of them
    """
    out: dict[str, Any] = {}
    for key, value in data.items():
        new = RENAMED_OPTIONS.get(key, key)
        if new in out or (new != key and new in data):
            raise ConfigError(f"{source}: {key!r} is the earlier name of {new!r}; give one of them")
        out[new] = value
    return out


@dataclass(frozen=True)
class PipelineConfig:
    """The pipeline's constants (docs/design.md, pipeline); defaults are qmd's behaviour.

    Parameters
    ----------
    probe_limit : int
        BM25 hits fetched for the strong-signal probe of the original query.
    strong_signal_min, strong_signal_gap : float
        Expansion is skipped when the probe's top normalised score is
        ``>= strong_signal_min`` and leads the second by ``>= strong_signal_gap``
        (never when an intent is given).
    strong_signal : bool
        The strong-signal skip itself (qmd: on). Off, every query is expanded; the
        ablation's ``strong-signal skip`` row measures what the skip costs or saves.
    expand, hyde, vector, rerank : bool
        Stage switches (the ablations): query expansion, HyDE lines, every vector
        list, the reranker.
    hyde_as_document : bool
        Embed ``hyde:`` lines with the document template instead of the query one.
    weight_original_fts, weight_original_vec, weight_lex, weight_vec, weight_hyde : float
        RRF weight of each list type (qmd: 2.0 for both original-query lists).
    rrf_k : int
        The RRF constant *k* (1-based ranks).
    bonus_rank1, bonus_rank23 : float
        Top-rank bonus of ``qmd_rrf`` for a best rank of 1, or of 2–3.
    fusion : str
        One of ``qmd_rrf`` (default), ``rrf``, ``norm_sum``, ``gated_rrf``,
        ``wsum_minmax``, ``combmnz``, ``learned`` (a LightGBM lambdarank model over
        the trace's features, :mod:`qmdlab.pipeline.learned`; needs ``learned_model``).
    learned_model : str
        Path of the model file ``qmdlab tune --learn`` writes (``fusion: learned``). A
        relative path in a YAML/TOML config is relative to that file's folder.
    learned_prior : float
        ``fusion=learned``: the model's score is ``learned_prior · Σ 1/(60 + rank)``
        plus its trees' output (written by ``qmdlab tune --learn`` with the model).
    candidate_limit : int
        Fused documents passed to chunk selection, rerank and blend.
    list_limit : int
        Hits per retrieval list.
    intent_term_bonus : float
        Chunk selection: extra hits per intent-term occurrence.
    df_filter : bool
        Chunk selection ignores query terms present in over half the candidates
        (terms with document frequency <= 2 are exempt) — a memory-recall keyword filter.
    blend : str
        One of ``position`` (qmd), ``score``, ``rerank_only``, ``none``.
    blend_bands : tuple of int
        Upper fused ranks of the first two blend bands (qmd: ranks 1–3, 4–10, 11+).
    blend_weights : tuple of float
        Weight of the position score in each of the three bands.
    min_score : float
        Results whose final score is below this are dropped.
    limit : int
        Results kept after blending (10 so nDCG@10 is defined; the CLI's ``-n``
        defaults to qmd's 5).
    norm_weight_fts, norm_weight_vec : float
        ``norm_sum`` channel weights (body 1.0, vector 0.9).
    gate_margin, gate_max_take : float, int
        ``gated_rrf``: vector hits are admitted while ``cos >= top1 - gate_margin``,
        at most ``gate_max_take`` per list.
    bm25_mode : str
        ``or`` (any term; the default here because qmd's all-AND prefix query
        returns nothing for most natural-language questions), ``and`` (qmd parity)
        or ``msm`` (minimum-should-match: ``or`` ranking, documents matching fewer
        than ``bm25_min_match`` of the terms dropped).
    bm25_min_match : float
        ``msm`` only: a count of terms (>= 1) or a share of them (below 1, rounded
        down, at least one) — :func:`qmdlab.search.lexical.required_matches`.
    bm25_weight_filepath, bm25_weight_title, bm25_weight_body : float
        FTS5 ``bm25()`` column weights (>= 0, not all 0). The filepath column holds
        ``collection/path``; the body repeats the title's ``# heading``.
    bm25_weight_doc_queries : float
        FTS5 ``bm25()`` weight of the doc-queries column (stored as the FTS column ``expansions``):
        the kept generated queries of the document's chunks (document expansion by doc2query,
        ``qmdlab expand-docs``). 0 (the default) = the column is left out of the match
        (:mod:`qmdlab.search.lexical`); an index without doc-queries scores the same at any weight.
        Earlier name: ``bm25_weight_expansions`` (still read from config files).
    bm25_prefix : bool
        Bare query terms as prefix terms ``"term"*`` (``and`` mode always uses them).
    bm25_stopwords : bool
        Drop English stopwords from ``or``/``msm`` queries (unless nothing is left).
    bm25_query_tf : bool
        ``or``/``msm``: a word repeated in the query counts once per occurrence
        (BM25's query term frequency); off, each distinct term counts once.
    tags : tuple of str
        Requested front-matter tags for the tag rank-lift (a memory-recall rule).
    tag_lift : int
        Places a result whose tags overlap ``tags`` moves up (0 = off).
    dedupe_content : bool
        Identical content (same sha256 digest) under several paths is returned once, at its best
        rank; the other paths are listed in the trace notes (a content-digest dedupe; qmd
        returns every path).
    weight_original_phrase, weight_original_like, weight_original_trigram : float
        RRF weight of the extra keyword channels of the original query
        (:mod:`qmdlab.search.channels`): the whole query as a verbatim phrase, the substring
        ``LIKE`` leg and the CJK trigram channel. 0 (the default) = the channel is
        not run; ``norm_sum`` counts them with ``norm_weight_fts``.
    weight_original_heading : float
        RRF weight of the heading channel (documents whose section headings hold query
        terms; :func:`qmdlab.search.channels.heading_search`). 0 (the default) = not run. Not a
        learned-fusion feature (:data:`LIST_KEYS` is the learned model's feature set).
    min_score_fallback, fallback_max : float, int
        the fallback probe: when no result of a query reaches ``min_score``, keep at most
        ``fallback_max`` results scoring at least ``min_score - min_score_fallback`` (noted in the
        trace) instead of returning nothing. 0 (the default) = off: nothing below ``min_score``.
    chunker : str
        The chunking strategy the index must have been built with
        (:mod:`qmdlab.store.chunkers`: ``breakpoints``, ``headings``, ``fences-and-tables``); ``""``
        (the default) = whatever the index has. Chunks are stored, so this is an index setting
        (``qmdlab update --chunker``): a :class:`~qmdlab.pipeline.lab.Lab` refuses an index chunked
        otherwise, and ``qmdlab eval`` builds one suite index per chunker.
    vector_index : str
        ``exact`` (the default: every chunk vector scored) or ``hnsw``: candidates from an HNSW
        graph (FAISS, ``pip install 'qmdlab[ann]'``) kept next to the index and rebuilt when the
        vectors change (:mod:`qmdlab.search.ann`); approximate, for collections past ~300k chunks.
    ann_ef_search : int
        ``hnsw`` only: the search's candidate list (recall against latency, README "Scaling up").
    stage_budget_s : float
        Seconds each model call of a query (query embedding, expansion, rerank) may take;
        past it the stage is cut with a note, fail-open, and the call is asked to stop on its
        worker thread (:mod:`qmdlab.pipeline.budget`). 0 = unbounded.
    budget_s : float
        A deadline for the whole query in seconds (``qmdlab query --budget``, MCP ``budget``); 0 (the
        default) = none. BM25, vectors and fusion always run; a model stage (expansion, rerank) whose
        time, judged from the model's measured speed on this machine (:mod:`qmdlab.pipeline.speed`),
        would not fit in what is left is skipped before it starts, with a ``budget`` note; a stage
        that runs is capped at what is left (and at ``stage_budget_s``). ``candidate_limit`` (``-C``)
        still caps the pairs reranked.
    expand_types : str
        The expansion line types whose lists enter fusion, comma-separated (``lex,vec,hyde``, the
        default; ``lex`` = lex-only expansion). Read at fusion: every kept line is still retrieved and
        recorded, so a recording serves every choice (retune and the tuner change it in milliseconds);
        ``hyde: false`` or ``vector: false`` also stop those lines' query embeddings. A list weight of
        0 is not the same: under ``qmd_rrf`` its entries still add the top-rank bonus, set the best
        rank and count in ``n_lists``, and ``rrf``/``gated_rrf``/``combmnz`` ignore weights.
    expand_gate : str
        ``off`` (the default) or ``overlap``: per query, the expansion lists are dropped from fusion
        (the query ranks as with ``expand: false``, noted in the trace) when their top
        ``expand_gate_k`` fused documents hold less than ``expand_gate_min_overlap`` of the original
        lists' top ``expand_gate_k`` (each side fused alone by the config's fusion method). A query
        without original or without expansion lists is never gated. ``rerank``: only the expansion-list
        entries whose document is among the original lists' top ``expand_gate_k`` fused documents enter
        fusion (noted in the trace), so expansion re-orders what the query found and adds nothing else.
        Needs a formula fusion (not ``learned``).
    expand_gate_min_overlap : float
        The gate's threshold in [0, 1]: gated when overlap < this (0 never gates).
    expand_gate_k : int
        The gate's depth: the top ``expand_gate_k`` fused documents of each side (``overlap``), or of
        the original side that expansion may re-rank (``rerank``).

    Examples
    --------
    >>> c = PipelineConfig()
    >>> c.rrf_k, c.candidate_limit, c.blend_weights
    (60, 40, (0.75, 0.6, 0.4))
    >>> c.replace(rrf_k=10).rrf_k
    10
    >>> print(c.replace(fusion="rrf", limit=5).diff())
    fusion: 'qmd_rrf' -> 'rrf'
    limit: 10 -> 5
    """

    probe_limit: int = _option(20, "probe")
    strong_signal_min: float = _option(0.85, "probe")
    strong_signal_gap: float = _option(0.15, "probe")
    strong_signal: bool = _option(True, "probe")
    expand: bool = _option(True, "switches")
    hyde: bool = _option(True, "switches")
    vector: bool = _option(True, "switches")
    rerank: bool = _option(True, "switches")
    hyde_as_document: bool = _option(False, "switches")
    weight_original_fts: float = _option(2.0, "fusion", recorded=False)
    weight_original_vec: float = _option(2.0, "fusion", recorded=False)
    weight_lex: float = _option(1.0, "fusion", recorded=False)
    weight_vec: float = _option(1.0, "fusion", recorded=False)
    weight_hyde: float = _option(1.0, "fusion", recorded=False)
    rrf_k: int = _option(60, "fusion", recorded=False)
    bonus_rank1: float = _option(0.05, "fusion", recorded=False)
    bonus_rank23: float = _option(0.02, "fusion", recorded=False)
    fusion: str = _option("qmd_rrf", "fusion", recorded=False)
    candidate_limit: int = _option(40, "selection", recorded=False)
    list_limit: int = _option(20, "bm25")
    intent_term_bonus: float = _option(0.5, "selection")
    df_filter: bool = _option(False, "selection")
    blend: str = _option("position", "blend", recorded=False)
    blend_bands: tuple[int, int] = _option((3, 10), "blend", recorded=False, item="blend_band")
    blend_weights: tuple[float, float, float] = _option(
        (0.75, 0.60, 0.40), "blend", recorded=False, item="blend_weight"
    )
    min_score: float = _option(0.0, "finish", recorded=False)
    limit: int = _option(10, "finish", recorded=False)
    norm_weight_fts: float = _option(1.0, "fusion", recorded=False)
    norm_weight_vec: float = _option(0.9, "fusion", recorded=False)
    gate_margin: float = _option(0.1, "fusion", recorded=False)
    gate_max_take: int = _option(10, "fusion", recorded=False)
    bm25_mode: str = _option("or", "bm25")
    bm25_min_match: float = _option(0.5, "bm25")
    bm25_weight_filepath: float = _option(1.5, "bm25")
    bm25_weight_title: float = _option(4.0, "bm25")
    bm25_weight_body: float = _option(1.0, "bm25")
    bm25_prefix: bool = _option(True, "bm25")
    bm25_stopwords: bool = _option(True, "bm25")
    bm25_query_tf: bool = _option(True, "bm25")
    learned_model: str = _option("", "fusion", recorded=False)
    learned_prior: float = _option(60.0, "fusion", recorded=False)
    tags: tuple[str, ...] = _option((), "finish", recorded=False)
    tag_lift: int = _option(0, "finish", recorded=False)
    dedupe_content: bool = _option(True, "finish", recorded=False)
    stage_budget_s: float = _option(120.0, "budget")
    weight_original_phrase: float = _option(0.0, "channels", keyed_at_default=False)
    weight_original_like: float = _option(0.0, "channels", keyed_at_default=False)
    weight_original_trigram: float = _option(0.0, "channels", keyed_at_default=False)
    min_score_fallback: float = _option(0.0, "finish", recorded=False, keyed_at_default=False)
    fallback_max: int = _option(3, "finish", recorded=False, keyed_at_default=False)
    chunker: str = _option("", "selection", keyed_at_default=False)
    weight_original_heading: float = _option(0.0, "channels", keyed_at_default=False)
    vector_index: str = _option("exact", "vectors", keyed_at_default=False)
    ann_ef_search: int = _option(512, "vectors", keyed_at_default=False)
    budget_s: float = _option(0.0, "budget", keyed_at_default=False)
    bm25_weight_doc_queries: float = _option(0.0, "bm25", keyed_at_default=False)
    expand_types: str = _option("lex,vec,hyde", "fusion", recorded=False, keyed_at_default=False)
    expand_gate: str = _option("off", "fusion", recorded=False, keyed_at_default=False)
    expand_gate_min_overlap: float = _option(0.3, "fusion", recorded=False, keyed_at_default=False)
    expand_gate_k: int = _option(10, "fusion", recorded=False, keyed_at_default=False)

    def __post_init__(self) -> None:
        # Normalise sequences (YAML gives lists) so the config stays hashable.
        for name in ("blend_bands", "blend_weights", "tags"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "expand_types", _expand_types(self.expand_types))
        if self.expand_gate not in EXPAND_GATES:
            raise ConfigError(f"unknown expand_gate {self.expand_gate!r}; choose one of: {', '.join(EXPAND_GATES)}")
        if not 0.0 <= self.expand_gate_min_overlap <= 1.0:  # also rejects NaN
            raise ConfigError(
                f"option 'expand_gate_min_overlap' must be in [0, 1] (a share of the original top "
                f"expand_gate_k), got {self.expand_gate_min_overlap!r}"
            )
        if self.expand_gate != "off" and self.fusion == "learned":
            raise ConfigError(
                "expand_gate needs a formula fusion method (the gate fuses each side by it); "
                "fusion 'learned' has none: set expand_gate: off"
            )
        if self.fusion not in FUSION_CHOICES:
            raise ConfigError(
                f"unknown fusion method {self.fusion!r} (option 'fusion'); choose one of: {', '.join(FUSION_CHOICES)}"
            )
        if self.blend not in BLEND_METHODS:
            raise ConfigError(
                f"unknown blend method {self.blend!r} (option 'blend'); choose one of: {', '.join(BLEND_METHODS)}"
            )
        if self.bm25_mode not in BM25_MODES:
            raise ConfigError(f"unknown bm25_mode {self.bm25_mode!r}; choose one of: {', '.join(BM25_MODES)}")
        if not self.bm25_min_match >= 0:
            raise ConfigError(
                f"option 'bm25_min_match' must be >= 0 (a count of terms, or a share below 1), "
                f"got {self.bm25_min_match!r}"
            )
        weights = (self.bm25_weight_filepath, self.bm25_weight_title, self.bm25_weight_body)
        for name, w in zip(("bm25_weight_filepath", "bm25_weight_title", "bm25_weight_body"), weights):
            if not (w >= 0 and w != float("inf")):
                raise ConfigError(f"option {name!r} must be a finite number >= 0, got {w!r}")
        w = self.bm25_weight_doc_queries
        if not (w >= 0 and w != float("inf")):
            raise ConfigError(
                f"option 'bm25_weight_doc_queries' must be a finite number >= 0 (0 = column off), got {w!r}"
            )
        if not any(weights):
            raise ConfigError(
                "bm25_weight_filepath, bm25_weight_title and bm25_weight_body are all 0: "
                "BM25 would score nothing; give at least one column a weight above 0"
            )
        if not self.learned_prior >= 0:
            raise ConfigError(f"option 'learned_prior' must be >= 0, got {self.learned_prior!r}")
        if self.fusion == "learned" and not self.learned_model:
            raise ConfigError(
                "fusion 'learned' needs option 'learned_model' (the model file written by "
                "`qmdlab tune SUITE --learn --out DIR`)"
            )
        if len(self.blend_bands) != 2 or not 0 < self.blend_bands[0] <= self.blend_bands[1]:
            raise ConfigError(f"blend_bands must be two increasing ranks like [3, 10], got {list(self.blend_bands)}")
        if len(self.blend_weights) != 3:
            raise ConfigError(
                f"blend_weights must be three weights like [0.75, 0.6, 0.4], got {list(self.blend_weights)}"
            )
        for name in ("probe_limit", "candidate_limit", "list_limit", "limit", "gate_max_take", "expand_gate_k"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"option {name!r} must be at least 1, got {getattr(self, name)!r}")
        if self.rrf_k < 0:
            raise ConfigError(f"option 'rrf_k' must be >= 0, got {self.rrf_k!r}")
        if not self.min_score_fallback >= 0 or int(self.fallback_max) < 0:
            raise ConfigError(
                f"options 'min_score_fallback' (>= 0) and 'fallback_max' (>= 0) got "
                f"{self.min_score_fallback!r} and {self.fallback_max!r}"
            )
        if self.vector_index not in ("exact", "hnsw"):
            raise ConfigError(f"unknown vector_index {self.vector_index!r}; choose one of: exact, hnsw")
        if int(self.ann_ef_search) < 1:
            raise ConfigError(f"option 'ann_ef_search' must be at least 1, got {self.ann_ef_search!r}")
        if self.chunker:
            from qmdlab.store.chunkers import check_chunker

            check_chunker(self.chunker, "option 'chunker':")
        for name in self.stage_fields()["channels"]:
            if not (getattr(self, name) >= 0 and getattr(self, name) != float("inf")):
                raise ConfigError(
                    f"option {name!r} must be a finite number >= 0 (0 = channel off), got {getattr(self, name)!r}"
                )
        if not (self.budget_s >= 0 and self.budget_s != float("inf")):  # also rejects NaN
            raise ConfigError(
                f"option 'budget_s' (--budget) must be a number of seconds >= 0 (0 = no deadline), "
                f"got {self.budget_s!r}"
            )
        if not self.stage_budget_s >= 0:  # also rejects NaN
            raise ConfigError(
                f"option 'stage_budget_s' must be >= 0 seconds (0 = unbounded), got {self.stage_budget_s!r}"
            )

    # -- construction ---------------------------------------------------------------
    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Names of every option, in declaration order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def stage_fields(cls) -> dict[str, tuple[str, ...]]:
        """``{stage: option names}`` in :data:`CONFIG_STAGES`' order, each in declaration order.

        >>> PipelineConfig.stage_fields()["vectors"]
        ('vector_index', 'ann_ef_search')
        """
        return {stage: tuple(f.name for f in fields(cls) if f.metadata["stage"] == stage) for stage in CONFIG_STAGES}

    @classmethod
    def recorded_fields(cls) -> frozenset[str]:
        """The options whose change changes what a recording holds (the queries must be recorded
        again); the others re-run on recorded lists (:func:`_option`'s ``recorded``).

        >>> "rrf_k" in PipelineConfig.recorded_fields(), "bm25_mode" in PipelineConfig.recorded_fields()
        (False, True)
        """
        return frozenset(f.name for f in fields(cls) if f.metadata["recorded"])

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, *, source: str = "config") -> PipelineConfig:
        """Build from a mapping; an unknown key is a :class:`ConfigError` naming it.

        A nested ``pipeline:`` mapping is accepted so the section can live inside a
        larger file (eval suites).

        >>> PipelineConfig.from_dict({"rrf_k": 30}).rrf_k
        30
        >>> PipelineConfig.from_dict({"rrf": 30})
        Traceback (most recent call last):
        ...
        qmdlab.errors.ConfigError: config: unknown pipeline option 'rrf' (did you mean 'rrf_k'?); valid options: probe_limit, ...
        """
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: expected a mapping of pipeline options, got {type(data).__name__}")
        if set(data) == {"pipeline"} and isinstance(data["pipeline"], Mapping):
            data = data["pipeline"]
        if any(old in data for old in RENAMED_OPTIONS):
            data = _renamed(data, source)
        names = cls.field_names()
        for key in data:
            if key not in names:
                import difflib

                close = difflib.get_close_matches(str(key), names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"{source}: unknown pipeline option {key!r}{hint}; valid options: {', '.join(names)}")
        out = cls(**_coerce(dict(data), source))
        object.__setattr__(out, "_given", frozenset(data))
        return out

    @classmethod
    def from_yaml(cls, path: str | Path) -> PipelineConfig:
        """Load from a YAML file (top-level mapping, or a ``pipeline:`` section)."""
        import yaml

        path = Path(path)
        data = _read_config_file(path, yaml.safe_load, yaml.YAMLError, "YAML")
        return cls.from_dict(_resolve_model(data or {}, path), source=str(path))

    @classmethod
    def from_toml(cls, path: str | Path) -> PipelineConfig:
        """Load from a TOML file (top-level keys, or a ``[pipeline]`` table)."""
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef]

        path = Path(path)
        data = _read_config_file(path, tomllib.loads, tomllib.TOMLDecodeError, "TOML")
        return cls.from_dict(_resolve_model(data, path), source=str(path))

    @classmethod
    def from_file(cls, path: str | Path) -> PipelineConfig:
        """Dispatch on the suffix: ``.toml`` → TOML, anything else → YAML."""
        return cls.from_toml(path) if str(path).endswith(".toml") else cls.from_yaml(path)

    # -- use ------------------------------------------------------------------------
    def replace(self, **overrides: Any) -> PipelineConfig:
        """A copy with some options changed; unknown names raise :class:`ConfigError`."""
        if not overrides:
            return self
        overrides = _renamed(overrides, "override")
        merged = self.to_dict()
        merged.update(overrides)
        out = type(self).from_dict(merged, source="override")
        object.__setattr__(out, "_given", getattr(self, "_given", frozenset()) | frozenset(overrides))
        return out

    def given(self) -> frozenset[str]:
        """The options the user set: those a file or mapping named (:meth:`from_dict`, kept through
        :meth:`replace`, which adds its overrides) and those holding a value other than their default.
        Not part of equality or :meth:`to_dict`; :func:`qmdlab.pipeline.stages.plan_stages` lets a given
        ``expand``/``rerank`` win over the preset's default.

        >>> sorted(PipelineConfig.from_dict({"rerank": True}).replace(rrf_k=10).given())
        ['rerank', 'rrf_k']
        >>> sorted(PipelineConfig(expand=False).given()), sorted(PipelineConfig().given())
        (['expand'], [])
        """
        changed = {f.name for f in fields(self) if getattr(self, f.name) != f.default}
        return frozenset(getattr(self, "_given", frozenset())) | changed

    def tag_preference(self, tags: Any = (), lift: int | None = None) -> dict[str, Any]:
        """The overrides that prefer ``tags`` (the tag rank-lift), one rule for every front end.

        ``tags`` given: they become ``tags``; ``lift`` given: it becomes ``tag_lift``; tags given
        without a lift while this config's ``tag_lift`` is 0: :data:`DEFAULT_TAG_LIFT`.

        >>> c = PipelineConfig()
        >>> c.tag_preference(["git"]), c.tag_preference(["git"], 5), c.tag_preference()
        ({'tags': ('git',), 'tag_lift': 3}, {'tags': ('git',), 'tag_lift': 5}, {})
        >>> PipelineConfig(tag_lift=2).tag_preference(["git"])
        {'tags': ('git',)}
        """
        tags = (tags,) if isinstance(tags, str) else tuple(tags or ())
        out: dict[str, Any] = {"tags": tags} if tags else {}
        if lift is None and tags and not self.tag_lift:
            lift = DEFAULT_TAG_LIFT
        if lift is not None:
            out["tag_lift"] = int(lift)
        return out

    def flat(self, name: str) -> Any:
        """An option, or a blend tuple's item by its flat name (:data:`BLEND_ITEMS`).

        >>> c = PipelineConfig()
        >>> c.flat("blend_weight_2"), c.flat("blend_band_1"), c.flat("rrf_k")
        (0.6, 3, 60)
        """
        item = _blend_item(name)
        if item is not None:
            return getattr(self, item[0])[item[1]]
        if name not in self.field_names():
            raise ConfigError(f"unknown option {name!r}; see PipelineConfig's fields or BLEND_ITEMS")
        return getattr(self, name)

    def replace_flat(self, **params: Any) -> PipelineConfig:
        """:meth:`replace` that also takes flat blend names (:data:`BLEND_ITEMS`): the items are
        assembled into their tuples (weights as float, bands as int; band 2 kept >= band 1).

        >>> PipelineConfig().replace_flat(blend_band_1=8, blend_band_2=5, rrf_k=10).blend_bands
        (8, 8)
        >>> PipelineConfig().replace_flat(blend_weight_3=0.1).blend_weights
        (0.75, 0.6, 0.1)
        """
        plain = {k: v for k, v in params.items() if _blend_item(k) is None}
        items: dict[str, list[Any]] = {"blend_weights": list(self.blend_weights), "blend_bands": list(self.blend_bands)}
        for k, v in params.items():
            item = _blend_item(k)
            if item is not None:
                items[item[0]][item[1]] = int(v) if item[0] == "blend_bands" else float(v)
        items["blend_bands"][1] = max(items["blend_bands"])
        return self.replace(**plain, **{k: tuple(v) for k, v in items.items()})

    def recorded_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` of the :meth:`recorded_fields` only: what the traces of a recording depend
        on, and so the trace cache's key (:func:`qmdlab.eval.record.record` re-runs the other options
        on cached traces with :func:`qmdlab.pipeline.retune.retune`).

        >>> a, b = PipelineConfig(), PipelineConfig(rrf_k=10, candidate_limit=20, blend="score")
        >>> a.recorded_dict() == b.recorded_dict(), a.recorded_dict() == a.replace(bm25_mode="and").recorded_dict()
        (True, False)
        """
        keep = self.recorded_fields()
        return {k: v for k, v in self.to_dict().items() if k in keep}

    def to_dict(self) -> dict[str, Any]:
        """Plain types only (tuples become lists) so it round-trips through YAML/JSON.

        Options in :data:`OMITTED_AT_DEFAULT` are left out while they hold their default (the
        trace-cache key of older configs must not change).

        >>> PipelineConfig.from_dict(PipelineConfig().to_dict()) == PipelineConfig()
        True
        >>> "weight_original_like" in PipelineConfig().to_dict(), PipelineConfig(weight_original_like=1.0).to_dict()["weight_original_like"]
        (False, 1.0)
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in OMITTED_AT_DEFAULT and value == f.default:
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def diff(self, other: PipelineConfig | None = None) -> str:
        """The options that differ from ``other`` (the defaults), one per line."""
        other = other or type(self)()
        lines = [
            f"{f.name}: {getattr(other, f.name)!r} -> {getattr(self, f.name)!r}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]
        return "\n".join(lines) if lines else "(defaults)"

    def ann(self) -> Any:
        """The :class:`~qmdlab.search.ann.AnnConfig` of ``vector_index: hnsw``, else ``None`` (exact).

        >>> PipelineConfig().ann() is None, PipelineConfig(vector_index="hnsw", ann_ef_search=64).ann().ef_search
        (True, 64)
        """
        if self.vector_index == "exact":
            return None
        from qmdlab.search.ann import AnnConfig

        return AnnConfig(ef_search=int(self.ann_ef_search))

    def lexical(self) -> dict[str, Any]:
        """The BM25 knobs as keyword arguments of :func:`qmdlab.search.bm25_search`.

        ``weights`` has a fourth item, the doc-queries column's, when that weight is above 0.

        >>> PipelineConfig(bm25_weight_title=2).lexical()["weights"]
        (1.5, 2.0, 1.0)
        >>> PipelineConfig(bm25_weight_doc_queries=0.5).lexical()["weights"]
        (1.5, 4.0, 1.0, 0.5)
        """
        weights: tuple[float, ...] = (
            float(self.bm25_weight_filepath),
            float(self.bm25_weight_title),
            float(self.bm25_weight_body),
        )
        if self.bm25_weight_doc_queries > 0:
            weights += (float(self.bm25_weight_doc_queries),)
        return {
            "mode": self.bm25_mode,
            "weights": weights,
            "prefix": self.bm25_prefix or self.bm25_mode == "and",
            "stopwords": self.bm25_stopwords,
            "query_tf": self.bm25_query_tf,
            "min_match": float(self.bm25_min_match),
        }

    def list_weight(self, source: str, query_type: str) -> float:
        """RRF weight of a retrieval list from its source (fts|vec) and query type.

        >>> c = PipelineConfig()
        >>> c.list_weight("fts", "original"), c.list_weight("vec", "hyde")
        (2.0, 1.0)
        """
        key = f"original_{source}" if query_type == "original" else query_type
        if key not in LIST_KEYS and key != "original_heading":
            raise ConfigError(f"no weight for list type {source}/{query_type}; known: {', '.join(LIST_KEYS)}")
        return float(getattr(self, f"weight_{key}"))


def _expand_types(value: Any) -> str:
    """``expand_types`` in its one spelling: the types of :data:`EXPAND_TYPES` named, comma-separated,
    in that order (a list or tuple is accepted too); an unknown or missing type is a :class:`ConfigError`.

    >>> _expand_types("hyde, lex"), _expand_types(["vec"])
    ('lex,hyde', 'vec')
    >>> _expand_types("lex,query")
    Traceback (most recent call last):
    ...
    qmdlab.errors.ConfigError: option 'expand_types': unknown type 'query'; give some of lex, vec, hyde (comma-separated)
    """
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    given = {t.strip().lower() for t in items if t.strip()}
    for t in sorted(given - set(EXPAND_TYPES)):
        raise ConfigError(
            f"option 'expand_types': unknown type {t!r}; give some of {', '.join(EXPAND_TYPES)} (comma-separated)"
        )
    if not given:
        raise ConfigError("option 'expand_types' names no type; give some of lex, vec, hyde (or set expand: false)")
    return ",".join(t for t in EXPAND_TYPES if t in given)


def _blend_item(name: str) -> tuple[str, int] | None:
    """``(tuple field, 0-based index)`` of a flat blend name (:data:`BLEND_ITEMS`), ``None`` for any
    other name; an index past the tuple raises :class:`ConfigError`.

    >>> _blend_item("blend_band_2"), _blend_item("blend_weights")
    (('blend_bands', 1), None)
    """
    prefix, _, number = name.rpartition("_")
    field = BLEND_ITEMS.get(prefix)
    if field is None or not number.isdigit():
        return None
    size = len(getattr(PipelineConfig, field))
    if not 1 <= int(number) <= size:
        raise ConfigError(f"unknown option {name!r}: {field} has items {prefix}_1..{prefix}_{size}")
    return field, int(number) - 1


def _resolve_model(data: Any, path: Path) -> Any:
    """Make a relative ``learned_model`` path relative to the config file's folder."""
    if not isinstance(data, Mapping):
        return data
    pipeline = data.get("pipeline")
    inner: Mapping = pipeline if set(data) == {"pipeline"} and isinstance(pipeline, Mapping) else data
    model = inner.get("learned_model")
    if isinstance(model, str) and model and not Path(model).is_absolute():
        inner = dict(inner)
        inner["learned_model"] = str((path.parent / model).resolve())
    return inner


def _coerce(data: dict[str, Any], source: str) -> dict[str, Any]:
    """Check value types against the field defaults (ints may stand for floats)."""
    defaults = {f.name: f.default for f in fields(PipelineConfig)}
    for key, value in data.items():
        want = defaults[key]
        ok = True
        if isinstance(want, bool):
            ok = isinstance(value, bool)
        elif isinstance(want, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(want, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if ok:
                data[key] = float(value)
        elif isinstance(want, str):
            ok = isinstance(value, str) or (key == "expand_types" and isinstance(value, (list, tuple)))
        elif isinstance(want, tuple):
            ok = isinstance(value, (list, tuple, str))
        if not ok:
            raise ConfigError(f"{source}: option {key!r} must be {type(want).__name__}, got {value!r}; fix the value")
    return data


OMITTED_AT_DEFAULT = frozenset(f.name for f in fields(PipelineConfig) if not f.metadata["keyed_at_default"])
"""The options :meth:`PipelineConfig.to_dict` leaves out while they hold their default (declared with
``keyed_at_default=False``, :func:`_option`)."""

BLEND_ITEMS = {f.metadata["item"]: f.name for f in fields(PipelineConfig) if f.metadata["item"]}
"""Flat names of the blend tuples' items, the one vocabulary of the tuner (``qmdlab/eval/optimise.py``),
the tune notebook's sliders and tuned-config trials: ``blend_weight_1..3`` are the items of
``blend_weights`` (the position score's weight in each band), ``blend_band_1..2`` those of
``blend_bands`` (the last fused rank of bands 1 and 2). :meth:`PipelineConfig.flat` reads one,
:meth:`PipelineConfig.replace_flat` sets them."""

__all__ = [
    "PipelineConfig",
    "FUSION_METHODS",
    "FUSION_CHOICES",
    "BLEND_METHODS",
    "BLEND_ITEMS",
    "BM25_MODES",
    "EXPAND_TYPES",
    "EXPAND_GATES",
    "LIST_KEYS",
    "OMITTED_AT_DEFAULT",
    "CONFIG_STAGES",
    "DEFAULT_TAG_LIFT",
]
