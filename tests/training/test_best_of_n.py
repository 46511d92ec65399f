"""Best-of-n SFT examples (:mod:`qmdlab.training.best_of_n`): which sample is kept (closed form), that
every answer is scored by the gain reward and recorded so a stopped run resumes where it stopped, and,
through the recipe on the bundled notes, that only train-split queries are ever answered or kept."""

from __future__ import annotations

import json
import math

import pytest

from qmdlab.models.base import ExpandResult
from qmdlab.models.llama_expand import SamplingConfig
from qmdlab.training.reward import GainReward, RetrievalReward

pytestmark = pytest.mark.extra("train")

GAIN = 1 - 1 / math.log2(3)  # the relevant document moves from rank 2 to rank 1


class SeededExpander:
    """Answers by the sampling it is given: greedy (temperature 0) and each seed have their own text."""

    fingerprint = "seeded#test"

    def __init__(self, answers: dict):
        self.answers = answers  # {(query, seed or None): raw}
        self.sampling = SamplingConfig()
        self.calls: list[tuple[str, int | None, float, int]] = []

    def expand(self, query, *, intent=None):
        s = self.sampling
        seed = None if s.temperature == 0 else s.seed
        self.calls.append((query, seed, s.temperature, s.max_tokens))
        raw = self.answers.get((query, seed), "lex: same")
        return ExpandResult(raw, [], [])


def _gain() -> GainReward:
    table = {None: ["d2", "d1"], "good": ["d1", "d2"], "bad": ["d3", "d2", "d1"], "same": ["d2", "d1"]}
    return GainReward(
        RetrievalReward(lambda q, s: table[None if s is None else s[0][1]], {"q1": {"d1": 1}, "q2": {"d1": 1}})
    )


ROWS = [{"qid": "q1", "query": "first"}, {"qid": "q2", "query": "second"}]


def test_each_query_is_answered_greedily_and_n_times_and_every_answer_is_scored(tmp_path):
    from qmdlab.training.best_of_n import examples_from, sample_and_score

    exp = SeededExpander({("first", 1): "lex: good", ("first", 2): "lex: bad", ("second", None): "lex: good"})
    found = sample_and_score(
        ROWS,
        exp,
        _gain(),
        samples=3,
        sampling=SamplingConfig(temperature=1.0, max_tokens=50),
        out_file=tmp_path / "s.jsonl",
        progress=False,
    )
    # greedy at the sampling's token cap, then seeds 0..n-1 at the sampling temperature
    assert exp.calls[:4] == [
        ("first", None, 0.0, 50),
        ("first", 0, 1.0, 50),
        ("first", 1, 1.0, 50),
        ("first", 2, 1.0, 50),
    ]
    assert [r["delta"] for r in found["q1"]] == pytest.approx([0.0, 0.0, GAIN, -(1 / math.log2(3) - 0.5)])
    assert exp.sampling == SamplingConfig()  # the expander's own sampling is given back
    (ex,) = examples_from(found)  # q2's samples only tie its greedy answer, which already gains
    assert (ex.query, ex.output, ex.extra["greedy_delta"]) == ("first", (("lex", "good"),), 0.0)
    assert ex.extra["delta"] == pytest.approx(GAIN)


def test_a_stopped_run_resumes_at_the_next_unanswered_query(tmp_path):
    from qmdlab.training.best_of_n import sample_and_score

    out = tmp_path / "samples.jsonl"
    first = SeededExpander({})
    sample_and_score(
        ROWS[:1], first, _gain(), samples=2, sampling=SamplingConfig(temperature=1.0), out_file=out, progress=False
    )
    again = SeededExpander({})
    found = sample_and_score(
        ROWS, again, _gain(), samples=2, sampling=SamplingConfig(temperature=1.0), out_file=out, progress=False
    )
    assert {q for q, *_ in again.calls} == {"second"} and sorted(found) == ["q1", "q2"]
    assert len(out.read_text().splitlines()) == 6  # 2 queries x (greedy + 2 samples), each written once


def test_the_kept_answer_must_beat_zero_and_the_greedy_answer_by_min_gain():
    from qmdlab.training.best_of_n import examples_from

    recs = [
        {"qid": "q", "query": "x", "seed": None, "raw": "lex: g", "delta": 0.05},
        {"qid": "q", "query": "x", "seed": 0, "raw": "vec: a b\nlex: c", "delta": 0.2},
        {"qid": "q", "query": "x", "seed": 1, "raw": "Sure!", "delta": None},
    ]
    (ex,) = examples_from({"q": recs})
    assert ex.output == (("vec", "a b"), ("lex", "c"))  # the order the model wrote
    assert examples_from({"q": recs}, min_gain=0.15) == []
    harmful = [{**r, "delta": -0.1 if r["seed"] == 0 else r["delta"]} for r in recs]
    assert examples_from({"q": harmful}) == []


def test_sft_records_of_own_answers_carry_the_engines_system_turn(tmp_path):
    from qmdlab.models.templates import EXPAND_SYSTEM
    from qmdlab.training.data import Example
    from qmdlab.training.sft import _dataset

    ds = _dataset([Example("x", (("vec", "a b"), ("lex", "c")))], generic=True)
    assert ds[0]["prompt"][0] == {"role": "system", "content": EXPAND_SYSTEM}
    assert ds[0]["completion"][0]["content"] == "vec: a b\nlex: c"
    assert _dataset([Example("x", (("vec", "a b"), ("lex", "c")))])[0]["completion"][0]["content"] == "lex: c\nvec: a b"


def test_the_recipe_answers_and_keeps_only_train_split_queries(monkeypatch, tmp_path, qmdlab_home):
    """On the bundled notes with the fake preset's vectors: the recipe's best-of-n stage samples through
    the preset's expander (here one whose seed 0 names the relevant note's title), keeps what gains, and
    hands SFT the generic prompt; no held-out query is ever expanded, and GRPO does not run."""
    import polars as pl

    import qmdlab.models as models_mod
    import qmdlab.training.export as export
    import qmdlab.training.grpo as grpo
    import qmdlab.training.sft as sft
    from qmdlab.eval.suites import get_suite
    from qmdlab.models import ModelSet
    from qmdlab.training.cpu_run import RecipeConfig, run_recipe
    from qmdlab.training.data import load_examples
    from qmdlab.training.splits import load_splits

    suite = get_suite("default")
    judged = suite.data().judged_queries()
    text = dict(zip(judged["qid"].cast(str), judged["query"], strict=True))
    qrels = suite.qrels_docnos().filter(pl.col("grade") > 0).sort("grade", descending=True, maintain_order=True)
    answers = {}
    for qid, docno in zip(qrels["qid"].cast(str), qrels["docno"], strict=True):
        if (text[qid], 0) in answers:
            continue
        title = next(
            (
                ln.lstrip("# ").strip()
                for ln in (suite.corpus_dir() / docno.split("/", 1)[1]).read_text().splitlines()
                if ln.strip()
            ),
            "",
        )
        answers[(text[qid], 0)] = f"lex: {text[qid].split()[0]} {title}"
    seeded = SeededExpander(answers)
    real_load = models_mod.load_models

    loaded = []

    def load_with_seeded_expander(*args, **kw):
        loaded.append(kw.get("expand"))
        m = real_load(*args, **kw)
        return ModelSet(m.embedder, seeded, m.reranker)

    monkeypatch.setattr(models_mod, "load_models", load_with_seeded_expander)
    sft_calls = []
    monkeypatch.setattr(sft, "run_sft", lambda cfg: sft_calls.append(cfg) or {"merged": str(tmp_path / "sft-merged")})
    monkeypatch.setattr(grpo, "run_grpo", lambda cfg: pytest.fail("skip_grpo: GRPO must not run"))
    exports = []
    monkeypatch.setattr(
        export,
        "run_export",
        lambda cfg: exports.append(cfg) or {"quants": {q: f"{cfg.output_dir}/x-{q}.gguf" for q in cfg.quants}},
    )
    monkeypatch.setattr("qmdlab.training.cpu_run.preload", lambda: 0)
    d = "qmdlab/training/configs/default-expander-best-of-n"
    grpo_yaml = tmp_path / "grpo.yaml"
    grpo_yaml.write_text(open(f"{d}/grpo.yaml").read().replace("models_preset: offline", "models_preset: fake"))
    recipe = RecipeConfig(
        base=str(tmp_path / "hf-base"),
        out=str(tmp_path / "run"),
        suites=["default"],
        synth=None,
        sft_examples="best_of_n",
        best_of_n_samples=2,
        sft=f"{d}/sft.yaml",
        grpo=str(grpo_yaml),
        skip_grpo=True,
        evaluate=None,
        skip_base=True,
        best_of_n_expander="fake:rules",  # an earlier round's export, in expert iteration
    )
    summary = run_recipe(recipe)

    split = load_splits(tmp_path / "run" / "splits.json")["default"]
    train_text, held_text = {text[q] for q in split.train if q in text}, {text[q] for q in split.heldout if q in text}
    asked = {q for q, *_ in seeded.calls}
    assert asked and asked <= train_text and not asked & held_text
    assert "fake:rules" in loaded  # the sampled expander is the one the recipe names
    kept = load_examples(tmp_path / "run" / "data" / "all.jsonl")
    assert kept and {e.query for e in kept} <= train_text
    bon = json.loads((tmp_path / "run" / "best-of-n" / "summary.json").read_text())
    assert bon["kept"] == len(kept) and bon["kept_delta"] > 0 and bon["queries"] == len(asked)
    samples = [json.loads(ln) for ln in (tmp_path / "run" / "best-of-n" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 3 * len(asked)
    assert [c.generic_instruct for c in sft_calls] == [True]
    assert [(c.name, c.generic_instruct) for c in exports] == [("sft", True)]
    assert list(summary["models"]) == ["sft"] and summary["grpo"] == {}


def test_a_run_stopped_mid_query_keeps_the_queries_before_it_and_the_expanders_sampling(tmp_path):
    from qmdlab.training.best_of_n import sample_and_score

    class StopsOnSecond(SeededExpander):
        def expand(self, query, *, intent=None):
            if query == "second" and self.sampling.seed == 1:
                raise KeyboardInterrupt  # Ctrl-C in the middle of the second query
            return super().expand(query, intent=intent)

    out = tmp_path / "samples.jsonl"
    exp = StopsOnSecond({})
    with pytest.raises(KeyboardInterrupt):
        sample_and_score(
            ROWS, exp, _gain(), samples=2, sampling=SamplingConfig(temperature=1.0), out_file=out, progress=False
        )
    assert exp.sampling == SamplingConfig()
    assert {json.loads(ln)["qid"] for ln in out.read_text().splitlines()} == {"q1"}  # no half-written query
