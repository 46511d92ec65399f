"""qmdlab.terms is the one module that says what a term is.

The BM25 stopwords, the query-piece pattern and the word extractors of the fake models, the GRPO
reward and the learned fuser moved here from their own modules without any change in behaviour.
The expected values below were CAPTURED FROM THE CODE BEFORE THE MOVE (``qmdlab.search.lexical``'s
own ``QUESTION_STOPWORDS``/``_PIECE``/``_pieces``, ``qmdlab.models.fakes._TOKEN``, ``qmdlab.training.reward``'s
``re.findall(r"\\w+", …)``) by running it on these inputs, and are hard-coded as regressions:
a failure here means a tokenizer changed, and with it every metric.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import unicodedata
from pathlib import Path

import pytest

from qmdlab import terms as T
from qmdlab.models.fakes import tokens
from qmdlab.search.channels import phrase_expression
from qmdlab.search.lexical import build_fts_query, parse_fts_query
from qmdlab.training.reward import _norm_line

REPO = Path(__file__).resolve().parents[1]

# (text, and-mode default, or-mode default, or-mode distinct positives,
#  or with stopwords kept, or with prefix/stopwords/query_tf all off) — captured before the move.
BUILD = [
    (
        "How do I rebase in Git?",
        '"how"* AND "do"* AND "i"* AND "rebase"* AND "in"* AND "git"*',
        '"rebase"* OR "git"*',
        ('"rebase"*', '"git"*'),
        '"how"* OR "do"* OR "i"* OR "rebase"* OR "in"* OR "git"*',
        '"how" OR "do" OR "i" OR "rebase" OR "in" OR "git"',
    ),
    (
        "don't can't rock'n'roll 'quoted' o''neil",
        '"don\'t"* AND "can\'t"* AND "rock\'n\'roll"* AND "quoted"* AND "o neil"',
        '"don\'t"* OR "can\'t"* OR "rock\'n\'roll"* OR "quoted"* OR "o"* OR "neil"*',
        ('"don\'t"*', '"can\'t"*', "\"rock'n'roll\"*", '"quoted"*', '"o"*', '"neil"*'),
        '"don\'t"* OR "can\'t"* OR "rock\'n\'roll"* OR "quoted"* OR "o"* OR "neil"*',
        '"don\'t" OR "can\'t" OR "rock\'n\'roll" OR "quoted" OR "o" OR "neil"',
    ),
    (
        "node.js multi-agent snake_case __init__ C++ C#",
        '"node js" AND "multi agent" AND "snake case" AND "init"* AND "c"*',
        '"node"* OR "js"* OR "multi"* OR "agent"* OR "snake"* OR "case"* OR "init"* OR "c"* OR "c"*',
        ('"node"*', '"js"*', '"multi"*', '"agent"*', '"snake"*', '"case"*', '"init"*', '"c"*'),
        '"node"* OR "js"* OR "multi"* OR "agent"* OR "snake"* OR "case"* OR "init"* OR "c"* OR "c"*',
        '"node" OR "js" OR "multi" OR "agent" OR "snake" OR "case" OR "init" OR "c"',
    ),
    (
        '"exact phrase" -"old notes" -force NEAR(a b) AND OR NOT *:^',
        '"exact phrase" AND "near a" AND "b"* AND "and"* AND "or"* AND "not"* NOT "old notes" NOT "force"*',
        '("exact phrase" OR "near"* OR "b"*) NOT "old notes" NOT "force"*',
        ('"exact phrase"', '"near"*', '"b"*'),
        '("exact phrase" OR "near"* OR "a"* OR "b"* OR "and"* OR "or"* OR "not"*) NOT "old notes" NOT "force"*',
        '("exact phrase" OR "near" OR "a" OR "b" OR "and" OR "or" OR "not") NOT "old notes" NOT "force"',
    ),
    (
        "東京大学 campus 见る東京tower ｶﾀｶﾅ 한국어",
        '"東 京 大 学" AND "campus"* AND "见 る 東 京 tower" AND "ｶ ﾀ ｶ ﾅ" AND "한 국 어"',
        '"東 京" OR "京 大" OR "大 学" OR "campus"* OR "见 る" OR "る 東" OR "東 京" OR "tower"* OR "ｶ ﾀ" OR "ﾀ ｶ" OR "ｶ ﾅ" OR "한 국" OR "국 어"',
        (
            '"東 京"',
            '"京 大"',
            '"大 学"',
            '"campus"*',
            '"见 る"',
            '"る 東"',
            '"tower"*',
            '"ｶ ﾀ"',
            '"ﾀ ｶ"',
            '"ｶ ﾅ"',
            '"한 국"',
            '"국 어"',
        ),
        '"東 京" OR "京 大" OR "大 学" OR "campus"* OR "见 る" OR "る 東" OR "東 京" OR "tower"* OR "ｶ ﾀ" OR "ﾀ ｶ" OR "ｶ ﾅ" OR "한 국" OR "국 어"',
        '"東 京" OR "京 大" OR "大 学" OR "campus" OR "见 る" OR "る 東" OR "tower" OR "ｶ ﾀ" OR "ﾀ ｶ" OR "ｶ ﾅ" OR "한 국" OR "국 어"',
    ),
    (
        "İstanbul Straße ＦＵＬＬ ﬁle Ǆ ½ ²",
        '"i\u0307stanbul"* AND "straße"* AND "ｆｕｌｌ"* AND "ﬁle"* AND "ǆ"* AND "½"* AND "²"*',
        '"i\u0307stanbul"* OR "straße"* OR "ｆｕｌｌ"* OR "ﬁle"* OR "ǆ"* OR "½"* OR "²"*',
        ('"i\u0307stanbul"*', '"straße"*', '"ｆｕｌｌ"*', '"ﬁle"*', '"ǆ"*', '"½"*', '"²"*'),
        '"i\u0307stanbul"* OR "straße"* OR "ｆｕｌｌ"* OR "ﬁle"* OR "ǆ"* OR "½"* OR "²"*',
        '"i\u0307stanbul" OR "straße" OR "ｆｕｌｌ" OR "ﬁle" OR "ǆ" OR "½" OR "²"',
    ),
    (
        "the a an of",
        '"the"* AND "a"* AND "an"* AND "of"*',
        '"the"* OR "a"* OR "an"* OR "of"*',
        ('"the"*', '"a"*', '"an"*', '"of"*'),
        '"the"* OR "a"* OR "an"* OR "of"*',
        '"the" OR "a" OR "an" OR "of"',
    ),
    (
        "café naïve résumé e\u0301",
        '"café"* AND "naïve"* AND "résumé"* AND "e"*',
        '"café"* OR "naïve"* OR "résumé"* OR "e"*',
        ('"café"*', '"naïve"*', '"résumé"*', '"e"*'),
        '"café"* OR "naïve"* OR "résumé"* OR "e"*',
        '"café" OR "naïve" OR "résumé" OR "e"',
    ),
    (
        'a -"b c" -d "e',
        '"a"* AND "e" NOT "b c" NOT "d"*',
        '"e" NOT "b c" NOT "d"*',
        ('"e"',),
        '("a"* OR "e") NOT "b c" NOT "d"*',
        '("a" OR "e") NOT "b c" NOT "d"',
    ),
    (
        "rebase git rebase the the",
        '"rebase"* AND "git"* AND "the"*',
        '"rebase"* OR "git"* OR "rebase"*',
        ('"rebase"*', '"git"*'),
        '"rebase"* OR "git"* OR "rebase"* OR "the"* OR "the"*',
        '"rebase" OR "git" OR "the"',
    ),
    (
        "x1 3.14 v2.0-beta 42",
        '"x1"* AND "3 14" AND "v2 0 beta" AND "42"*',
        '"x1"* OR "3"* OR "14"* OR "v2"* OR "0"* OR "beta"* OR "42"*',
        ('"x1"*', '"3"*', '"14"*', '"v2"*', '"0"*', '"beta"*', '"42"*'),
        '"x1"* OR "3"* OR "14"* OR "v2"* OR "0"* OR "beta"* OR "42"*',
        '"x1" OR "3" OR "14" OR "v2" OR "0" OR "beta" OR "42"',
    ),
    ("", None, None, (), None, None),
]

# (text, query pieces, fakes.tokens / terms.words, reward._norm_line) — captured before the move.
WORDS = [
    (
        "How do I rebase in Git?",
        ["how", "do", "i", "rebase", "in", "git"],
        ["how", "do", "i", "rebase", "in", "git"],
        "how do i rebase in git",
    ),
    (
        "don't can't rock'n'roll 'quoted' o''neil",
        ["don't", "can't", "rock'n'roll", "quoted", "o", "neil"],
        ["don", "t", "can", "t", "rock", "n", "roll", "quoted", "o", "neil"],
        "don t can t rock n roll quoted o neil",
    ),
    (
        "node.js multi-agent snake_case __init__ C++ C#",
        ["node", "js", "multi", "agent", "snake", "case", "init", "c", "c"],
        ["node", "js", "multi", "agent", "snake_case", "__init__", "c", "c"],
        "node js multi agent snake_case __init__ c c",
    ),
    (
        '"exact phrase" -"old notes" -force NEAR(a b) AND OR NOT *:^',
        ["exact", "phrase", "old", "notes", "force", "near", "a", "b", "and", "or", "not"],
        ["exact", "phrase", "old", "notes", "force", "near", "a", "b", "and", "or", "not"],
        "exact phrase old notes force near a b and or not",
    ),
    (
        "東京大学 campus 见る東京tower ｶﾀｶﾅ 한국어",
        ["東京大学", "campus", "见る東京", "tower", "ｶﾀｶﾅ", "한국어"],
        ["東京大学", "campus", "见る東京tower", "ｶﾀｶﾅ", "한국어"],
        "東京大学 campus 见る東京tower カタカナ 한국어",
    ),
    (
        "İstanbul Straße ＦＵＬＬ ﬁle Ǆ ½ ²",
        ["i\u0307stanbul", "straße", "ｆｕｌｌ", "ﬁle", "ǆ", "½", "²"],
        ["i\u0307stanbul", "straße", "ｆｕｌｌ", "ﬁle", "ǆ", "½", "²"],
        "i stanbul strasse full file dž 1 2 2",
    ),
    ("the a an of", ["the", "a", "an", "of"], ["the", "a", "an", "of"], "the a an of"),
    (
        "café naïve résumé e\u0301",
        ["café", "naïve", "résumé", "e"],
        ["café", "naïve", "résumé", "e"],
        "café naïve résumé é",
    ),
    ('a -"b c" -d "e', ["a", "b", "c", "d", "e"], ["a", "b", "c", "d", "e"], "a b c d e"),
    (
        "rebase git rebase the the",
        ["rebase", "git", "rebase", "the", "the"],
        ["rebase", "git", "rebase", "the", "the"],
        "rebase git rebase the the",
    ),
    (
        "x1 3.14 v2.0-beta 42",
        ["x1", "3", "14", "v2", "0", "beta", "42"],
        ["x1", "3", "14", "v2", "0", "beta", "42"],
        "x1 3 14 v2 0 beta 42",
    ),
    ("", [], [], ""),
]

# (text, channels.phrase_expression) — captured before the move.
PHRASES = [
    ("How do I rebase in Git?", '"how do i rebase in git"'),
    ("don't can't rock'n'roll 'quoted' o''neil", "\"don't can't rock'n'roll quoted o neil\""),
    ("node.js multi-agent snake_case __init__ C++ C#", '"node js multi agent snake case init c c"'),
    ('"exact phrase" -"old notes" -force NEAR(a b) AND OR NOT *:^', '"exact phrase near a b and or not"'),
    ("東京大学 campus 见る東京tower ｶﾀｶﾅ 한국어", '"東 京 大 学 campus 见 る 東 京 tower ｶ ﾀ ｶ ﾅ 한 국 어"'),
    ("İstanbul Straße ＦＵＬＬ ﬁle Ǆ ½ ²", '"i\u0307stanbul straße ｆｕｌｌ ﬁle ǆ ½ ²"'),
    ("the a an of", '"the a an of"'),
    ("café naïve résumé e\u0301", '"café naïve résumé e"'),
    ('a -"b c" -d "e', '"a e"'),
    ("rebase git rebase the the", '"rebase git rebase the the"'),
    ("x1 3.14 v2.0-beta 42", '"x1 3 14 v2 0 beta 42"'),
    ("", None),
]


@pytest.mark.parametrize("text, and_q, or_q, or_pos, or_keep_stop, or_plain", BUILD)
def test_query_builder_unchanged(text, and_q, or_q, or_pos, or_keep_stop, or_plain):
    assert build_fts_query(text) == and_q
    assert build_fts_query(text, mode="or") == or_q
    assert parse_fts_query(text, "or").positive == or_pos
    assert parse_fts_query(text, "msm") == parse_fts_query(text, "or")  # same expression, filtered later
    assert build_fts_query(text, mode="or", stopwords=False) == or_keep_stop
    assert build_fts_query(text, mode="or", prefix=False, stopwords=False, query_tf=False) == or_plain


@pytest.mark.parametrize("text, pieces, toks, norm", WORDS)
def test_word_extractors_unchanged(text, pieces, toks, norm):
    assert T.query_pieces(text) == pieces
    assert tokens(text) == toks == T.words(text)
    assert _norm_line(text) == norm == " ".join(T.folded_words(text))


@pytest.mark.parametrize("text, phrase", PHRASES)
def test_phrase_channel_unchanged(text, phrase):
    assert phrase_expression(text) == phrase


def test_patterns_are_the_old_ones():
    # the literal patterns of lexical._PIECE and learned.terms_expr before the move
    assert T.ALNUM_PATTERN == r"[^\W_]+"
    assert T.QUERY_PIECE.pattern == r"[^\W_]+(?:'[^\W_]+)*"
    assert T.WORD.pattern == r"\w+" and T.WORD.flags & re.UNICODE


def test_bm25_stopwords_unchanged_and_distinct_from_terms_stopwords():
    # sha256 of the sorted BM25 stopword list (125 words): a change here changes every BM25 run
    assert len(T.BM25_STOPWORDS) == 125
    digest = hashlib.sha256(" ".join(sorted(T.BM25_STOPWORDS)).encode()).hexdigest()
    assert digest == "4fda6e3060f1f2483d5d8cb9ee783bca6a18246b5dc5a417d134aea26d32b249"
    assert len(T.QUESTION_STOPWORDS) == 35 and T.QUESTION_STOPWORDS < T.BM25_STOPWORDS
    assert {"not", "no", "all", "before"} <= T.BM25_STOPWORDS - T.QUESTION_STOPWORDS


def test_one_name_per_stopword_list():
    from qmdlab.search import lexical

    assert not hasattr(lexical, "STOPWORDS") and not hasattr(T, "STOPWORDS")
    assert importlib.util.find_spec("qmdlab.search.cjk") is None


def test_words_and_folded_words_closed_form():
    assert T.words("Git-Rebase: the_Basics! Git") == ["git", "rebase", "the_basics", "git"]
    assert T.folded_words("Straße ＦＵＬＬ ﬁle x²") == ["strasse", "full", "file", "x2"]
    # folding happens before matching: İ folds to i + U+0307, which is not a word character
    assert T.folded_words("İstanbul") == ["i", "stanbul"]
    assert T.words("İstanbul") == ["i\u0307stanbul"]
    assert T.folded_words("x") == re.findall(r"\w+", unicodedata.normalize("NFKC", "x").casefold())


def test_terms_built_on_words():
    text = "How do I use 東京大学 with Node.js? node"
    assert T.terms(text) == ["use", "東京", "京大", "大学", "node", "js"]
    assert T.terms(text, stopwords=False)[:4] == ["how", "do", "i", "use"]


_WORD_PATTERNS = {r"\w+", r"[^\W_]+", r"[^\W_]+(?:'[^\W_]+)*"}


def test_no_other_module_defines_a_word_pattern():
    """Only qmdlab/terms.py spells the word patterns; everything else imports them."""
    offenders = []
    for top in ("qmdlab", "scripts", "benchmarks", "experiments", "notebooks"):
        for path in sorted((REPO / top).rglob("*.py")):
            if path == REPO / "qmdlab" / "terms.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and node.value in _WORD_PATTERNS:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value!r}")
    assert not offenders, "use qmdlab.terms (WORD, ALNUM_PATTERN, QUERY_PIECE, words, …): " + ", ".join(offenders)
