"""Model roles (embed, expand, rerank), their llama.cpp backends, presets, fakes and caching.

>>> from qmdlab.models import load_models
>>> models = load_models("fake")            # deterministic, no weights
>>> models.expander.expand("anything").lines
[]

Real backends import ``llama_cpp`` only when a model is first used; install it with
``pip install 'qmdlab[llama]'``.
"""

from __future__ import annotations

from qmdlab.models.base import ROLES, Embedder, Expander, ExpandResult, ModelSet, Reranker, l2_normalize
from qmdlab.models.cached import CachedExpander, CachedReranker
from qmdlab.models.expansion import GRAMMAR, grammar_for, parse_expansion
from qmdlab.models.fakes import KeywordEmbedder, RuleExpander, TableReranker, term_overlap
from qmdlab.models.registry import PRESETS, load_models, resolve_refs, with_cache
from qmdlab.models.scoring import p_yes

__all__ = [
    "ROLES",
    "Embedder",
    "Expander",
    "Reranker",
    "ExpandResult",
    "ModelSet",
    "l2_normalize",
    "CachedExpander",
    "CachedReranker",
    "GRAMMAR",
    "grammar_for",
    "parse_expansion",
    "KeywordEmbedder",
    "RuleExpander",
    "TableReranker",
    "term_overlap",
    "PRESETS",
    "load_models",
    "resolve_refs",
    "with_cache",
    "p_yes",
]
