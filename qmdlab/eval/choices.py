"""What the notebooks offer to record and open: the recording tiers of a suite and the recording
picker's choices (the same for the tune and evaluate notebooks)."""

from __future__ import annotations

from typing import NamedTuple

from qmdlab.eval.record import RecordingInfo, suite_config
from qmdlab.eval.suites import Suite
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.stages import ModelRoles

#: Fused documents ``make demo``'s LLM tier reranks (``scripts/demo.py --candidates``): the notebook
#: offers the same tier, so recording more of it extends the demo's trace cache.
DEMO_CANDIDATES = 3


class Tier(NamedTuple):
    """A recording a front end offers (:func:`tiers`): a config and the model roles it needs.

    Attributes
    ----------
    name : str
    config : PipelineConfig
    roles : ModelRoles
        ``load_models`` per-role overrides (``{"expand": "none", "rerank": "none"}`` for retrieval).
    """

    name: str
    config: PipelineConfig
    roles: ModelRoles


def tiers(suite: Suite) -> list[Tier]:
    """What can be recorded for ``suite``, cheapest first: the retrieval tier (BM25 + vectors, no
    LLM; what ``make demo`` records on every query), the demo's LLM tier (expansion + rerank of
    the top 5) and the suite's full pipeline; when the suite's index has expansions written
    (``qmdlab expand-docs``), a retrieval tier with the doc-queries column weighted comes second.
    The same config and model roles give the same
    cache key as ``scripts/demo.py``, so recording more queries extends the demo's recording.
    Each tier's stages and model roles come from the stage rule of every front end
    (:func:`qmdlab.pipeline.stages.plan_stages`).

    >>> from qmdlab.eval.suites import get_suite
    >>> [t.name for t in tiers(get_suite("default"))][0]
    'retrieval: BM25 + vectors, no LLM'
    """
    from qmdlab.eval.ablation import DOC_QUERY_WEIGHT, index_has_doc_queries
    from qmdlab.pipeline.stages import CUSTOM, model_roles, plan_stages

    def tier(name: str, config: PipelineConfig, llm: bool) -> Tier:
        # a retrieval tier turns both stages off as flags; an LLM tier runs every stage the suite's
        # config does not turn off (CUSTOM: no preset's defaults, each tier's models are its roles)
        flag = None if llm else False
        cfg, _ = plan_stages(config, CUSTOM, expand=flag, rerank=flag)
        return Tier(name, cfg, model_roles(cfg))

    base = suite_config(suite)
    expanded = (
        [
            tier(
                "retrieval + doc-queries column: BM25 with generated queries + vectors, no LLM",
                base.replace(bm25_weight_doc_queries=DOC_QUERY_WEIGHT),
                False,
            )
        ]
        if index_has_doc_queries(suite, base)
        else []
    )
    return [
        tier("retrieval: BM25 + vectors, no LLM", base, False),
        *expanded,
        tier(
            f"LLM tier of make demo: expansion + rerank top {DEMO_CANDIDATES}",
            base.replace(candidate_limit=DEMO_CANDIDATES),
            True,
        ),
        tier(f"full pipeline: expansion + rerank top {base.candidate_limit}", base, True),
    ]


def picker_choices(available: list[RecordingInfo], new_key: str | None = None) -> tuple[dict[str, str], str | None]:
    """``({label: key}, label to preselect)`` for a recording picker: the one just recorded
    (``new_key``), else the first of :func:`recorded`'s order (most queries: after ``make demo``,
    its retrieval tier on every query), else ``None`` when nothing is recorded.

    >>> from qmdlab.pipeline.config import PipelineConfig
    >>> a = RecordingInfo("k1", PipelineConfig(), [], ["1", "2"], "A · 2 queries", "", 0.0)
    >>> b = RecordingInfo("k2", PipelineConfig(), [], ["1"], "B · 1 queries", "", 0.0)
    >>> picker_choices([a, b], "k2")
    ({'A · 2 queries': 'k1', 'B · 1 queries': 'k2'}, 'B · 1 queries')
    >>> picker_choices([a, b]), picker_choices([])
    (({'A · 2 queries': 'k1', 'B · 1 queries': 'k2'}, 'A · 2 queries'), ({}, None))
    """
    chosen = next((r.label for r in available if r.key == new_key), None)
    return {r.label: r.key for r in available}, chosen or (available[0].label if available else None)
