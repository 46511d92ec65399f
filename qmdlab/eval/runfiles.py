"""TREC run files: the name a run is saved under and the writer of ``qid Q0 docid rank score run``.

Shared by :mod:`qmdlab.eval.runner`, :mod:`qmdlab.eval.learn` and :mod:`qmdlab.eval.qmdbench`, and
by training's evaluation, so that every run file on disk is written one way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import polars as pl


def write_trec_run(final: pl.DataFrame, path: Path, name: str, docid: Callable[[str], str]) -> None:
    """Write ``final`` (``qid, docno, final_rank, final_score``) as a TREC run with collection ids.

    Scores are made strictly decreasing within a query (a tie is lowered by 1e-9 per place) so
    that tools which re-sort by score (trec_eval, ranx) keep the pipeline's order. The run tag is
    one token (whitespace becomes ``_``): trec_eval and ranx split each line on whitespace.
    """
    name = "_".join(name.split()) or "run"
    lines = []
    for (qid,), part in final.sort(["qid", "final_rank"]).group_by("qid", maintain_order=True):
        prev = None
        for pos, (docno, score) in enumerate(part.select("docno", "final_score").iter_rows(), start=1):
            score = float(score) if score is not None else 0.0
            if prev is not None and score >= prev:
                score = prev - 1e-9
            prev = score
            lines.append(f"{qid} Q0 {docid(docno)} {pos} {score:.9f} {name}")
    path.write_text("\n".join(lines) + ("\n" if lines else ""), encoding="utf-8")


def file_safe(run: str) -> str:
    """Run names as file names / TREC run tags (no spaces, slashes or ``+``).

    >>> file_safe("fusion=qmd_rrf"), file_safe("+lex+vec"), file_safe("bm25+vector")
    ('fusion=qmd_rrf', 'plus_lex_plus_vec', 'bm25_plus_vector')
    """
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", run.replace("+", " plus ")).strip("_")
