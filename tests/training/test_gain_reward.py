"""GRPO's ``reward: gain``: ΔnDCG@10 against the same query without expansion, harm weighted, the
rule score only as a format check — its arithmetic, what it logs, its place among GRPO's reward
functions, and that the reward's pipeline is the configured one (its gate and weights apply)."""

from __future__ import annotations

import math

import pytest

from qmdlab.errors import ConfigError
from qmdlab.training.reward import GainReward, RetrievalReward, pipeline_scorer

GAIN = 1 - 1 / math.log2(3)  # the answer moves from rank 2 to rank 1
HARM = 1 / math.log2(3) - 1 / math.log2(4)  # from rank 2 to rank 3
TABLE = {None: ["d2", "d1"], "lex: good": ["d1", "d2"], "lex: bad": ["d3", "d2", "d1"], "lex: same": ["d2", "d1"]}


def _reward(calls: list | None = None, **kw) -> GainReward:
    def scorer(query, searches):
        if calls is not None:
            calls.append(searches)
        return TABLE[None if searches is None else "\n".join(f"{t}: {x}" for t, x in searches)]

    return GainReward(RetrievalReward(scorer, {"q1": {"d1": 1}, "q2": {"d1": 1}}), **kw)


def test_a_gain_is_the_reward_as_is_and_a_harm_counts_harm_weight_times():
    g = _reward(harm_weight=2.0)
    good, bad, same = (g.score("query", "q1", c) for c in ("lex: good", "lex: bad", "lex: same"))
    assert good.delta == pytest.approx(GAIN) and good.reward == pytest.approx(GAIN)
    assert bad.delta == pytest.approx(-HARM) and bad.reward == pytest.approx(-2.0 * HARM)
    assert same.delta == 0.0 and same.reward == 0.0
    assert _reward(harm_weight=3.0).score("query", "q1", "lex: bad").reward == pytest.approx(-3.0 * HARM)
    assert _reward(harm_weight=1.0).score("query", "q1", "lex: bad").reward == pytest.approx(-HARM)


@pytest.mark.parametrize(
    "completion",
    ["", "Sure! here you go\nlex: good", "lex: good<|im_end|>", "<think>\n</think>\nlex: good", "lex:   "],
)
def test_a_malformed_completion_gets_the_format_penalty_whatever_it_would_retrieve(completion):
    calls: list = []
    s = _reward(calls, format_penalty=0.5).score("query", "q1", completion)
    assert (s.reward, s.delta, s.malformed) == (-0.5, None, True)
    assert calls == []  # not searched at all


def test_a_prompt_without_labels_has_no_gain_but_still_a_format_check():
    g = _reward()
    assert g.score("query", "", "lex: good").reward is None
    assert g.score("query", "unjudged", "lex: good").reward is None
    assert g.score("query", "", "not a line").reward == -1.0


def test_the_no_expansion_baseline_is_computed_once_per_query():
    calls: list = []
    g = _reward(calls)
    for c in ("lex: good", "lex: bad", "lex: same", "lex: good"):
        g.score("query", "q1", c)
    g.score("query", "q2", "lex: good")
    assert calls.count(None) == 2  # one baseline per qid, however many completions


def test_the_reward_function_logs_mean_delta_and_the_harmful_and_malformed_shares():
    logged: dict[str, list[float]] = {}
    out = _reward(harm_weight=2.0).reward_func(
        completions=[[{"role": "assistant", "content": c}] for c in ("lex: good", "lex: bad", "garbage", "lex: good")],
        query=["query"] * 4,
        qid=["q1", "q1", "q1", ""],
        log_metric=lambda name, value: logged.setdefault(name, []).append(value),
    )
    assert out[0] == pytest.approx(GAIN) and out[1] == pytest.approx(-2 * HARM) and out[2:] == [-1.0, None]
    assert logged["gain/delta"] == [pytest.approx((GAIN - HARM) / 2)]  # the two completions scored
    assert logged["gain/harmful"] == [0.5] and logged["gain/malformed"] == [0.25]


def test_negative_weights_are_refused():
    with pytest.raises(ConfigError, match="harm_weight"):
        _reward(harm_weight=-1.0)


def test_grpo_gain_mode_reward_functions():
    from qmdlab.training.grpo import GRPORunConfig, reward_functions

    r = _reward().retrieval
    funcs, weights = reward_functions(GRPORunConfig(reward="gain", harm_weight=3.0), r)  # type: ignore[arg-type]
    names = [f.__name__ for f in funcs]
    assert names == ["gain", "rule", "rule_format", "rule_diversity", "rule_hyde", "rule_quality", "rule_entities"]
    assert weights == [1.0] + [0.0] * 6  # the rule score is logged, not optimised
    value = funcs[0](completions=[[{"role": "assistant", "content": "lex: bad"}]], query=["query"], qid=["q1"])
    assert value == [pytest.approx(-3.0 * HARM)]
    with pytest.raises(ConfigError, match="reward: gain needs the retrieval term"):
        reward_functions(GRPORunConfig(reward="gain"), None)
    with pytest.raises(ConfigError, match="unknown reward 'ndcg'"):
        reward_functions(GRPORunConfig(reward="ndcg"), r)  # type: ignore[arg-type]


def test_the_rule_function_records_the_prompts_seen(tmp_path):
    from types import SimpleNamespace

    from qmdlab.training.grpo import GRPORunConfig, PromptLog, reward_functions

    log = PromptLog(tmp_path / "prompts_seen.jsonl")
    funcs, _ = reward_functions(GRPORunConfig(), None, seen=log)
    c = [{"role": "assistant", "content": "lex: a"}]
    for step, (q, qid) in enumerate([("a", "L1"), ("b", ""), ("c", "L3")]):
        funcs[0](completions=[c, c], query=[q, q], qid=[qid, qid], trainer_state=SimpleNamespace(global_step=step))
    assert [(r["step"], r["queries"], r["qids"]) for r in log.rows()] == [
        (0, ["a"], ["L1"]),
        (1, ["b"], []),
        (2, ["c"], ["L3"]),
    ]
    log.truncate(2)  # a resume from checkpoint-2 draws step 2's batch again
    assert [r["step"] for r in log.rows()] == [0, 1]


def test_the_gain_is_measured_on_the_configured_pipeline(bm25_lab):
    """An expansion that finds only another document: with a heavy lex weight it pushes the answer
    down (harm), with the gate on it is gated and the query ranks as without expansion (Δ exactly 0)."""
    qrels = {"q1": {"n/history.md": 1}}
    bm25_lab.config = bm25_lab.config.replace(weight_lex=3.0)
    off = GainReward(RetrievalReward(pipeline_scorer(bm25_lab), qrels), harm_weight=2.0)
    s = off.score("squash court", "q1", "lex: spaghetti boil water")
    assert s.delta == pytest.approx(-(1 - 1 / math.log2(3))) and s.reward == pytest.approx(2 * s.delta)
    bm25_lab.config = bm25_lab.config.replace(expand_gate="overlap")
    gated = GainReward(RetrievalReward(pipeline_scorer(bm25_lab), qrels), harm_weight=2.0)
    assert gated.score("squash court", "q1", "lex: spaghetti boil water") == (0.0, 0.0, False)
    trace = bm25_lab.query("squash court", searches=[("lex", "spaghetti boil water")])
    assert trace.notes_for("fuse")[0].startswith("expansion gated: overlap 0.00 < 0.30")
