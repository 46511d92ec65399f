"""The rule score against hand-scored examples, its gate, and the retrieval term."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qmdlab.training.reward import (
    MAX_POINTS,
    RetrievalReward,
    entities,
    ndcg_at_k,
    parse_completion,
    rule_reward,
    score_expansion,
)

# (query, completion, expected points per part) — each worked out by hand in the comments.
HAND_SCORED = [
    # B: all format/diversity points; no hyde; lex 2 words < vec 5 words (5), vec ≥3 words (5),
    # every line shares "ingress" (10); entities kubernetes+tls: no lex line keeps both (0), no vec
    # line keeps one (0), "kubernetes" dropped everywhere (−10), a lex line keeps "tls" (no −30).
    (
        "Kubernetes ingress TLS",
        "lex: ingress tls\nvec: set up https for ingress",
        {"format": 30, "diversity": 30, "hyde": 0, "quality": 20, "entities": -10},
    ),
    # C: an echo with duplicates: format 30; diversity 2 types (10) but duplicates (0) and echo (0);
    # quality: lex not shorter than vec (0), vec of 1 word (0), all lines share "vpn" (10);
    # no entities in "vpn" → 20.
    ("vpn", "lex: vpn\nlex: vpn\nvec: vpn", {"format": 30, "diversity": 10, "hyde": 0, "quality": 10, "entities": 20}),
    # D: hyde present once (5) but 7 chars (0), words distinct (5), adds no new term (0).
    (
        "postgres backup",
        "hyde: Backup.\nlex: postgres backup pg_dump\nvec: how to back up a postgres database",
        {"format": 30, "diversity": 30, "hyde": 10, "quality": 20, "entities": 20},
    ),
    # E: entities aws, s3 dropped by every line: 0 + 0 − 20 − 30 = −50, floored at −45;
    # quality: 5 + 5 + no line shares a query term (0).
    (
        "AWS S3 lifecycle",
        "lex: storage rules\nvec: how to expire old objects",
        {"format": 30, "diversity": 30, "hyde": 0, "quality": 10, "entities": -45},
    ),
    # F: too many lex lines (4) loses the count item; otherwise clean (no entities in the query).
    (
        "redis eviction",
        "hyde: Redis evicts keys with the allkeys-lru policy when maxmemory is reached.\n"
        "lex: redis eviction policy\nlex: redis maxmemory\nlex: redis lru\nlex: redis policy\n"
        "vec: how does redis decide which keys to evict",
        {"format": 20, "diversity": 30, "hyde": 20, "quality": 20, "entities": 20},
    ),
]


@pytest.mark.parametrize("query,completion,parts", HAND_SCORED)
def test_hand_scored_parts(query, completion, parts):
    s = score_expansion(query, completion)
    assert s.gate is None
    assert s.parts == pytest.approx(parts)
    assert s.total == pytest.approx(max(0.0, min(sum(parts.values()), MAX_POINTS)) / MAX_POINTS)


def test_ordering_of_hand_scored_examples():
    totals = [score_expansion(q, c).total for q, c, _ in HAND_SCORED]
    assert totals == pytest.approx([70 / 120, 70 / 120, 110 / 120, 25 / 120, 110 / 120])


@pytest.mark.parametrize(
    "text,reason",
    [
        ("", "empty"),
        ("lex: a\n<|im_start|>assistant", "chat-template leakage"),
        ("lex: fine\nassistant\nvec: x y z", "chat-template leakage"),
        ("lex: a <|endoftext|>", "chat-template leakage"),
        ("<think>hmm</think>\nlex: a", "think block"),
        ("lex: a </think>", "think block"),
        ("Here are some expansions:\nlex: a", "unprefixed line"),
        ("lex: a\n- vec: b", "unprefixed line"),
        ("lex:   \nvec: b c d", "empty line content"),
        ("LEX: shouting", "unprefixed line"),
    ],
)
def test_gate_is_a_hard_zero(text, reason):
    assert parse_completion(text).gate == reason
    s = score_expansion("git rebase", text)
    assert (s.total, s.gate) == (0.0, reason)


def test_good_expansion_beats_echo_and_entity_drop():
    q = "Kubernetes ingress TLS"
    good = (
        "hyde: A Kubernetes Ingress terminates TLS with a certificate stored in a secret referenced by spec.tls.\n"
        "lex: Kubernetes ingress TLS secret\nvec: configure TLS certificates for a Kubernetes ingress"
    )
    echo = "lex: Kubernetes ingress TLS\nvec: Kubernetes ingress TLS"
    dropped = "hyde: Ingress needs a certificate to serve https traffic for the cluster services.\nlex: ingress cert\nvec: set up an ingress certificate"
    g, e, d = (score_expansion(q, c).total for c in (good, echo, dropped))
    assert g == 1.0 and g > e and g > d


def test_entities_surface_forms():
    assert entities("node.js EADDRINUSE on port 3000") == ["node.js", "eaddrinuse", "3000"]
    assert entities("What did Alice say about the Q3 roadmap") == ["alice", "q3"]  # "What": a stopword
    assert entities("数据库备份") == []


def test_rule_reward_reads_trl_conversational_completions():
    comps = [
        [{"role": "assistant", "content": "lex: vpn setup\nvec: how to connect to the vpn"}],
        [{"role": "assistant", "content": "I think you mean vpn"}],
    ]
    out = rule_reward(prompts=None, completions=comps, query=["vpn", "vpn"])
    assert out[0] > 0.5 and out[1] == 0.0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.text(min_size=1, max_size=40))
def test_score_is_bounded_for_any_text(text, query):
    s = score_expansion(query, text)
    assert 0.0 <= s.total <= 1.0
    assert (s.gate is None) == bool(s.parts)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["lex", "vec", "hyde"]),
            st.text(alphabet="abcdefgh XYZ.-", min_size=1, max_size=30).filter(lambda s: s.strip()),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_well_formed_lines_never_hit_the_gate(lines):
    text = "\n".join(f"{t}: {x}" for t, x in lines)
    assert score_expansion("abc query", text).gate is None


# ------------------------------------------------------------------ nDCG and the retrieval term


@pytest.mark.slow  # ranx compiles its metrics with numba on first use (~30 s)
def test_ndcg_matches_ranx(require):
    require.extra("eval")
    import ranx

    rng = random.Random(7)
    qrels, run, ours = {}, {}, []
    docs = [f"d{i}" for i in range(30)]
    for q in range(25):
        rel = {d: rng.choice([1, 2, 3]) for d in rng.sample(docs, rng.randint(1, 6))}
        ranking = rng.sample(docs, 15)
        qrels[f"q{q}"] = rel
        run[f"q{q}"] = {d: float(15 - i) for i, d in enumerate(ranking)}
        ours.append(ndcg_at_k(ranking, rel, 10))
    ranx_run = ranx.Run(run)
    ranx.evaluate(ranx.Qrels(qrels), ranx_run, "ndcg@10")
    theirs = [ranx_run.scores["ndcg@10"][f"q{q}"] for q in range(25)]
    assert theirs == pytest.approx(ours, abs=1e-9)


def test_retrieval_reward_delta_and_baseline_cache():
    calls = []

    def scorer(query, searches):
        calls.append(searches)
        if searches is None:
            return ["x", "y", "rel"]
        return ["rel", "x"] if any("good" in t for _, t in searches) else ["x", "y", "z"]

    r = RetrievalReward(scorer, {"q1": {"rel": 2}, "q2": {"other": 0}})
    base = ndcg_at_k(["x", "y", "rel"], {"rel": 2})
    assert r("query", "q1", "lex: good words") == pytest.approx(1.0 - base)
    assert r("query", "q1", "lex: bad words") == pytest.approx(0.0 - base)
    assert sum(c is None for c in calls) == 1  # the baseline ran once for q1
    assert r("query", "q2", "lex: good") is None  # labels but nothing relevant
    assert r("query", "nope", "lex: good") is None  # no labels
    assert r("query", "q1", "chatter") is None  # gated completion: no retrieval number
    out = r.reward_func(
        completions=[[{"role": "assistant", "content": "lex: good"}]] * 2, query=["query", "query"], qid=["q1", ""]
    )
    assert out[0] == pytest.approx(1.0 - base) and out[1] is None


def test_grpo_reward_functions_names_weights_and_parts():
    from qmdlab.training.grpo import GRPORunConfig, reward_functions

    r = RetrievalReward(lambda q, s: ["d"] if s else [], {"q1": {"d": 1}})
    funcs, weights = reward_functions(GRPORunConfig(rule_weight=1.0, retrieval_weight=0.5), r)
    names = [f.__name__ for f in funcs]
    assert names == ["rule", "retrieval", "rule_format", "rule_diversity", "rule_hyde", "rule_quality", "rule_entities"]
    assert weights == [1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0]
    q, c = HAND_SCORED[0][0], [{"role": "assistant", "content": HAND_SCORED[0][1]}]
    values = {f.__name__: f(prompts=None, completions=[c], query=[q], qid=["q1"])[0] for f in funcs}
    assert values["rule"] == pytest.approx(70 / 120)
    assert values["retrieval"] == pytest.approx(1.0)
    parts = HAND_SCORED[0][2]
    assert [values[f"rule_{p}"] * 120 for p in parts] == pytest.approx(list(parts.values()))
    assert reward_functions(GRPORunConfig(), None)[0][1].__name__ == "rule_format"  # no retrieval term
