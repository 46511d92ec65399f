"""The model-role overrides shared by every verb that loads a model: ``--embed-model``,
``--expand-model``, ``--rerank-model``.

One definition, so each verb spells, documents and applies an override the same way: the verb
declares the roles it loads (``@role_options("embed")`` on ``vsearch``, all three on ``query``,
``eval``, ``tune``, ``mcp`` …) and receives the given ones as one ``roles`` mapping, ready for
:func:`qmdlab.models.load_models` (``load_models(preset, **roles)``) or
:func:`qmdlab.models.registry.resolve_refs`. An override picks the model of a role; whether its
stage runs stays the stage rule's (:func:`qmdlab.pipeline.stages.plan_stages`: flag, config, preset).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

ROLES = ("embed", "expand", "rerank")

_WHAT = {"embed": "embedding", "expand": "query-expansion", "rerank": "reranker"}
_MORE = {"rerank": ", cross-encoder:DIR, qlm:MODEL"}


def role_options(*roles: str) -> Callable:
    """Decorator adding ``--<role>-model`` for each of ``roles`` (default: all three).

    The command function gets a ``roles`` keyword: ``{role: reference}`` of the overrides given
    (empty when none), in place of one parameter per option.
    """
    roles = roles or ROLES
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown model role(s) {sorted(unknown)}; expected some of {ROLES}")

    def deco(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = {r: kwargs.pop(f"{r}_model") for r in roles}
            kwargs["roles"] = {r: v for r, v in given.items() if v is not None and v != ""}
            return fn(*args, **kwargs)

        for role in reversed(roles):
            wrapper = click.option(
                f"--{role}-model",
                f"{role}_model",
                default=None,
                metavar="REF",
                help=f"The {_WHAT[role]} model for this run instead of the preset's: hf:ORG/REPO/FILE.gguf, "
                f"pkg:NAME, a .gguf path{_MORE.get(role, '')}, or 'none' (the role off).",
            )(wrapper)
        return wrapper

    return deco


__all__ = ["ROLES", "role_options"]
