"""What a query term is — one definition for the whole project.

The lowest layer of qmdlab (imports nothing of it): the store (CJK spacing of the FTS text),
BM25 query building (:mod:`qmdlab.search.lexical`: CJK runs and bigrams), the expansion filter
and chunk selection (:mod:`qmdlab.pipeline.expand`), snippets (:mod:`qmdlab.pipeline.results`,
MCP), and the GRPO reward (:mod:`qmdlab.training.reward`) all take their terms from here.

A term is a lower-cased ``\\w+`` word; a run of CJK characters contributes its character
bigrams (a lone character itself), because SQLite's ``unicode61`` keeps a CJK run as one
token (see :func:`space_cjk`). :func:`terms` drops :data:`QUESTION_STOPWORDS` unless nothing else is
left, and keeps each term once, in order of first appearance.

CJK for FTS5: the text put into the FTS table has every CJK character separated by spaces
(the stored document body is untouched). Queries then turn a CJK run into a phrase of its
characters (``and`` mode) or into an OR of its character-bigram phrases (``or`` mode: a bigram
channel evaluated over the unigram index, so partial overlaps rank without indexing bigrams
twice). Measured on the default corpus's 11 CJK queries (graded qrels, nDCG@10, BM25 only):
``or`` with bigram phrases 0.657, ``or`` with single characters 0.628, ``and`` with character
phrases (qmd) 0.237 — hence bigram phrases for ``or``.

The other word extractors of the project live here too, each named for what it is; their small
differences are deliberate (changing one would change tokens, and so metrics):

- :func:`words` — lower-cased ``\\w+`` words with repeats (the fake models' tokens);
- :func:`folded_words` — ``\\w+`` words of the NFKC, case-folded text (the GRPO reward's
  line comparison);
- :func:`query_pieces` / :data:`QUERY_PIECE` — letter-and-digit runs with inner apostrophes,
  CJK runs split off (BM25 query building, :mod:`qmdlab.search.lexical` and
  :mod:`qmdlab.search.channels`); ``_`` separates pieces, as in ``unicode61``;
- :data:`ALNUM_PATTERN` — the letter-and-digit run as pattern text, for polars
  (:mod:`qmdlab.pipeline.learned`);
- :data:`QUESTION_STOPWORDS` (short, question function words) and :data:`BM25_STOPWORDS` (the longer
  list dropped from ``or``/``msm`` BM25 queries).
"""

from __future__ import annotations

import re
import unicodedata

# Han, Hiragana, Katakana, Hangul, CJK symbols/compat, half-width katakana.
CJK_CLASS = (
    "\u3040-\u309f\u30a0-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
    "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f\uff66-\uff9f"
)
CJK_RUN = re.compile(f"[{CJK_CLASS}]+")
WORD = re.compile(r"\w+", re.UNICODE)
"""A word: a run of ``\\w`` characters (letters, digits, ``_``; Python's Unicode classes)."""

ALNUM_PATTERN = r"[^\W_]+"
"""A run of letters and digits (``\\w`` without ``_``), as pattern text.

The base of :data:`QUERY_PIECE`, and the word pattern :func:`qmdlab.pipeline.learned.terms_expr`
hands to polars. Polars evaluates it with the Rust ``regex`` crate, whose Unicode ``\\w`` also
counts combining marks, so the same text is not guaranteed to split identically in the two
engines: it is shared as text, not as a promise of identical tokens.

>>> re.findall(ALNUM_PATTERN, "snake_case v2.0")
['snake', 'case', 'v2', '0']
"""

QUERY_PIECE = re.compile(rf"{ALNUM_PATTERN}(?:'{ALNUM_PATTERN})*")
"""A word piece of a BM25 query: letters and digits, with inner apostrophes (``don't``).

Everything else — ``_``, ``-``, ``.``, quotes, FTS5 operators — separates pieces, which is why a
piece is always safe inside an FTS5 string (see :func:`query_pieces`).

>>> QUERY_PIECE.findall("don't rock'n'roll 'quoted' node.js")
["don't", "rock'n'roll", 'quoted', 'node', 'js']
"""

QUESTION_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i in is it of on or the to what when where which who "
    "why with you your my me we".split()
)
"""English function words that are not content terms (questions' "how do I …").

Used by :func:`terms` (the expansion filter, chunk selection, snippets, the ``like`` channel),
the GRPO reward's entity detection and the learned fuser's term features.
"""

# Two stopword lists on purpose: QUESTION_STOPWORDS above only names the function words of a question, so
# terms() keeps short words that can carry meaning ("not", "all", "no", "before", "off" …), while
# BM25's or/msm builder drops this longer, NLTK-style English list from any-term queries (a
# measured switch: PipelineConfig.bm25_stopwords, experiments/cisi_bm25_factors/run.py). QUESTION_STOPWORDS is a
# subset of BM25_STOPWORDS. Merging them would change the BM25 leg's, the filters' and the
# reward's numbers, so both stay, here, side by side.
BM25_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves""".split()
)
"""The words :mod:`qmdlab.search.lexical` drops from ``or``/``msm`` queries (unless nothing else
is left): 125 English function words.

>>> len(BM25_STOPWORDS), QUESTION_STOPWORDS <= BM25_STOPWORDS, "not" in BM25_STOPWORDS, "not" in QUESTION_STOPWORDS
(125, True, True, False)
"""


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


def words(text: str) -> list[str]:
    """The lower-cased ``\\w+`` words of a text, repeats kept, in order (no CJK splitting).

    Parameters
    ----------
    text : str
        Any text.

    Returns
    -------
    list of str
        Each :data:`WORD` match, lower-cased with :meth:`str.lower`; ``_`` stays inside a word.

    Examples
    --------
    >>> words("Git-Rebase: the_Basics! Git")
    ['git', 'rebase', 'the_basics', 'git']
    >>> words("東京tower"), words("")
    (['東京tower'], [])
    """
    return [w.lower() for w in WORD.findall(text)]


def folded_words(text: str) -> list[str]:
    """The ``\\w+`` words of the NFKC-normalised, case-folded text, repeats kept, in order.

    Normalising and folding come *before* matching, so compatibility forms become plain words
    (``ＦＵＬＬ`` → ``full``, ``ﬁ`` → ``fi``, ``²`` → ``2``) and a folded character that is not a
    word character splits the word (``İ`` folds to ``i`` + a combining dot).

    Parameters
    ----------
    text : str
        Any text.

    Returns
    -------
    list of str
        The :data:`WORD` matches of ``unicodedata.normalize("NFKC", text).casefold()``.

    Examples
    --------
    >>> folded_words("Straße ＦＵＬＬ ﬁle x²")
    ['strasse', 'full', 'file', 'x2']
    >>> folded_words("snake_case don't")
    ['snake_case', 'don', 't']
    """
    return WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def query_pieces(token: str) -> list[str]:
    """The word pieces of a query token: :data:`QUERY_PIECE` matches, lower-cased, with every
    CJK run split off as its own piece (not lower-cased).

    What :mod:`qmdlab.search.lexical` turns into FTS5 terms and phrases. A piece never contains
    FTS5 syntax, so quoting it is always safe.

    Parameters
    ----------
    token : str
        A whitespace-free part of a query (or a quoted phrase's text).

    Returns
    -------
    list of str
        The pieces in order; empty when the token has no letters or digits.

    Examples
    --------
    >>> query_pieces("Node.js"), query_pieces("multi-agent"), query_pieces("东京tower"), query_pieces('"*^:(')
    (['node', 'js'], ['multi', 'agent'], ['东京', 'tower'], [])
    >>> query_pieces("Don't snake_case")
    ["don't", 'snake', 'case']
    """
    out: list[str] = []
    for p in QUERY_PIECE.findall(token):
        pos = 0
        for m in CJK_RUN.finditer(p):
            if m.start() > pos:
                out.append(p[pos : m.start()].lower())
            out.append(m.group(0))
            pos = m.end()
        if pos < len(p):
            out.append(p[pos:].lower())
    return out


def terms(text: str, *, stopwords: bool = True) -> list[str]:
    """The terms of ``text``: lower-case ``\\w+`` words and CJK bigrams, unique, in order.

    With ``stopwords`` (the default) :data:`QUESTION_STOPWORDS` are dropped unless nothing else remains.

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
        out += words(text[pos : m.start()])
        out += bigrams(m.group(0))
        pos = m.end()
    out += words(text[pos:])
    if stopwords:
        content = [t for t in out if t not in QUESTION_STOPWORDS]
        out = content or out
    return list(dict.fromkeys(out))


__all__ = [
    "CJK_CLASS",
    "CJK_RUN",
    "WORD",
    "ALNUM_PATTERN",
    "QUERY_PIECE",
    "QUESTION_STOPWORDS",
    "BM25_STOPWORDS",
    "has_cjk",
    "space_cjk",
    "bigrams",
    "words",
    "folded_words",
    "query_pieces",
    "terms",
]
