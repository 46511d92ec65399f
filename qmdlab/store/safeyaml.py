"""YAML parsed within limits: front matter and config files never cost more than their caps.

``yaml.safe_load`` builds a document whose aliases share one object, so a few hundred bytes of
``&a [*b, *b, …]`` lines describe a structure of billions of nodes: anything that walks the
result (``str()``, ``json.dumps``, a merge key ``<<``) then expands it. :func:`load` composes the
node graph first and counts its nodes *as if every alias were expanded* (each node once, with
its expanded size memoised, so the count itself is linear), refuses a recursive alias, a graph
nested deeper than :data:`~qmdlab.store.limits.MAX_YAML_DEPTH` and text over a byte cap, and
only then constructs the Python objects. The numbers are in :mod:`qmdlab.store.limits`.

A document PyYAML cannot build (``2024-13-45`` read as a date, an integer of 5,000 digits)
raises :class:`yaml.YAMLError` like any other malformed YAML.

>>> load("a: [1, 2]\\nb: x", max_bytes=100, max_nodes=10)
{'a': [1, 2], 'b': 'x'}
>>> bomb = "a: &a [x, x, x, x]\\nb: &b [*a, *a, *a, *a]\\nc: [*b, *b, *b, *b]"
>>> load(bomb, max_bytes=1000, max_nodes=50)
Traceback (most recent call last):
...
qmdlab.store.safeyaml.YamlLimitError: more than 50 YAML nodes (aliases counted expanded)
>>> load("a: 2024-13-45", max_bytes=100, max_nodes=10)
Traceback (most recent call last):
...
yaml.constructor.ConstructorError: cannot build the document (ValueError: month must be in 1..12)
"""

from __future__ import annotations

import os
from typing import Any

import yaml

from qmdlab.errors import ConfigError
from qmdlab.store.limits import MAX_YAML_DEPTH


class YamlLimitError(ValueError):
    """The text is over a parser limit (size, nodes after alias expansion, nesting depth)."""


def _check(root: yaml.Node, max_nodes: int, max_depth: int) -> None:
    """Count the nodes of the graph under ``root`` with aliases expanded (memoised per node),
    and its depth; raise :class:`YamlLimitError` past ``max_nodes`` or ``max_depth``, or on a
    recursive alias. Iterative: no Python recursion however deep the graph."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            on_path.discard(key)
            if size[key] > max_nodes:
                raise YamlLimitError(f"more than {max_nodes} YAML nodes (aliases counted expanded)")
            if depth[key] > max_depth:
                raise YamlLimitError(f"YAML nested more than {max_depth} levels deep")
            continue
        if key in size:
            continue
        if key in on_path:
            raise YamlLimitError("a recursive YAML alias (an anchor used inside itself)")
        on_path.add(key)
        stack.append((node, True))
        if len(on_path) > max_depth:
            raise YamlLimitError(f"YAML nested more than {max_depth} levels deep")
        for kid in _children(node):
            if id(kid) in on_path:
                raise YamlLimitError("a recursive YAML alias (an anchor used inside itself)")
            if id(kid) not in size:
                stack.append((kid, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load(text: str, *, max_bytes: int, max_nodes: int, max_depth: int = MAX_YAML_DEPTH) -> Any:
    """``yaml.safe_load(text)`` within the limits (see the module notes).

    Raises :class:`YamlLimitError` past a limit and :class:`yaml.YAMLError` for malformed YAML
    (including a document whose values cannot be built).
    """
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise YamlLimitError(f"over {max_bytes} bytes of YAML")
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YamlLimitError(f"YAML nested more than {max_depth} levels deep") from None
        if node is None:
            return None
        _check(node, max_nodes, max_depth)
        try:
            return loader.construct_document(node)
        except RecursionError:
            raise YamlLimitError(f"YAML nested more than {max_depth} levels deep") from None
        except yaml.YAMLError:
            raise
        except Exception as err:  # a value PyYAML resolves but cannot build (a date of month 13, `!!timestamp x`)
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot build the document ({err.__class__.__name__}: {err})"
            ) from None
    finally:
        loader.dispose()


def load_config(path: str | os.PathLike) -> Any:
    """A config file (``collections.yaml``, qmd's ``index.yml``, ``models.yaml``) parsed within the
    config limits (:data:`~qmdlab.store.limits.MAX_CONFIG_BYTES`, ``MAX_CONFIG_NODES``): at most
    that many bytes are read. Raises :class:`OSError`, :class:`UnicodeDecodeError`,
    :class:`yaml.YAMLError` or :class:`YamlLimitError` (the caller names the file)."""
    from qmdlab.store.limits import MAX_CONFIG_BYTES, MAX_CONFIG_NODES

    with open(path, "rb") as f:
        raw = f.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise YamlLimitError(f"over {MAX_CONFIG_BYTES} bytes of YAML")
    return load(raw.decode("utf-8"), max_bytes=MAX_CONFIG_BYTES, max_nodes=MAX_CONFIG_NODES)


def config_error(path: str | os.PathLike, err: YamlLimitError | yaml.YAMLError, fix: str) -> ConfigError:
    """The one-line error for a config file :func:`load_config` refused: over a limit, or malformed YAML
    (at its line when PyYAML knows it); ``fix`` says what to do.

    >>> print(config_error("c.yml", YamlLimitError("over 10 bytes of YAML"), "fix the file"))
    c.yml: over 10 bytes of YAML, over qmdlab's limit for a config; fix the file
    >>> try:
    ...     load("a: [1", max_bytes=100, max_nodes=100)
    ... except yaml.YAMLError as err:
    ...     print(config_error("c.yml", err, "fix the file"))
    c.yml:1: malformed YAML (ParserError); fix the file
    """
    if isinstance(err, YamlLimitError):
        return ConfigError(f"{path}: {err}, over qmdlab's limit for a config; {fix}")
    line = getattr(getattr(err, "problem_mark", None), "line", None)
    where = f"{path}:{line + 1}" if line is not None else str(path)
    return ConfigError(f"{where}: malformed YAML ({err.__class__.__name__}); {fix}")


__all__ = ["YamlLimitError", "config_error", "load", "load_config"]
