"""One parser for every training step's configuration, whichever way the step is started.

``qmdlab train STEP --config FILE [--set KEY=VALUE …]`` and ``python -m qmdlab.training.STEP
[--config FILE] [--field value …]`` (also under ``accelerate launch``) both end in
:func:`load_config`: the YAML file, then the overrides, every value read as YAML (``1e-4`` is a
number, ``[q, v]`` a list, ``true`` a bool) and coerced to the dataclass field's type the same
way, and an unknown key is an error that lists the known ones.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from qmdlab.errors import ConfigError

T = TypeVar("T")


@dataclasses.dataclass
class SuiteRunConfig:
    """The first fields of a run config trained on a suite (doc2query, embedder, reranker): the suite and its format."""

    suite: str = dataclasses.field(default="default", metadata={"help": "Suite name (default, cisi) or directory."})
    format: str | None = dataclasses.field(default=None, metadata={"help": "Suite format when --suite is a directory."})


def load_config(cls: type[T], path: str | Path | None = None, **overrides: Any) -> T:
    """Build dataclass ``cls`` from an optional YAML mapping plus keyword overrides.

    Unknown keys are an error (a typo must not silently fall back to a default).

    >>> @dataclasses.dataclass
    ... class C:
    ...     lr: float = 1.0
    ...     name: str = "x"
    >>> load_config(C, lr=2.0)
    C(lr=2.0, name='x')
    >>> load_config(C, nme="y")
    Traceback (most recent call last):
    ...
    qmdlab.errors.ConfigError: unknown C option(s): nme (known: lr, name)
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ConfigError(f"{path}: cannot read config ({err})") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: a config must be a YAML mapping")
        data.update(loaded)
    data.update({k: v for k, v in overrides.items() if v is not None})
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} option(s): {', '.join(unknown)} (known: {', '.join(sorted(names))})")
    hints = typing.get_type_hints(cls)
    return cls(**{k: coerce(cls.__name__, k, v, hints.get(k)) for k, v in data.items()})


def coerce(owner: str, name: str, value: Any, hint: Any) -> Any:
    """YAML 1.1 reads ``1e-4`` as a string; numbers for numeric fields are converted.

    >>> coerce("C", "lr", "1e-4", float), coerce("C", "n", 3, float), coerce("C", "s", "x", str)
    (0.0001, 3.0, 'x')
    """
    args = typing.get_args(hint) or (hint,)
    for num in (int, float):
        if num in args and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            if isinstance(value, num):
                return value
            try:
                return num(value) if num is float or float(value).is_integer() else value
            except ValueError:
                raise ConfigError(f"{owner}.{name} must be a number, not {value!r}") from None
    if str in args and value is not None and not isinstance(value, str) and not isinstance(value, (list, dict)):
        return str(value)  # a name or path that YAML read as a number or bool (e.g. base: 1.7b)
    return value


def parse_value(text: str) -> Any:
    """A command-line value read as YAML (``"1e-4"`` → 0.0001, ``"[q, v]"`` → a list).

    >>> parse_value("1e-4"), parse_value("[q, v]"), parse_value("true"), parse_value("runs/sft")
    (0.0001, ['q', 'v'], True, 'runs/sft')
    """
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and value != text.strip():
        return text
    try:  # YAML 1.1 leaves 1e-4 a string
        return float(value) if isinstance(value, str) and any(c in value for c in "eE.") and float(value) else value
    except ValueError:
        return value


def parse_args(cls: type[T], argv: Sequence[str] | None = None) -> T:
    """``[--config FILE] [--field value | --field=value …]`` → ``cls``, through :func:`load_config`.

    Field names may be written with ``-`` or ``_``; a flag without a value is ``true``.

    >>> @dataclasses.dataclass
    ... class C:
    ...     lr: float = 1.0
    ...     targets: list = dataclasses.field(default_factory=list)
    ...     bf16: bool = False
    >>> parse_args(C, ["--lr", "1e-4", "--targets=[q, v]", "--bf16"])
    C(lr=0.0001, targets=['q', 'v'], bf16=True)
    >>> parse_args(C, ["lr"])
    Traceback (most recent call last):
    ...
    qmdlab.errors.ConfigError: unexpected argument 'lr': options are --config FILE and --FIELD VALUE (fields: bf16, lr, targets)
    """
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    config: str | None = None
    overrides: dict[str, Any] = {}
    names = sorted(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("--") or arg == "--":
            raise ConfigError(
                f"unexpected argument {arg!r}: options are --config FILE and --FIELD VALUE (fields: {', '.join(names)})"
            )
        key, eq, value = arg[2:].partition("=")
        key = key.replace("-", "_")
        if not eq:
            if i + 1 < len(args) and not args[i + 1].startswith("--"):
                value, i = args[i + 1], i + 1
            else:
                value = "true"
        if key == "config":
            config = value
        else:
            overrides[key] = parse_value(value)
        i += 1
    return load_config(cls, config, **overrides)
