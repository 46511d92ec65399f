"""A finished ``qmdlab train reranker`` run's held-out scores as a Study (the tune notebook's rerank source).

The K-fold run (:mod:`qmdlab.training.reranker`) reranks every labelled query once, with the model of the
fold that never saw it, and stores those scores in ``<out>/heldout_scores.parquet`` next to the
traces it recorded (``<out>/recorded``). :func:`load_heldout_study` puts the two together: the
recorded fused traces with the held-out scores as their rerank table, restricted to the queries
that have held-out scores. Re-blending that study (bands, weights, blend method) moves nDCG@10 on
held-out queries only — no model call, no training query. :func:`finished_runs` lists the run
directories a front end can offer for a suite.

>>> finished_runs("default", roots=["/nonexistent"])
[]
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import polars as pl
import yaml

from qmdlab.errors import QmdlabError
from qmdlab.training import rundir

if TYPE_CHECKING:
    from qmdlab.eval.study import Study
    from qmdlab.pipeline.config import PipelineConfig

SCORES = "heldout_scores.parquet"
RECORDED = "recorded"


class HeldOutStudy(NamedTuple):
    """What :func:`load_heldout_study` returns.

    Attributes
    ----------
    out : Path
        The run directory.
    suite : str
        The suite the run was trained and evaluated on.
    study : qmdlab.eval.study.Study
        Recorded fused traces whose rerank table is the held-out scores; held-out queries only.
    fused : qmdlab.pipeline.config.PipelineConfig
        The recorded configuration with rerank off and ``candidate_limit`` = the run's rerank
        depth: the fused order the reranker is compared against.
    start : qmdlab.pipeline.config.PipelineConfig
        ``fused`` with rerank on (the pipeline's default blend): where blend controls start.
    qids : list of str
        The held-out queries (each scored by a model that never saw it).
    """

    out: Path
    suite: str
    study: Study
    fused: PipelineConfig
    start: PipelineConfig
    qids: list


def is_finished_run(out: str | Path) -> bool:
    """True when ``out`` is a finished reranker run with held-out scores and recorded traces."""
    d = Path(out)
    return rundir.done_result(d) is not None and (d / SCORES).is_file() and (d / RECORDED).is_dir()


def run_suite_name(out: str | Path) -> str | None:
    """The suite a finished run used (from its ``DONE`` result), or None."""
    res = rundir.done_result(out)
    return None if res is None else res.get("suite")


def finished_runs(suite: str, roots: Iterable[str | Path] = ("runs",), extra: Iterable[str | Path] = ()) -> list[Path]:
    """Finished reranker runs of ``suite``: the directories directly under ``roots`` plus ``extra``.

    Parameters
    ----------
    suite : str
        Suite name; runs of other suites are left out (their traces belong to another index).
    roots : iterable of path
        Folders whose sub-directories are run directories (``runs/`` by default, relative to
        the working directory, where ``make train-reranker`` writes ``runs/reranker``).
    extra : iterable of path
        Run directories named explicitly (e.g. the tune notebook's ``--reranker DIR``).

    Returns
    -------
    list of Path
        Sorted, de-duplicated; each :func:`is_finished_run` and of ``suite``.
    """
    found: dict[Path, Path] = {}
    candidates = [Path(e) for e in extra]
    for root in roots:
        r = Path(root)
        if r.is_dir():
            candidates += sorted(p for p in r.iterdir() if p.is_dir())
    for p in candidates:
        if is_finished_run(p) and run_suite_name(p) == suite:
            found.setdefault(p.resolve(), p)
    return sorted(found.values(), key=str)


def load_heldout_study(out: str | Path) -> HeldOutStudy:
    """The recorded traces of run ``out`` with its held-out scores as the rerank table.

    Raises
    ------
    QmdlabError
        When ``out`` is not a finished run with held-out scores (names the command that makes one).
    """
    from qmdlab.eval.study import Study
    from qmdlab.training.reranker_eval import with_rerank

    d = Path(out)
    if not is_finished_run(d):
        raise QmdlabError(
            f"{d}: not a finished `qmdlab train reranker` run with held-out scores (needs DONE, "
            f"{SCORES} and {RECORDED}/); train one with `make train-reranker` or "
            f"`qmdlab train reranker --suite NAME --out {d} --folds 5`"
        )
    cfg_path = d / "config.yaml"
    run_cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
    scores = pl.read_parquet(d / SCORES)
    recorded = Study.from_run_dir(d / RECORDED)
    fused = recorded.config.replace(rerank=False, candidate_limit=int((run_cfg or {}).get("candidates", 20)))
    recorded.config = fused
    qids = sorted(str(q) for q in scores["qid"].unique().to_list())
    study = with_rerank(recorded, scores, qids)
    return HeldOutStudy(d, run_suite_name(d) or "", study, fused, fused.replace(rerank=True), study.qids)
