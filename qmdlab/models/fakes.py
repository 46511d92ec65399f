"""Deterministic fakes of the three roles: exact outputs, microseconds, no weights.

They satisfy the same protocols as the llama.cpp backends, so pipeline tests can assert exact
rankings. ``load_models("fake")`` builds one of each with generic defaults.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Optional, Union

import numpy as np

from qmdlab.models.base import ExpandResult, l2_normalize
from qmdlab.models.expansion import format_lines, parse_expansion
from qmdlab.terms import words


def tokens(text: str) -> list[str]:
    """Lowercase ``\\w+`` tokens (:func:`qmdlab.terms.words`).

    >>> tokens("Git-Rebase: the_Basics!")
    ['git', 'rebase', 'the_basics']
    """
    return words(text)


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()[:12]


class KeywordEmbedder:
    """One-hot over a vocabulary: component *i* is 1 when ``vocabulary[i]`` occurs, then L2-normalised.

    Matching is on lowercase ``\\w+`` tokens; a document's tokens are those of its title and text.
    A text containing no vocabulary word embeds to the zero vector (cosine 0 with everything).

    >>> e = KeywordEmbedder(["git", "rebase", "pasta"])
    >>> e.embed_query("How to git rebase?").tolist()
    [0.7071067690849304, 0.7071067690849304, 0.0]
    >>> e.embed_documents([("Cooking", "pasta pasta"), ("", "nothing here")]).tolist()
    [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    >>> e.dim, e.fingerprint == KeywordEmbedder(["git", "rebase", "pasta"]).fingerprint
    (3, True)
    """

    def __init__(self, vocabulary: Sequence[str]):
        vocab = [v.lower() for v in vocabulary]
        if len(set(vocab)) != len(vocab):
            raise ValueError("KeywordEmbedder vocabulary has duplicate words")
        self.vocabulary = tuple(vocab)
        self._index = {w: i for i, w in enumerate(self.vocabulary)}
        self.dim = len(self.vocabulary)
        self.model_id = f"fake:keyword/{self.dim}"
        self.fingerprint = f"fake:keyword:{_digest(self.vocabulary)}"

    def _onehot(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        for t in tokens(text):
            i = self._index.get(t)
            if i is not None:
                v[i] = 1.0
        return v

    def embed_query(self, text: str) -> np.ndarray:
        return l2_normalize(self._onehot(text)[None, :])[0]

    def embed_documents(self, docs: Sequence[tuple[str, str]]) -> np.ndarray:
        if not len(docs):
            return np.zeros((0, self.dim), dtype=np.float32)
        return l2_normalize(np.stack([self._onehot(f"{title} {text}") for title, text in docs]))


Lines = Union[str, Sequence[tuple[str, str]]]


class RuleExpander:
    """Expansion by lookup: ``rules[query]`` (case-insensitive, stripped) or ``rules(query)``.

    A rule's value is either a list of ``(type, text)`` pairs or raw model-like text, which is
    parsed exactly like a real model's output (so malformed lines can be tested). Unknown
    queries give ``default`` (no lines unless set).

    >>> x = RuleExpander({"git undo": [("lex", "git revert"), ("vec", "undo a git commit")]})
    >>> x.expand("Git Undo").lines
    [('lex', 'git revert'), ('vec', 'undo a git commit')]
    >>> x.expand("Git Undo").raw
    'lex: git revert\\nvec: undo a git commit\\n'
    >>> RuleExpander({"q": "lex: a\\nbogus\\n"}).expand("q").dropped
    [('bogus', "not a 'type: content' line")]
    >>> RuleExpander(lambda q: [("hyde", q + " explained")]).expand("rrf").lines
    [('hyde', 'rrf explained')]
    >>> RuleExpander({}).expand("anything")
    ExpandResult(raw='', lines=[], dropped=[])
    """

    def __init__(self, rules: Union[Mapping[str, Lines], Callable[[str], Lines]], default: Lines = ()):
        self._fn = rules if callable(rules) else None
        self._table = None if callable(rules) else {k.strip().lower(): v for k, v in rules.items()}
        self.default = default
        self.model_id = "fake:rules"
        self.fingerprint = "fake:rules:" + (_digest(self._table) if self._table is not None else f"fn:{id(rules)}")

    def expand(self, query: str, *, intent: Optional[str] = None) -> ExpandResult:
        if self._fn is not None:
            value = self._fn(query)
        else:
            assert self._table is not None  # rules that are not a function are a table
            value = self._table.get(query.strip().lower(), self.default)
        raw = value if isinstance(value, str) else format_lines(value)
        return parse_expansion(raw)


class TableReranker:
    """Scores from a ``(query, text) -> score`` table; missing pairs get ``default``.

    ``default`` may be a number or a function ``(query, text) -> score``. Scores must lie in [0, 1].

    >>> r = TableReranker({("q", "good"): 0.9, ("q", "bad"): 0.1}, default=0.5)
    >>> r.score("q", ["good", "bad", "other"])
    [0.9, 0.1, 0.5]
    >>> TableReranker({}, default=term_overlap).score("git rebase", ["rebase onto main", "pasta"])
    [0.5, 0.0]
    """

    def __init__(
        self, table: Mapping[tuple[str, str], float], default: Union[float, Callable[[str, str], float]] = 0.0
    ):
        for key, s in table.items():
            if not 0.0 <= s <= 1.0:
                raise ValueError(f"TableReranker score for {key!r} is {s}, outside [0, 1]")
        self.table = dict(table)
        self.default = default
        self.model_id = "fake:table"
        dflt = self.default if not callable(self.default) else getattr(self.default, "__name__", "fn")
        self.fingerprint = "fake:table:" + _digest([sorted(self.table.items()), dflt])

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        out = []
        for t in texts:
            if (query, t) in self.table:
                out.append(float(self.table[(query, t)]))
            else:
                out.append(float(self.default(query, t) if callable(self.default) else self.default))
        return out


def term_overlap(query: str, text: str) -> float:
    """Fraction of distinct query terms that occur in ``text`` (a keyword "reranker").

    >>> term_overlap("git rebase main", "Rebase onto MAIN"), term_overlap("", "x")
    (0.6666666666666666, 0.0)
    """
    q = set(tokens(query))
    return len(q & set(tokens(text))) / len(q) if q else 0.0


#: The vocabulary of ``load_models("fake")``'s embedder: generic technical words.
FAKE_VOCABULARY = (
    "git",
    "commit",
    "branch",
    "merge",
    "rebase",
    "search",
    "index",
    "query",
    "vector",
    "embedding",
    "model",
    "python",
    "test",
    "file",
    "markdown",
    "note",
    "database",
    "sqlite",
    "server",
    "error",
    "config",
    "install",
    "docker",
    "network",
    "cache",
    "memory",
    "performance",
    "http",
    "api",
    "json",
    "shell",
    "linux",
    "time",
    "date",
    "user",
    "password",
    "security",
    "key",
    "data",
    "train",
)
