"""``collections.yaml``: the collections and contexts of an index (beside ``index.sqlite``).

::

    collections:
      - {name: notes, root: /home/me/notes, mask: "**/*.md", ignore: ["drafts/**"]}
    contexts:
      - {target: notes, text: "Personal notes"}          # a collection
      - {target: notes/work, text: "Work notes"}         # a docno prefix
      - {target: /, text: "Everything"}                  # global

Written atomically (temp file + rename).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from qmdlab.errors import ConfigError

DEFAULT_MASK = "**/*.md"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Collection:
    """A named directory of notes: files under ``root`` matching ``mask`` (a comma-separated
    union of globs) and none of the ``ignore`` globs."""

    name: str
    root: Path
    mask: str = DEFAULT_MASK
    ignore: tuple[str, ...] = ()

    @property
    def masks(self) -> list[str]:
        """The individual globs.

        >>> Collection("a", Path("/x"), "*.md, docs/**/*.txt").masks
        ['*.md', 'docs/**/*.txt']
        """
        return [m.strip() for m in self.mask.split(",") if m.strip()]


@dataclass(frozen=True)
class Context:
    target: str
    text: str


@dataclass
class Config:
    collections: list[Collection] = field(default_factory=list)
    contexts: list[Context] = field(default_factory=list)


def check_name(name: str) -> str:
    """Collection names are path-safe (they start every docno).

    >>> check_name("notes-2")
    'notes-2'
    """
    if not _NAME.match(name or ""):
        raise ConfigError(
            f"--name {name!r}: a collection name must start with a letter or digit and contain only "
            "letters, digits, '_', '-' or '.' (pick another --name)"
        )
    return name


def load(path: Path) -> Config:
    if not path.exists():
        return Config()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        line = getattr(getattr(err, "problem_mark", None), "line", None)
        where = f"{path}:{line + 1}" if line is not None else str(path)
        raise ConfigError(f"{where}: malformed YAML ({err.__class__.__name__}); fix or delete the file") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with 'collections' and 'contexts'; fix or delete the file")
    cols = []
    for i, c in enumerate(data.get("collections") or []):
        if not isinstance(c, dict) or "name" not in c or "root" not in c:
            raise ConfigError(f"{path}: collections[{i}] needs 'name' and 'root'; fix the entry")
        cols.append(Collection(str(c["name"]), Path(str(c["root"])), str(c.get("mask") or DEFAULT_MASK),
                               tuple(str(g) for g in (c.get("ignore") or ()))))
    ctxs = []
    for i, c in enumerate(data.get("contexts") or []):
        if not isinstance(c, dict) or "target" not in c or "text" not in c:
            raise ConfigError(f"{path}: contexts[{i}] needs 'target' and 'text'; fix the entry")
        ctxs.append(Context(str(c["target"]), str(c["text"])))
    return Config(cols, ctxs)


def save(path: Path, config: Config) -> None:
    data = {
        "collections": [
            {"name": c.name, "root": str(c.root), "mask": c.mask, "ignore": list(c.ignore)} for c in config.collections
        ],
        "contexts": [{"target": c.target, "text": c.text} for c in config.contexts],
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    os.replace(tmp, path)


def context_matches(target: str, docno: str, collection: str) -> bool:
    """Does a context target apply to a document?

    >>> context_matches("notes", "notes/a/b.md", "notes"), context_matches("notes/a", "notes/a/b.md", "notes")
    (True, True)
    >>> context_matches("notes/ab", "notes/a/b.md", "notes"), context_matches("/", "x/y.md", "x")
    (False, True)
    """
    t = target.strip("/")
    if not t:
        return True
    if t == collection or docno == t:
        return True
    return docno.startswith(t + "/")
