"""SFT examples from judged queries: ``lex:`` lines that carry the vocabulary the relevant document uses
and the query lacks.

An expansion line helps BM25 when it adds the words the relevant documents use and the query does
not (vocabulary mismatch). A small model left to itself — or taught on notes-style seeds — writes
fragments of the query instead, which add a list of the same documents at lower weight and cost
nDCG (``docs/results/expander.md``). These examples teach the other habit. For each *train-split*
judged query of a suite, each target line holds:

- one query term, the rarest on the first line and the next-rarest on the next (document frequency
  over the suite's chunks): the engine drops an expansion line that shares no query term
  (:func:`qmdlab.pipeline.expand.filter_expansions`), so every line keeps one;
- then the relevant document's terms with the highest tf·idf that are not query terms, longest first
  among ties, ``terms_per_line`` per line, the next line continuing down the same list.

GRPO's held-back slice is left out too (the recipe passes it), so early stopping judges queries that
neither stage trained on. The labels of held-out queries are never read: the rows come from
:func:`qmdlab.training.grpo.split_rows`, which raises :class:`~qmdlab.training.leakage.LeakError` if a
held-out query is among them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping

from qmdlab.terms import BM25_STOPWORDS, terms, words
from qmdlab.training.data import Example


def document_frequency(texts: Iterable[str]) -> Counter[str]:
    """In how many of ``texts`` each term (:func:`qmdlab.terms.terms`) occurs.

    >>> sorted(document_frequency(["git rebase", "git merge", "Git"]).items())
    [('git', 3), ('merge', 1), ('rebase', 1)]
    """
    df: Counter[str] = Counter()
    for text in texts:
        df.update(set(terms(text)))
    return df


def distinctive_terms(
    text: str, df: Mapping[str, int], n_texts: int, *, exclude: Iterable[str] = (), min_df: int = 1
) -> list[str]:
    """The words of ``text`` by tf·idf (``tf · ln(n_texts / df)``), highest first; ties: longer, then
    alphabetical. A word missing from ``df`` counts as in one text. Stopwords, numbers, words under 3
    characters, words in fewer than ``min_df`` texts and ``exclude`` are left out.

    >>> df = {"the": 3, "kinase": 1, "protein": 2, "cells": 2}
    >>> distinctive_terms("The kinase binds the protein; kinase cells", df, 3, exclude=["cells"])
    ['kinase', 'binds', 'protein']
    >>> distinctive_terms("The kinase binds the protein; kinase cells", df, 3, min_df=2)
    ['protein', 'cells']
    """
    skip = set(exclude)
    tf = Counter(
        w
        for w in words(text)
        if len(w) > 2 and not w.isdigit() and w not in BM25_STOPWORDS and w not in skip and df.get(w, 1) >= min_df
    )
    scored = {w: c * math.log(n_texts / max(df.get(w, 1), 1)) for w, c in tf.items()}
    return [w for w, s in sorted(scored.items(), key=lambda x: (-x[1], -len(x[0]), x[0])) if s > 0]


def vocabulary_lines(
    query: str,
    document: str,
    df: Mapping[str, int],
    n_texts: int,
    *,
    lines: int = 2,
    terms_per_line: int = 5,
    min_df: int = 1,
) -> tuple[tuple[str, str], ...]:
    """The target ``lex`` lines for ``query`` whose relevant document is ``document`` (module docstring).
    Empty when the query has no term or the document adds no word.

    >>> df = {"aspirin": 2, "reduces": 5, "stroke": 3, "risk": 4, "platelet": 1, "thromboxane": 1,
    ...       "cyclooxygenase": 1, "inhibition": 2}
    >>> doc = "Aspirin inhibits cyclooxygenase: platelet thromboxane falls, and inhibition lowers stroke risk."
    >>> vocabulary_lines("aspirin reduces stroke risk", doc, df, 10, lines=2, terms_per_line=2)
    (('lex', 'aspirin cyclooxygenase thromboxane'), ('lex', 'stroke inhibits platelet'))
    """
    query_terms = list(dict.fromkeys(terms(query)))
    if not query_terms:
        return ()
    rare = sorted(query_terms, key=lambda w: (df.get(w, 0), query_terms.index(w)))
    new = distinctive_terms(document, df, n_texts, exclude=query_terms, min_df=min_df)
    out: list[tuple[str, str]] = []
    for i in range(lines):
        chunk = new[i * terms_per_line : (i + 1) * terms_per_line]
        if not chunk:
            break
        out.append(("lex", " ".join([rare[min(i, len(rare) - 1)], *chunk])))
    return tuple(out)


def vocabulary_examples(
    suites: list[str],
    splits_file: str,
    *,
    lines: int = 2,
    terms_per_line: int = 5,
    min_df: int = 1,
    exclude_qids: Iterable[str] = (),
    log=print,
) -> list[Example]:
    """One example per train-split judged query of each suite (module docstring), its target built from
    the query's most relevant document (highest grade, first docno on ties); ``category`` is the suite.
    ``exclude_qids`` (tagged ``suite:qid``, as :func:`~qmdlab.training.grpo.split_rows` tags them) are
    left out: GRPO's held-back slice, so that early stopping judges queries no stage trained on."""
    from qmdlab.eval.record import prepare_index
    from qmdlab.eval.suites import get_suite
    from qmdlab.training.grpo import GRPORunConfig, split_rows

    rows = split_rows(GRPORunConfig(labelled_suites=list(suites), splits_file=splits_file, unlabelled_prompts=False))
    excluded = set(exclude_qids)
    rows = [r for r in rows if r["qid"] not in excluded]
    examples: list[Example] = []
    for name in suites:
        suite = get_suite(name)
        idx = prepare_index(suite, None, progress=False, log=lambda _m: None)
        docs = idx.documents()
        chunks = idx.chunks(docs["docno"].to_list())
        texts: dict[str, list[str]] = {}
        for docno, text in zip(chunks["docno"].to_list(), chunks["text"].to_list(), strict=True):
            texts.setdefault(docno, []).append(text)
        df = document_frequency(chunks["text"].to_list())
        n_texts = chunks.height
        kept = 0
        for row in (r for r in rows if r["suite"] == suite.name):
            docno = min((d for d, g in row["qrels"].items() if g > 0), key=lambda d: (-row["qrels"][d], d))
            if docno not in texts:
                continue
            output = vocabulary_lines(
                row["query"],
                "\n".join(texts[docno]),
                df,
                n_texts,
                lines=lines,
                terms_per_line=terms_per_line,
                min_df=min_df,
            )
            if output:
                examples.append(Example(row["query"], output, row.get("intent"), suite.name))
                kept += 1
        log(f"{suite.name}: {kept} vocabulary examples from its train-split judged queries")
    return examples
