"""Query expander served over HTTP: ``POST {base}/chat/completions`` with the local expander's prompt.

The messages are the turns of :func:`~qmdlab.models.templates.expand_turns` (what
:class:`~qmdlab.models.llama_expand.LlamaExpander` renders into its prompt) and the answer is
parsed by :func:`~qmdlab.models.llama_expand.parse_generated`, so a served model's lines are read
exactly as a local one's. A server cannot be held to the line grammar through the standard API,
so lines outside it are dropped by the parser, each with its reason, and what is read of its
answer is bounded (:func:`~qmdlab.models.expansion.parse_expansion`): an endless line, or
thousands of lines, are dropped with a reason instead of failing the query.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from qmdlab import cancel
from qmdlab.models._http import HttpModel, Served, fingerprint_parts
from qmdlab.models.base import ExpandResult, make_fingerprint
from qmdlab.models.expansion import bounded
from qmdlab.models.llama_expand import SamplingConfig, parse_generated
from qmdlab.models.templates import chat_family, expand_turns

ENDPOINT = "chat/completions"
_THINK = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)


class HttpExpander(HttpModel):
    """Query expansion by a chat model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Parameters
    ----------
    ref : str or Served
        ``http://HOST:PORT/v1#MODEL`` or ``openai:MODEL`` (:mod:`qmdlab.models._http`).
    family : {"qwen3", "chatml", "gemma"}, optional
        Prompt family (which turns are sent); default from the model name.
    sampling : SamplingConfig
        ``temperature``, ``top_p``, ``max_tokens`` and ``seed`` are sent (``top_k`` is not part of
        the OpenAI API, so it is not).
    timeout, retries, backoff : see :class:`~qmdlab.models._http.HttpEndpoint`
    """

    def __init__(
        self,
        ref: str | Served,
        *,
        family: Optional[str] = None,
        sampling: SamplingConfig = SamplingConfig(),
        timeout: Optional[float] = None,
        retries: int = 2,
        backoff: float = 0.5,
    ):
        super().__init__(ref, "expand", timeout=timeout, retries=retries, backoff=backoff)
        served = self.served
        self.family = family or chat_family(served.model or served.ref)
        self.sampling = sampling
        self.fingerprint = make_fingerprint(
            served.ref, **fingerprint_parts(served), role="expand", family=self.family, sampling=sampling.key()
        )

    def messages(self, query: str, intent: Optional[str] = None) -> list[dict[str, str]]:
        system, user = expand_turns(self.family, query, intent)
        return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]

    def expand(self, query: str, *, intent: Optional[str] = None) -> ExpandResult:
        s = self.sampling
        body: dict[str, Any] = {
            "messages": self.messages(query, intent),
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "stream": False,
        }
        if s.seed is not None:
            body["seed"] = s.seed
        if s.repeat_penalty != 1.0:  # llama-server's extension of the OpenAI body
            body["repeat_penalty"] = s.repeat_penalty
        reply = self.endpoint.post(ENDPOINT, body)
        try:
            choice = reply["choices"][0]
            text = choice["message"]["content"] or ""
        except (TypeError, KeyError, IndexError):
            raise self.endpoint.bad_reply(ENDPOINT, "choices[0].message.content", reply) from None
        if not isinstance(text, str):
            raise self.endpoint.bad_reply(ENDPOINT, "a text under choices[0].message.content", reply)
        cancel.check()  # a stopped call's answer is never returned, never cached
        # a thinking model's reasoning block is not part of the expansion
        finish = choice.get("finish_reason")
        return bounded(
            parse_generated(_THINK.sub("", text, count=1), finish if isinstance(finish, str) else None, s.max_tokens)
        )
