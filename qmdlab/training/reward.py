"""The expander's reward: one rule score and one retrieval term, shared by GRPO and evaluation.

Rule score (:func:`score_expansion`), after qmd's published rubric, in points:

==========  ======  ===========================================================
part        points  what earns them
==========  ======  ===========================================================
gate        → 0     hard zero: empty output, chat-template tokens (``<|im_start|>``,
                    ``<|im_end|>``, ``<|endoftext|>``, role headers), a ``<think>``
                    tag anywhere, or any non-blank line without a ``lex:``/``vec:``/
                    ``hyde:`` prefix
format      30      ≥1 lex line (10), ≥1 vec line (10), counts within the format
                    rules: 1–3 lex, 1–3 vec, at most 1 hyde (10)
diversity   30      ≥2 line types (10); no duplicate lines (10); no line that just
                    echoes the query (10)
hyde        20      exactly one hyde line (5), 50–200 characters (5), not
                    repetitive: ≥60 % distinct words (5), more than the query (5)
quality     20      lex lines shorter than vec lines on average (5), vec lines are
                    phrases of ≥3 words (5), share of lines with a query term (10;
                    the pipeline drops lines that share none)
entities    20      query entities (capitalised words, acronyms, words with digits
                    or ``.-_/#+``) kept: 15 × share of lex lines keeping them all,
                    5 if a vec line keeps one; −10 per entity no line keeps, −30 if
                    no lex line keeps any entity (floor of the part: −45)
==========  ======  ===========================================================

The total is clipped to ``[0, 120]`` and divided by 120, so the score is in ``[0, 1]``.
There is one copy of this rubric (qmd had two that diverged) and the echo rule is part
of it, so RL and evaluation can never disagree about it.

Gain reward (:class:`GainReward`, GRPO's ``reward: gain``): the same Δ on the pipeline as
configured, a harm weighted ``harm_weight`` times a gain, and the rule score's hard gate as a format
check only (a malformed completion gets ``−format_penalty``).

Retrieval term (:class:`RetrievalReward`): for a query with relevance labels,
nDCG@10 of the pipeline searching with the completion's expansions minus nDCG@10 of the
pipeline without expansion; ``None`` where the query has no labels (TRL then ignores it).
For a synthetic prompt (a generated query whose one "relevant" document is its source) the
metric is the source document's reciprocal rank (``metric="rr"``). GRPO standardises rewards
within a prompt's group of completions, so subtracting the no-expansion baseline changes
nothing the policy sees; it keeps the logged reward readable as a gain.
The pipeline is reached through an injectable *scorer* so this module stays pure.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from qmdlab.terms import QUESTION_STOPWORDS, folded_words, has_cjk, terms  # noqa: F401 — terms/QUESTION_STOPWORDS re-exported (one definition)

TYPES = ("lex", "vec", "hyde")
MAX_POINTS = 120.0
LEAK_PATTERNS = (
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|assistant|>",
    "<|user|>",
    "<|system|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "</s>",
    "<s>",
)
ROLE_LINE = re.compile(r"^\s*(assistant|user|system)\s*$", re.I)
THINK = re.compile(r"</?think>", re.I)
PREFIX = re.compile(r"^(lex|vec|hyde):\s*(.*)$")
_ENTITY_CHARS = re.compile(r"[\d.\-_/#+]")


class Parsed(NamedTuple):
    """Typed lines of a completion, or the reason it fails the gate."""

    lines: list[tuple[str, str]]
    gate: str | None


class Score(NamedTuple):
    """A rule score: ``total`` in [0, 1], points per part, and the gate reason (or None)."""

    total: float
    parts: dict[str, float]
    gate: str | None


def completion_text(completion) -> str:
    """The text of a TRL completion: a string, or a list of chat messages.

    >>> completion_text([{"role": "assistant", "content": "lex: a"}])
    'lex: a'
    >>> completion_text("lex: b")
    'lex: b'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content", ""))
    return "".join(str(m.get("content", "")) for m in completion)


def parse_completion(text: str) -> Parsed:
    """Split a completion into typed lines, or say why it fails the hard gate.

    >>> parse_completion("hyde: A passage.\\nlex: git rebase\\n\\nvec: how to rebase a branch")
    Parsed(lines=[('hyde', 'A passage.'), ('lex', 'git rebase'), ('vec', 'how to rebase a branch')], gate=None)
    >>> parse_completion("lex: ok\\nSure! Here are expansions").gate
    'unprefixed line'
    >>> parse_completion("lex: a<|im_end|>").gate
    'chat-template leakage'
    >>> parse_completion("<think>\\n</think>\\nlex: a").gate
    'think block'
    >>> parse_completion("  ").gate
    'empty'
    """
    if not text or not text.strip():
        return Parsed([], "empty")
    if any(p in text for p in LEAK_PATTERNS):
        return Parsed([], "chat-template leakage")
    if THINK.search(text):
        return Parsed([], "think block")
    lines = []
    for raw in text.strip().splitlines():
        line = raw.strip()
        if not line:
            continue
        if ROLE_LINE.match(line):
            return Parsed([], "chat-template leakage")
        m = PREFIX.match(line)
        if not m or not m.group(2).strip():
            return Parsed([], "unprefixed line" if not m else "empty line content")
        lines.append((m.group(1), m.group(2).strip()))
    return Parsed(lines, None)


def entities(query: str) -> list[str]:
    """Named entities of a query, by surface form: capitalised words (also the first),
    acronyms, and words containing digits or ``. - _ / # +``.

    >>> entities("How to configure Kubernetes ingress for node.js on AWS")
    ['kubernetes', 'node.js', 'aws']
    >>> entities("meeting notes from last week")
    []
    >>> entities("C++ move semantics")
    ['c++']
    """
    found = []
    for tok in query.split():
        tok = tok.strip("\"'()[]{},;:!?")
        if not tok or tok.casefold() in QUESTION_STOPWORDS:
            continue
        body = tok.rstrip(".")
        if (tok[0].isupper() or _ENTITY_CHARS.search(body)) and not has_cjk(tok):
            key = body.casefold()
            if key and key not in found:
                found.append(key)
    return found


def _norm_line(text: str) -> str:
    """A line's comparison key: its NFKC case-folded words (:func:`qmdlab.terms.folded_words`)."""
    return " ".join(folded_words(text))


def _contains(text: str, entity: str) -> bool:
    return entity in unicodedata.normalize("NFKC", text).casefold()


def score_expansion(query: str, completion) -> Score:
    """The rule score of ``completion`` (text or chat messages) for ``query``.

    A well-formed expansion scores high, a degenerate one scores low, leakage scores 0:

    >>> good = ("hyde: To rebase a feature branch onto main, run git rebase main and resolve conflicts.\\n"
    ...         "lex: git rebase main\\nlex: rebase feature branch\\n"
    ...         "vec: how do I rebase my feature branch onto main\\nvec: replay git commits on top of main branch")
    >>> round(score_expansion("git rebase onto main", good).total, 3)
    1.0
    >>> score_expansion("git rebase onto main", "lex: git rebase onto main").total < 0.5
    True
    >>> score_expansion("git rebase", "<|im_start|>assistant\\nlex: git").parts
    {}
    """
    text = completion_text(completion)
    parsed = parse_completion(text)
    if parsed.gate:
        return Score(0.0, {}, parsed.gate)
    lines = parsed.lines
    by = {t: [x for tt, x in lines if tt == t] for t in TYPES}
    lex, vec, hyde = by["lex"], by["vec"], by["hyde"]
    qnorm = _norm_line(query)
    qterms = set(terms(query))

    fmt = 10.0 * bool(lex) + 10.0 * bool(vec)
    fmt += 10.0 * (1 <= len(lex) <= 3 and 1 <= len(vec) <= 3 and len(hyde) <= 1)

    normed = [_norm_line(x) for _, x in lines]
    div = 10.0 * (sum(1 for t in TYPES if by[t]) >= 2)
    div += 10.0 * (len(set(normed)) == len(normed))
    div += 10.0 * (qnorm not in normed)

    hy = 0.0
    if hyde:
        h = hyde[0]
        words = _norm_line(h).split()
        hy += 5.0 * (len(hyde) == 1)
        hy += 5.0 * (50 <= len(h) <= 200)
        hy += 5.0 * (bool(words) and len(set(words)) / len(words) >= 0.6)
        hy += 5.0 * (len(set(terms(h)) - qterms) >= 2)

    qual = 0.0
    if lex and vec:
        mean = lambda xs: sum(len(x.split()) for x in xs) / len(xs)  # noqa: E731
        qual += 5.0 * (mean(lex) < mean(vec))
    if vec:
        qual += 5.0 * all(len(x.split()) >= 3 for x in vec) if not has_cjk(" ".join(vec)) else 5.0
    if qterms:
        share = sum(1 for _, x in lines if qterms & set(terms(x))) / len(lines)
        qual += 10.0 * share
    else:
        qual += 10.0

    ents = entities(query)
    if not ents:
        ent = 20.0
    else:
        keep_all = [all(_contains(x, e) for e in ents) for x in lex]
        ent = 15.0 * (sum(keep_all) / len(lex)) if lex else 0.0
        ent += 5.0 * any(_contains(x, e) for x in vec for e in ents)
        dropped = [e for e in ents if not any(_contains(x, e) for _, x in lines)]
        ent -= 10.0 * len(dropped)
        if lex and not any(_contains(x, e) for x in lex for e in ents):
            ent -= 30.0
        ent = max(ent, -45.0)

    parts = {"format": fmt, "diversity": div, "hyde": hy, "quality": qual, "entities": ent}
    total = min(max(sum(parts.values()), 0.0), MAX_POINTS) / MAX_POINTS
    return Score(total, parts, None)


def rule_reward(prompts=None, completions=(), query=None, **kwargs) -> list[float]:
    """TRL reward function: the rule score of each completion (``query`` is a dataset column).

    >>> rule_reward(completions=[[{"role": "assistant", "content": "nonsense"}]], query=["q"])
    [0.0]
    """
    return [score_expansion(q, c).total for q, c in zip(query, completions)]


# ---------------------------------------------------------------------------------------
# Retrieval term
# ---------------------------------------------------------------------------------------

Qrels = Mapping[str, Mapping[str, int]]
#: ``scorer(query, searches)`` → ranked docnos; ``searches`` None means "no expansion".
Scorer = Callable[[str, "Sequence[tuple[str, str]] | None"], Sequence[str]]


def ndcg_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """nDCG@k of one ranked list against graded labels: :mod:`qmdlab.eval.metrics`' ``ndcg@k`` (the one
    definition, checked against ranx), with a document counted once, at its best rank.

    >>> ndcg_at_k(["a", "b", "c"], {"a": 1})
    1.0
    >>> round(ndcg_at_k(["x", "a"], {"a": 1}), 4)
    0.6309
    >>> ndcg_at_k(["x", "x", "a"], {"a": 1}) == ndcg_at_k(["x", "a"], {"a": 1})
    True
    >>> ndcg_at_k(["a"], {"a": 0})  # nothing relevant
    0.0
    """
    import polars as pl

    from qmdlab.eval.metrics import per_query

    ranked = list(dict.fromkeys(ranking))
    metric = f"ndcg@{k}"
    run = pl.DataFrame(
        {"qid": ["q"] * len(ranked), "docno": ranked, "rank": list(range(1, len(ranked) + 1))},
        schema={"qid": pl.Utf8, "docno": pl.Utf8, "rank": pl.Int64},
    )
    judged = pl.DataFrame(
        {"qid": ["q"] * len(qrels), "docno": [str(d) for d in qrels], "grade": [int(g) for g in qrels.values()]},
        schema={"qid": pl.Utf8, "docno": pl.Utf8, "grade": pl.Int64},
    )
    scores = per_query(run, judged, [metric])[metric]
    return float(scores[0]) if len(scores) else 0.0


def rr_at_k(ranking: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    """Reciprocal rank of the first relevant document in the top ``k`` (0 when none is there),
    a document counted once, at its best rank.

    >>> rr_at_k(["a", "b"], {"b": 1}), rr_at_k(["a", "a", "b"], {"b": 1}), rr_at_k(["a", "b"], {"b": 1}, k=1)
    (0.5, 0.5, 0.0)
    >>> rr_at_k(["x", "y", "z"], {"z": 2, "y": 0})
    0.3333333333333333
    """
    for i, d in enumerate(dict.fromkeys(ranking)):
        if i >= k:
            break
        if qrels.get(d, 0) > 0:
            return 1.0 / (i + 1)
    return 0.0


METRICS: dict[str, Callable[[Sequence[str], Mapping[str, int], int], float]] = {"ndcg": ndcg_at_k, "rr": rr_at_k}


@dataclass
class RetrievalReward:
    """Δ metric@k (nDCG by default, ``metric="rr"`` for reciprocal rank) of searching with a
    completion's expansions vs. with none.

    Parameters
    ----------
    scorer : callable
        ``scorer(query, searches) -> ranked docnos``; ``searches`` is the list of
        ``(type, text)`` lines, or None for the no-expansion baseline. See
        :func:`pipeline_scorer` for the qmdlab pipeline.
    qrels : mapping
        ``qid -> {docno: relevance}``.
    k : int
        Cutoff (10).
    metric : str
        ``ndcg`` (graded labels) or ``rr`` (the reciprocal rank of the first relevant document).

    Examples
    --------
    >>> table = {None: ["d2", "d1"], (("lex", "alpha"),): ["d1", "d2"]}
    >>> r = RetrievalReward(lambda q, s: table[tuple(s) if s else None], {"q1": {"d1": 1}})
    >>> round(r("alpha", "q1", "lex: alpha"), 4)
    0.3691
    >>> r("alpha", "", "lex: alpha") is None
    True
    >>> r("alpha", "q1", "garbage") is None
    True
    >>> RetrievalReward(r.scorer, r.qrels, metric="rr")("alpha", "q1", "lex: alpha")
    0.5
    """

    scorer: Scorer
    qrels: Qrels
    k: int = 10
    metric: str = "ndcg"
    _baseline: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            from qmdlab.errors import ConfigError

            raise ConfigError(f"unknown retrieval metric {self.metric!r}; choose one of {', '.join(METRICS)}")

    def value(self, ranking: Sequence[str], qid: str) -> float:
        """The metric of one ranking against ``qid``'s labels."""
        return METRICS[self.metric](list(ranking), self.qrels[qid], self.k)

    def baseline(self, query: str, qid: str) -> float:
        if qid not in self._baseline:
            self._baseline[qid] = self.value(self.scorer(query, None), qid)
        return self._baseline[qid]

    def __call__(self, query: str, qid: str | None, completion) -> float | None:
        """ΔnDCG, or None without labels; None too when the completion fails the gate
        (the rule score already zeroes it; a retrieval number would be meaningless)."""
        if not qid or qid not in self.qrels or not any(v > 0 for v in self.qrels[qid].values()):
            return None
        parsed = parse_completion(completion_text(completion))
        if parsed.gate or not parsed.lines:
            return None
        with_exp = self.value(self.scorer(query, parsed.lines), qid)
        return with_exp - self.baseline(query, qid)

    def reward_func(self, prompts=None, completions=(), query=None, qid=None, **kwargs) -> list[float | None]:
        """TRL reward function signature (``query``/``qid`` are dataset columns)."""
        qids = qid if qid is not None else [None] * len(completions)
        return [self(q, i, c) for q, i, c in zip(query, qids, completions)]


def pipeline_scorer(lab, *, limit: int = 10) -> Scorer:
    """A scorer over a qmdlab :class:`~qmdlab.pipeline.Lab`.

    With expansions, the lines are passed as user-given typed searches
    (``lab.query(query, searches=[(type, text), ...])``, which bypasses the lab's expander);
    the baseline runs ``lab.query(query, expand=False)`` — original query only. Rankings
    are read from ``trace.final`` (``docno`` by ``final_rank``). Note that user-given
    searches skip the pipeline's "shares no query term" filter, so an off-topic line is
    judged by what it retrieves (the rule score's quality part penalises it separately).
    """

    def score(query: str, searches):
        trace = lab.query(query, searches=list(searches)) if searches else lab.query(query, expand=False)
        final = trace.final.sort("final_rank")
        return final["docno"].to_list()[: max(limit, 10)]

    return score


class _FixedLines:
    """An expander that answers with given lines (the completion under evaluation): the pipeline then
    applies its own filter, strong-signal skip and fusion to them, exactly as to a served model's output."""

    fingerprint = "fixed-lines"

    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def expand(self, query: str, intent: str | None = None):
        from qmdlab.models.base import ExpandResult
        from qmdlab.models.expansion import format_lines

        return ExpandResult(format_lines(self.lines), list(self.lines), [])


def engine_scorer(lab, *, limit: int = 10) -> Scorer:
    """A scorer that treats the completion's lines as the *expander's* output, so the reward is
    what the engine would retrieve with this model: the "shares no query term" filter, the
    strong-signal skip and the lab's config apply (:func:`pipeline_scorer` instead passes them as
    user-typed searches, which skip the filter). The baseline runs with expansion off. The lab's
    expander is replaced; use a lab of its own.
    """
    fixed = _FixedLines()
    lab.expander = fixed

    def score(query: str, searches):
        if not searches:
            trace = lab.query(query, expand=False)
        else:
            fixed.lines = [(str(t), str(x)) for t, x in searches]
            trace = lab.query(query, expand=True)
        final = trace.final.sort("final_rank")
        return final["docno"].to_list()[: max(limit, 10)]

    return score


class GainScore(NamedTuple):
    """One completion under :class:`GainReward`: the ``reward`` given (None: nothing to score), the
    raw ``delta`` (None: no labels, or malformed) and whether the completion failed the format check."""

    reward: float | None
    delta: float | None
    malformed: bool


@dataclass
class GainReward:
    """The GRPO reward that targets the retrieval gain of expansion.

    ``Δ = metric@k(expanded) − metric@k(no expansion)`` of the query on the pipeline as configured
    (the ``retrieval`` term's scorer: its lab's gate, expansion types and weights apply, and the
    no-expansion baseline is computed once per query, :meth:`RetrievalReward.baseline`); a gain is
    the reward as is, a harm costs ``harm_weight`` times as much (``reward = Δ`` for ``Δ ≥ 0``,
    ``harm_weight · Δ`` below). The rule score is only a format check: a completion that fails its
    hard gate (:func:`parse_completion`: empty, chat-template leakage, a think block, an unprefixed
    line) gets ``−format_penalty`` whatever it would retrieve. A well-formed completion of a prompt
    without labels has no gain to measure: None (TRL leaves it out of the mean).

    Parameters
    ----------
    retrieval : RetrievalReward or RoutedRetrieval
        ``retrieval(query, qid, completion) -> Δ or None`` (None: no labels, or malformed).
    harm_weight : float
        How much more a loss of the metric counts than the same gain (>= 1 makes the policy
        prefer an expansion that cannot hurt).
    format_penalty : float
        The reward of a malformed completion is minus this.

    Examples
    --------
    >>> table = {None: ["d2", "d1"], (("lex", "good"),): ["d1", "d2"], (("lex", "bad"),): ["d3", "d2", "d1"]}
    >>> r = RetrievalReward(lambda q, s: table[tuple(s) if s else None], {"q1": {"d1": 1}})
    >>> g = GainReward(r, harm_weight=2.0, format_penalty=1.0)
    >>> round(g.score("q", "q1", "lex: good").reward, 4), round(g.score("q", "q1", "lex: bad").reward, 4)
    (0.3691, -0.2619)
    >>> g.score("q", "q1", "Sure! lex: good"), g.score("q", "", "lex: good")
    (GainScore(reward=-1.0, delta=None, malformed=True), GainScore(reward=None, delta=None, malformed=False))
    """

    retrieval: Callable[[str, str | None, object], float | None]
    harm_weight: float = 2.0
    format_penalty: float = 1.0

    def __post_init__(self) -> None:
        if not (self.harm_weight >= 0 and self.format_penalty >= 0):
            from qmdlab.errors import ConfigError

            raise ConfigError(
                f"harm_weight and format_penalty must be >= 0, got {self.harm_weight!r} and {self.format_penalty!r}"
            )

    def shaped(self, delta: float) -> float:
        """The reward of a change ``delta`` of the metric: gains as they are, harm × ``harm_weight``.

        >>> GainReward(None, harm_weight=2.0).shaped(0.25), GainReward(None, harm_weight=2.0).shaped(-0.25)
        (0.25, -0.5)
        """
        return delta if delta >= 0 else self.harm_weight * delta

    def score(self, query: str, qid: str | None, completion) -> GainScore:
        """The reward of one completion, its raw Δ and whether it failed the format check."""
        if parse_completion(completion_text(completion)).gate:
            return GainScore(-self.format_penalty, None, True)
        delta = self.retrieval(query, qid, completion)
        return GainScore(None if delta is None else self.shaped(delta), delta, False)

    def reward_func(
        self, prompts=None, completions=(), query=None, qid=None, log_metric=None, **kwargs
    ) -> list[float | None]:
        """TRL reward function (``query``/``qid`` are dataset columns). With TRL's ``log_metric``
        (GRPOTrainer passes it), each batch logs ``gain/delta`` (mean raw Δ of the completions
        scored), ``gain/harmful`` (the share of them with Δ < 0) and ``gain/malformed`` (the share of
        all completions failing the format check) next to TRL's ``reward`` and ``kl``."""
        qids = qid if qid is not None else [None] * len(completions)
        scores = [self.score(q, i, c) for q, i, c in zip(query, qids, completions)]
        if log_metric is not None and scores:
            deltas = [s.delta for s in scores if s.delta is not None]
            if deltas:
                log_metric("gain/delta", sum(deltas) / len(deltas))
                log_metric("gain/harmful", sum(d < 0 for d in deltas) / len(deltas))
            log_metric("gain/malformed", sum(s.malformed for s in scores) / len(scores))
        return [s.reward for s in scores]


def combined_reward(
    query: str, completion, *, retrieval: float | None, rule_weight: float = 1.0, retrieval_weight: float = 1.0
) -> float:
    """Weighted sum used for reporting: rule score, plus the retrieval term where defined.
    A completion that fails the gate scores 0 whatever retrieval says.

    >>> combined_reward("q", "junk", retrieval=0.5)
    0.0
    """
    s = score_expansion(query, completion)
    if s.gate:
        return 0.0
    return rule_weight * s.total + (retrieval_weight * retrieval if retrieval is not None else 0.0)
