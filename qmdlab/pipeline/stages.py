"""Which model stages a query runs by default, per model preset, and the line that says why.

Every front end (``qmdlab query``, the MCP server, :func:`qmdlab.query`, the explore notebook)
builds its :class:`~qmdlab.pipeline.config.PipelineConfig` through :func:`plan_stages`; they only
pass their flags. The rule, highest priority first:

1. a flag (``--expand``/``--no-expand``, ``--rerank``/``--no-rerank``, the MCP ``expand``/``rerank``
   arguments, ``qmdlab.query(expand=..., rerank=...)``);
2. the config, when it names the option (a ``--config`` file or mapping with ``expand:``/``rerank:``,
   or a config whose field was set to ``False``: :meth:`PipelineConfig.given`);
3. the preset's default, :data:`STAGE_DEFAULTS` — chosen by measurement (``docs/results/defaults.md``).

The offline and tiny presets run BM25 + vectors + fusion: their small generic instruct models
measured no significant held-out gain as expander or reranker, at 6–9 s per expansion and ~3 s per
rerank pair on 2 CPU cores. The qmd preset keeps qmd's whole pipeline (its fine-tuned expander and
Qwen3 reranker), the fake preset too (the test models cost nothing and every stage gets exercised).

Evaluation goes through the same rule: ``qmdlab eval`` and ``qmdlab tune`` plan with their
``--expand``/``--rerank`` flags (so the offline preset's ablation runs no LLM stage unless asked),
the notebooks' recording tiers pass each stage as a flag, and the frontier — whose LLM rows exist to
measure the stages — passes its own ``defaults`` with the reason to show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict

from qmdlab.pipeline.config import PipelineConfig

STAGES = ("expand", "rerank")
"""The optional model stages a preset switches (BM25, vectors and fusion always run)."""

STAGE_DEFAULTS: dict[str, dict[str, bool]] = {
    "offline": {"expand": False, "rerank": False},
    "offline-mini": {"expand": False, "rerank": False},
    "tiny": {"expand": False, "rerank": False},
    "offline-gemma": {"expand": False, "rerank": False},
    "qmd": {"expand": True, "rerank": True},
    "fake": {"expand": True, "rerank": True},
}
"""Per preset: whether each optional stage runs when neither a flag nor the config says.
A preset not listed runs every stage (the :class:`PipelineConfig` defaults, qmd's pipeline)."""

STAGE_EVIDENCE: dict[str, str] = {
    "offline": "measured: no significant held-out gain, docs/results/defaults.md",
    "offline-mini": "as offline: the same expander and reranker",
    "tiny": "as offline: smaller models of the same kind",
    "offline-gemma": "as offline: the same expander and reranker",
    "qmd": "qmd's pipeline",
    "fake": "test models: every stage exercised",
}
"""Why each preset's defaults are what they are (a short pointer, shown by ``qmdlab models``-style listings)."""

_NAMES = {"expand": "expansion", "rerank": "rerank"}
_FLAGS = {"expand": ("--expand", "--no-expand"), "rerank": ("--rerank", "--no-rerank")}


@dataclass(frozen=True)
class StagePlan:
    """The stage switches a front end chose and the reason of each.

    ``source[stage]`` is ``"flag"``, ``"config"`` or ``"preset"``.
    """

    preset: str
    expand: bool
    rerank: bool
    source: Mapping[str, str] = field(default_factory=dict)
    default_reason: str = ""
    """Why a stage no flag or config decided is on or off, when a front end's own ``defaults``
    replaced the preset's (:func:`plan_stages`)."""

    def reason(self, stage: str) -> str:
        """``"offline preset default; --expand turns it on"``, ``"--no-rerank"``, ``"config"``."""
        on = getattr(self, stage)
        flag_on, flag_off = _FLAGS[stage]
        src = self.source.get(stage, "preset")
        if src == "flag":
            return flag_on if on else flag_off
        toggle = f"{flag_off} turns it off" if on else f"{flag_on} turns it on"
        if src == "config":
            return f"config; {toggle}"
        if self.default_reason:
            return f"{self.default_reason}; {toggle}"
        if self.preset == CUSTOM:
            return f"models given by the caller; {toggle}"
        return f"{self.preset} preset default; {toggle}"

    def line(self, trace: Any = None) -> str:
        """The one-line summary: the stages that ran, then each optional stage's state and reason.

        With a trace, a stage switched on that did not run for this query (strong-signal skip, no
        model, over the budget) says so with the stage's first note.

        >>> p = StagePlan("offline", False, False, {"expand": "preset", "rerank": "preset"})
        >>> p.line()
        'stages: bm25+vector+fusion; expansion off (offline preset default; --expand turns it on), rerank off (offline preset default; --rerank turns it on)'
        """
        ran = self.ran(trace)
        order = [s for s in ("expand", "bm25", "vector", "fusion", "rerank", "blend") if ran.get(s)]
        names = {
            "expand": "expansion",
            "bm25": "bm25",
            "vector": "vector",
            "fusion": "fusion",
            "rerank": "rerank",
            "blend": "blend",
        }
        parts = []
        for stage in STAGES:
            on = getattr(self, stage)
            text = f"{_NAMES[stage]} {'on' if on else 'off'} ({self.reason(stage)})"
            if on and trace is not None and not ran.get(stage):
                why = _first_note(trace, stage)
                text += " but not run for this query" + (f": {why}" if why else "")
            parts.append(text)
        if trace is not None and not ran.get("vector"):
            why = next((m for m in trace.notes_for() if "vector" in m.lower()), "")
            parts.append("vectors not run for this query" + (f": {why}" if why else ""))
        return f"stages: {'+'.join(names[s] for s in order)}; " + ", ".join(parts)

    def ran(self, trace: Any = None) -> dict[str, bool]:
        """Which stages produced output (from the trace), or would run (without one)."""
        if trace is None:
            return {
                "expand": self.expand,
                "bm25": True,
                "vector": True,
                "fusion": True,
                "rerank": self.rerank,
                "blend": self.rerank,
            }
        # columns read without building the trace's frames (Trace.column)
        sources = set(trace.column("lists", "source"))
        # the expander answered (its note counts the lines it kept, maybe none), from the model or the cache
        expanded = "expander" in trace.column("expansions", "origin") or any(
            " lines kept" in m for m in trace.notes_for("expand")
        )
        reranked = trace.height("rerank") > 0
        return {
            "expand": expanded,
            "bm25": "fts" in sources or trace.height("lists") == 0,
            "vector": "vec" in sources,
            "fusion": True,
            "rerank": reranked,
            "blend": reranked,
        }


def _first_note(trace: Any, stage: str) -> str:
    msgs = trace.notes_for(stage)
    return msgs[0] if msgs else ""


def stage_defaults(preset: str) -> dict[str, bool]:
    """The preset's default for each optional stage (every stage on for a preset not listed).

    >>> stage_defaults("offline"), stage_defaults("qmd")
    ({'expand': False, 'rerank': False}, {'expand': True, 'rerank': True})
    """
    return dict(STAGE_DEFAULTS.get(preset, {s: True for s in STAGES}))


CUSTOM = "custom"
"""The preset name of models a caller passed in (an MCP ``Engine(models=...)``, ``qmdlab.query(models=...)``)
without naming a preset: every stage runs, as the config says."""


def preset_name(preset: str | None = None, *, models_given: bool = False) -> str:
    """The preset a front end's models come from: the argument, ``$QMDLAB_PRESET``, the model
    config (``$QMDLAB_HOME/models.yaml``), else the library default — as :func:`qmdlab.models.load_models`;
    :data:`CUSTOM` for models the caller passed without a preset.

    >>> preset_name("qmd"), preset_name(None, models_given=True)
    ('qmd', 'custom')
    """
    if preset is None and models_given:
        return CUSTOM
    from qmdlab.models.registry import resolve_refs

    return resolve_refs(preset, check=False)[0]  # the preset only: no model is used here


def plan_stages(
    config: PipelineConfig | None = None,
    preset: str | None = None,
    *,
    expand: bool | None = None,
    rerank: bool | None = None,
    defaults: Mapping[str, bool] | None = None,
    default_reason: str = "",
) -> tuple[PipelineConfig, StagePlan]:
    """The config a front end runs, with ``expand``/``rerank`` decided by the rule of this module.

    Parameters
    ----------
    config : PipelineConfig, optional
        The base config (default :class:`PipelineConfig`); its ``expand``/``rerank`` count only where
        :meth:`PipelineConfig.given` says the user set them.
    preset : str, optional
        The model preset (``None``: resolved as :func:`preset_name`).
    expand, rerank : bool, optional
        A front end's flags; ``None`` = not given.
    defaults : mapping, optional
        A front end's own default per stage in place of the preset's (the frontier measures every
        stage); ``default_reason`` says why, in :meth:`StagePlan.reason`.

    >>> cfg, plan = plan_stages(PipelineConfig(), "offline")
    >>> cfg.expand, cfg.rerank, plan.source["expand"]
    (False, False, 'preset')
    >>> cfg, plan = plan_stages(PipelineConfig.from_dict({"rerank": True}), "offline", expand=True)
    >>> cfg.expand, cfg.rerank, plan.reason("rerank")
    (True, True, 'config; --no-rerank turns it off')
    >>> plan_stages(PipelineConfig(), "qmd", rerank=False)[0].rerank
    False
    >>> on = {"expand": True, "rerank": True}
    >>> plan_stages(PipelineConfig(), "offline", defaults=on, default_reason="measured")[1].reason("rerank")
    'measured; --no-rerank turns it off'
    """
    base = config if config is not None else PipelineConfig()
    name = preset if preset is not None else preset_name()
    defaults = {**stage_defaults(name), **(defaults or {})}
    given = base.given()
    chosen: dict[str, bool] = {}
    source: dict[str, str] = {}
    for stage, flag in (("expand", expand), ("rerank", rerank)):
        if flag is not None:
            chosen[stage], source[stage] = bool(flag), "flag"
        elif stage in given:
            chosen[stage], source[stage] = bool(getattr(base, stage)), "config"
        else:
            chosen[stage], source[stage] = defaults[stage], "preset"
    cfg = base.replace(**{s: v for s, v in chosen.items() if getattr(base, s) != v})
    return cfg, StagePlan(name, chosen["expand"], chosen["rerank"], source, default_reason)


class ModelRoles(TypedDict, total=False):
    """``load_models`` per-role overrides (:func:`model_roles`)."""

    expand: str
    rerank: str


def model_roles(config: PipelineConfig) -> ModelRoles:
    """``load_models`` overrides that leave a switched-off stage's model unloaded.

    >>> model_roles(PipelineConfig(expand=False, rerank=False))
    {'expand': 'none', 'rerank': 'none'}
    """
    roles: ModelRoles = {}
    if not config.expand:
        roles["expand"] = "none"
    if not config.rerank:
        roles["rerank"] = "none"
    return roles


__all__ = [
    "CUSTOM",
    "STAGES",
    "STAGE_DEFAULTS",
    "STAGE_EVIDENCE",
    "StagePlan",
    "stage_defaults",
    "preset_name",
    "plan_stages",
    "model_roles",
    "ModelRoles",
]
