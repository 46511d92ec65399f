"""The one rendering of expander prompts and completions, shared by training and inference.

The expander is trained on, and must be queried with, exactly this text:

- user turn ``/no_think Expand this search query: {query}`` (plus an
  ``Intent: {intent}`` line when an intent is given), as in :mod:`qmdlab.models.templates`;
- the Qwen3 chat template with ``enable_thinking=False``, which ends the prompt with an
  *empty* think block ``<think>\\n\\n</think>\\n\\n`` after ``<|im_start|>assistant\\n``;
- the completion: one ``hyde:`` line first, then ``lex:`` lines, then ``vec:`` lines.

:func:`qwen3_prompt` writes that prompt without a tokenizer; it *is* the prompt the
engine's llama.cpp expander (:class:`qmdlab.models.llama_expand.LlamaExpander`, family
``qwen3``) feeds as raw text, instead of llama.cpp's own chat handler, which would render a
different think block; :func:`render_prompt` asks a tokenizer's chat template (what TRL
does during SFT/GRPO). A test checks that the two agree byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from qmdlab.models.expander_sidecar import user_turn
from qmdlab.models.templates import EXPAND_SYSTEM, expand_prompt

TYPE_ORDER = ("hyde", "lex", "vec")
#: Passed to every ``apply_chat_template`` call (SFT, GRPO, evaluation).
CHAT_TEMPLATE_KWARGS = {"enable_thinking": False}


def user_message(query: str, intent: str | None = None) -> str:
    """The user turn for ``query`` (:func:`qmdlab.models.expander_sidecar.user_turn`, the text the engine
    feeds a trained expander).

    >>> user_message("git rebase")
    '/no_think Expand this search query: git rebase'
    >>> user_message("jaguar", intent="the car")
    '/no_think Expand this search query: jaguar\\nIntent: the car'
    """
    return user_turn(query, intent)


def prompt_messages(query: str, intent: str | None = None, *, generic: bool = False) -> list[dict[str, str]]:
    """The conversational prompt (one user message) for TRL datasets; with ``generic``, first the system
    turn the engine gives an untrained instruct model (:data:`~qmdlab.models.templates.EXPAND_SYSTEM`,
    the line format explained).

    >>> [m["role"] for m in prompt_messages("git rebase")], [m["role"] for m in prompt_messages("x", generic=True)]
    (['user'], ['system', 'user'])
    """
    user = [{"role": "user", "content": user_message(query, intent)}]
    return [{"role": "system", "content": EXPAND_SYSTEM}, *user] if generic else user


def qwen3_prompt(query: str, intent: str | None = None) -> str:
    """The exact Qwen3 (``enable_thinking=False``) generation prompt, as a raw string.

    >>> qwen3_prompt("git rebase")
    '<|im_start|>user\\n/no_think Expand this search query: git rebase<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'
    """
    return expand_prompt("qwen3", query.strip(), intent.strip() if intent else None)


def render_prompt(tokenizer, query: str, intent: str | None = None) -> str:
    """The generation prompt as ``tokenizer``'s chat template renders it (thinking off)."""
    return tokenizer.apply_chat_template(
        prompt_messages(query, intent),
        tokenize=False,
        add_generation_prompt=True,
        **CHAT_TEMPLATE_KWARGS,
    )


def order_lines(lines: Iterable[Sequence[str]]) -> list[tuple[str, str]]:
    """Sort typed lines hyde → lex → vec, keeping the order within a type.

    >>> order_lines([("vec", "b"), ("lex", "a"), ("hyde", "h"), ("lex", "c")])
    [('hyde', 'h'), ('lex', 'a'), ('lex', 'c'), ('vec', 'b')]
    """
    pairs = [(str(t), str(x)) for t, x in lines]
    return sorted(pairs, key=lambda p: TYPE_ORDER.index(p[0]) if p[0] in TYPE_ORDER else len(TYPE_ORDER))


def format_completion(lines: Iterable[Sequence[str]], *, ordered: bool = True) -> str:
    """The completion text: ``type: text`` lines, hyde first, then lex, then vec (``ordered=False``: as given).

    >>> print(format_completion([("lex", "git rebase"), ("hyde", "Rebase replays commits.")]))
    hyde: Rebase replays commits.
    lex: git rebase
    >>> format_completion([("lex", "a"), ("hyde", "B.")], ordered=False)
    'lex: a\\nhyde: B.'
    """
    return "\n".join(f"{t}: {x.strip()}" for t, x in (order_lines(lines) if ordered else lines))
