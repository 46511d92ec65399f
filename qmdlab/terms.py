"""What a query term is — one definition for the whole project.

The lowest layer of qmdlab (imports nothing of it): the store (CJK spacing of the FTS text),
BM25 query building (:mod:`qmdlab.search.lexical`: CJK runs and bigrams), the expansion filter
and chunk selection (:mod:`qmdlab.pipeline.expand`), snippets (:mod:`qmdlab.pipeline.results`,
MCP), and the GRPO reward (:mod:`training.reward`) all take their terms from here.

A term is a lower-cased ``\\w+`` word; a run of CJK characters contributes its character
bigrams (a lone character itself), because SQLite's ``unicode61`` keeps a CJK run as one
token (see :func:`space_cjk`). :func:`terms` drops :data:`STOPWORDS` unless nothing else is
left, and keeps each term once, in order of first appearance.

CJK for FTS5: the text put into the FTS table has every CJK character separated by spaces
(the stored document body is untouched). Queries then turn a CJK run into a phrase of its
characters (``and`` mode) or into an OR of its character-bigram phrases (``or`` mode: a bigram
channel evaluated over the unigram index, so partial overlaps rank without indexing bigrams
twice). Measured on the default corpus's 11 CJK queries (graded qrels, nDCG@10, BM25 only):
``or`` with bigram phrases 0.657, ``or`` with single characters 0.628, ``and`` with character
phrases (qmd) 0.237 — hence bigram phrases for ``or``.
"""
from __future__ import annotations

import re

# Han, Hiragana, Katakana, Hangul, CJK symbols/compat, half-width katakana.
CJK_CLASS = (
    "\u3040-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\uff66-\uff9f"
)
CJK_RUN = re.compile(f"[{CJK_CLASS}]+")
WORD = re.compile(r"\w+", re.UNICODE)

STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i in is it of on or the to what when where which who "
    "why with you your my me we".split()
)
"""English function words that are not content terms (questions' "how do I …")."""


def has_cjk(text: str) -> bool:
    """Does the text contain a CJK character?

    >>> has_cjk("abc"), has_cjk("東京")
    (False, True)
    """
    return CJK_RUN.search(text) is not None


def space_cjk(text: str) -> str:
    """Surround every CJK character with spaces (FTS indexing form).

    >>> space_cjk("見る東京tower")
    ' 見  る  東  京 tower'
    """
    if not has_cjk(text):
        return text
    return CJK_RUN.sub(lambda m: " " + "  ".join(m.group(0)) + " ", text)


def bigrams(run: str) -> list[str]:
    """Character bigrams of a CJK run; a single character is its own gram.

    >>> bigrams("東京大学"), bigrams("猫")
    (['東京', '京大', '大学'], ['猫'])
    """
    if len(run) < 2:
        return [run] if run else []
    return [run[i : i + 2] for i in range(len(run) - 1)]


def terms(text: str, *, stopwords: bool = True) -> list[str]:
    """The terms of ``text``: lower-case ``\\w+`` words and CJK bigrams, unique, in order.

    With ``stopwords`` (the default) :data:`STOPWORDS` are dropped unless nothing else remains.

    >>> terms("How do I rebase in Git?")
    ['rebase', 'git']
    >>> terms("東京大学 campus")
    ['東京', '京大', '大学', 'campus']
    >>> terms("the"), terms("the", stopwords=False), terms("")
    (['the'], ['the'], [])
    """
    out: list[str] = []
    pos = 0
    for m in CJK_RUN.finditer(text):
        out += [w.lower() for w in WORD.findall(text[pos:m.start()])]
        out += bigrams(m.group(0))
        pos = m.end()
    out += [w.lower() for w in WORD.findall(text[pos:])]
    if stopwords:
        content = [t for t in out if t not in STOPWORDS]
        out = content or out
    return list(dict.fromkeys(out))


__all__ = ["CJK_CLASS", "CJK_RUN", "WORD", "STOPWORDS", "has_cjk", "space_cjk", "bigrams", "terms"]
