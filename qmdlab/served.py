"""Which model references name a model served over HTTP: the one rule the store (approvals of a
checked-in config's models) and the model backends (:mod:`qmdlab.models._http`) both apply.

A base module: it imports nothing of qmdlab.
"""

from __future__ import annotations

#: The prefixes of a served-model reference: an OpenAI-compatible server's URL, or ``openai:MODEL``.
SERVED_PREFIXES = ("http://", "https://", "openai:")


def is_served(ref: object) -> bool:
    """Whether ``ref`` names a served model (every text it embeds, expands or judges is sent there).

    >>> is_served("http://127.0.0.1:8080/v1#m"), is_served("openai:text-embedding-3-small"), is_served("pkg:x")
    (True, True, False)
    """
    return isinstance(ref, str) and ref.startswith(SERVED_PREFIXES)


__all__ = ["SERVED_PREFIXES", "is_served"]
