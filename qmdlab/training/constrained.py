"""Sampling under the expander's grammar while training, as the engine decodes.

The engine holds an untrained instruct expander to the line format with a grammar
(:func:`qmdlab.models.registry.generic_instruct_grammar`); without one, Qwen2.5-Coder-0.5B answers the
expansion prompt in prose, every GRPO completion fails the format check, and SFT is needed first only
to teach the format (it also teaches its examples' habits). TRL samples GRPO completions with
``transformers``' ``generate``; :func:`constrain_generate` makes every ``generate`` call of a model
sample under a grammar, through xgrammar's logits processor (a fresh matcher per call, since the
processor keeps each sequence's parse state). The policy's log-probabilities are still those of the
unconstrained model: GRPO raises or lowers the probability of what was sampled, format tokens included.
"""

from __future__ import annotations

import functools
from typing import Any

from qmdlab.errors import ConfigError


def _xgrammar():
    try:
        import xgrammar
    except ImportError as err:  # pragma: no cover - `make setup` installs xgrammar
        raise ConfigError(
            "generic_instruct (sampling under the expander's grammar) needs xgrammar: pip install 'qmdlab[grammar]'"
        ) from err
    return xgrammar


def grammar_processor_factory(tokenizer, grammar: str, vocab_size: int):
    """A function that returns a fresh logits processor holding ``generate`` to ``grammar`` (GBNF).

    ``vocab_size`` is the model's (its logits' width), which may exceed the tokenizer's.
    """
    xgr = _xgrammar()
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
    compiled = xgr.GrammarCompiler(info).compile_grammar(grammar)
    return lambda: xgr.contrib.hf.LogitsProcessor(compiled)


def constrain_generate(model, tokenizer, grammar: str) -> None:
    """Make every ``model.generate`` call sample under ``grammar``: a caller's own
    ``logits_processor`` entries still apply, after the grammar's mask."""
    from transformers import LogitsProcessorList

    fresh = grammar_processor_factory(tokenizer, grammar, int(model.config.vocab_size))
    generate = model.generate

    @functools.wraps(generate)
    def constrained(*args: Any, **kwargs: Any):
        kwargs["logits_processor"] = LogitsProcessorList([fresh(), *(kwargs.get("logits_processor") or [])])
        return generate(*args, **kwargs)

    model.generate = constrained
