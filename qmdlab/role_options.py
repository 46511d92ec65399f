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
#: The presets ``--preset`` names in its help, as :data:`qmdlab.models.registry.PRESETS` holds them (a
#: test keeps the two equal: importing the registry here would load numpy on every CLI start).
PRESET_NAMES = ("offline", "offline-mini", "offline-gemma", "qmd", "tiny", "fake")
PRESET_HELP = f"Model preset: {', '.join(PRESET_NAMES)} (default $QMDLAB_PRESET or offline)."

_WHAT = {"embed": "embedding", "expand": "query-expansion", "rerank": "reranker"}
_MORE = {"embed": ", REF+adapter:PATH (a query adapter)", "rerank": ", cross-encoder:DIR, qlm:MODEL"}


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


def preset_option(**extra: Any) -> Callable:
    """``--preset NAME``, one spelling and help for every verb that loads a model (``extra``: more
    :func:`click.option` settings, e.g. ``envvar``)."""
    return click.option("--preset", default=None, help=PRESET_HELP, **extra)


def model_options(*roles: str) -> Callable:
    """``--preset`` and the ``--<role>-model`` overrides of ``roles`` (:func:`role_options`), in that order."""

    def deco(fn: Callable) -> Callable:
        return preset_option()(role_options(*roles)(fn))

    return deco


__all__ = ["PRESET_HELP", "PRESET_NAMES", "ROLES", "model_options", "preset_option", "role_options"]
