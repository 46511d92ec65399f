"""``collections.yaml``: the collections and contexts of an index (beside ``index.sqlite``).

::

    collections:
      - {name: notes, root: /home/me/notes, mask: "**/*.md", ignore: ["drafts/**"]}
      - {name: archive, root: /home/me/old, include: false,   # only searched when named (-c archive)
         update: "git pull --ff-only"}                         # run before `update` (once approved: `qmdlab trust`)
    contexts:
      - {target: notes, text: "Personal notes"}          # a collection
      - {target: notes/work, text: "Work notes"}         # a docno prefix
      - {target: /, text: "Everything"}                  # global
    editor_uri: "vscode://file/{path}:{line}:{col}"      # clickable result paths on a terminal (optional)
    models: {embed: "hf:…", rerank: "hf:…"}              # this index's models, over $QMDLAB_HOME/models.yaml (optional)
    imported_from: [/p/.qmd/index.yml]                   # the qmd configs `collection import-qmd` read into it

A collection that came from ``collection import-qmd`` names its qmd config (``imported_from:`` on
its entry). A project-local config, and one that received an import, is untrusted: its served
models, its ``editor_uri`` and its roots outside the project wait for ``qmdlab trust``
(:mod:`qmdlab.store.trust`). An ``editor_uri`` holding a control or format character (ESC, BEL,
a C1 control, U+202E …) is refused when the file is read: it is written into a terminal escape.

Written atomically (temp file + rename). In a project-local index (``.qmdlab/`` made by
``qmdlab init``) a root inside the project is written relative to the project folder, so the file
can be committed and still work in another checkout; relative roots are read from that folder.
"""

from __future__ import annotations

import errno
import os
import re
import unicodedata
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from qmdlab.errors import ConfigError

DEFAULT_MASK = "**/*.md"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Collection:
    """A named directory of notes: files under ``root`` matching ``mask`` (a comma-separated
    union of globs) and none of the ``ignore`` globs. ``include``: searched by queries that name
    no collection; ``update_cmd``: a shell command run in ``root`` before ``update`` re-indexes
    it (only once approved with ``qmdlab trust``: :mod:`qmdlab.store.trust`)."""

    name: str
    root: Path
    mask: str = DEFAULT_MASK
    ignore: tuple[str, ...] = ()
    include: bool = True
    update_cmd: str | None = None
    source: str | None = None  # the qmd config it was imported from (``collection import-qmd``)

    def replace(self, **changes) -> Collection:
        """A copy with ``changes``.

        >>> Collection("a", Path("/x")).replace(include=False).include
        False
        """
        return replace(self, **changes)

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
    editor_uri: str | None = None
    models: dict[str, str] = field(default_factory=dict)
    imported: list[str] = field(default_factory=list)  # the qmd configs imported into it (real paths)


#: Unicode categories an editor link template never holds: controls (C0, DEL, C1: ESC, BEL, CSI,
#: OSC …), format characters (bidi overrides such as U+202E, zero-width ones), line and paragraph
#: separators, lone surrogates — the template is written into a terminal hyperlink escape.
TEMPLATE_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def template_problem(text: str) -> str | None:
    r"""Why an editor link template cannot be used (``None``: it can): the first control or format
    character in it, with its position.

    >>> template_problem("vscode://file/{path}:{line}"), template_problem("x://{path}\x1b]52;c;eA==\x07")
    (None, 'a control or format character (\\x1b) at character 11')
    """
    for i, ch in enumerate(text):
        if unicodedata.category(ch) in TEMPLATE_HIDDEN:
            o = ord(ch)
            code = f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"
            return f"a control or format character ({code}) at character {i + 1}"
    return None


#: The keys of an index's ``models:`` (as ``models.yaml``'s).
MODEL_KEYS = ("preset", "embed", "expand", "rerank")


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


#: The folder name of a project-local index (``qmdlab init``).
PROJECT_DIR = ".qmdlab"


def _base(path: Path) -> Path:
    """The folder relative roots are read from: the project of a ``.qmdlab/`` index, else the file's folder."""
    return path.parent.parent if path.parent.name == PROJECT_DIR else path.parent


def _root(path: Path, value: str) -> Path:
    root = Path(value).expanduser()
    return root if root.is_absolute() else (_base(path) / root).resolve()


def _stored_root(path: Path, root: Path) -> str:
    """A root as written: relative to the project in a project-local index when inside it.

    >>> _stored_root(Path("/p/.qmdlab/collections.yaml"), Path("/p/docs")), _stored_root(Path("/p/.qmdlab/c.yaml"), Path("/p"))
    ('docs', '.')
    >>> _stored_root(Path("/h/idx/collections.yaml"), Path("/p/docs"))
    '/p/docs'
    """
    if path.parent.name == PROJECT_DIR:
        try:
            return Path(root).relative_to(path.parent.parent.resolve()).as_posix() or "."
        except ValueError:
            pass
    return str(root)


def load(path: Path) -> Config:
    if not path.exists():
        return Config()
    from qmdlab.store import safeyaml

    try:
        data = safeyaml.load_config(path) or {}  # within the parser limits of qmdlab.store.limits
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {err.start} is {err.object[err.start : err.start + 1]!r}); "
            "fix or delete the file"
        ) from err
    except (safeyaml.YamlLimitError, yaml.YAMLError) as err:
        raise safeyaml.config_error(path, err, "fix or delete the file") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with 'collections' and 'contexts'; fix or delete the file")
    cols = []
    for i, c in enumerate(data.get("collections") or []):
        if not isinstance(c, dict) or "name" not in c or "root" not in c:
            raise ConfigError(f"{path}: collections[{i}] needs 'name' and 'root'; fix the entry")
        include = c.get("include", True)
        if not isinstance(include, bool):
            raise ConfigError(f"{path}: collections[{i}].include must be true or false; fix the entry")
        update = c.get("update")
        source = c.get("imported_from")
        cols.append(
            Collection(
                str(c["name"]),
                _root(path, str(c["root"])),
                str(c.get("mask") or DEFAULT_MASK),
                tuple(str(g) for g in (c.get("ignore") or ())),
                include,
                str(update) if update not in (None, "") else None,
                str(source) if source not in (None, "") else None,
            )
        )
    ctxs = []
    for i, c in enumerate(data.get("contexts") or []):
        if not isinstance(c, dict) or "target" not in c or "text" not in c:
            raise ConfigError(f"{path}: contexts[{i}] needs 'target' and 'text'; fix the entry")
        ctxs.append(Context(str(c["target"]), str(c["text"])))
    editor = str(data["editor_uri"]) if data.get("editor_uri") else None
    why = template_problem(editor) if editor else None
    if why is not None:
        raise ConfigError(
            f"{_shown_path(path)}: editor_uri holds {why}, which a terminal link cannot carry; "
            "fix or remove the editor_uri entry"
        )
    models = data.get("models") or {}
    if not isinstance(models, dict) or any(k not in MODEL_KEYS or not isinstance(v, str) for k, v in models.items()):
        raise ConfigError(f"{path}: 'models' must map {', '.join(MODEL_KEYS)} to model references; fix the entry")
    imported = data.get("imported_from") or []
    if isinstance(imported, str):
        imported = [imported]
    if not isinstance(imported, list):
        raise ConfigError(f"{path}: 'imported_from' must be a list of qmd config files; fix the entry")
    return Config(cols, ctxs, editor, dict(models), [str(x) for x in imported if x])


def _shown_path(path: Path) -> str:
    from qmdlab.display import printable

    return printable(str(path))


def save(path: Path, config: Config) -> None:
    cols = []
    for c in config.collections:
        entry: dict[str, object] = {
            "name": c.name,
            "root": _stored_root(path, c.root),
            "mask": c.mask,
            "ignore": list(c.ignore),
        }
        if not c.include:
            entry["include"] = False
        if c.update_cmd:
            entry["update"] = c.update_cmd
        if c.source:
            entry["imported_from"] = c.source
        cols.append(entry)
    data = {"collections": cols, "contexts": [{"target": c.target, "text": c.text} for c in config.contexts]}
    if config.editor_uri:
        data["editor_uri"] = config.editor_uri
    if config.models:
        data["models"] = dict(config.models)
    if config.imported:
        data["imported_from"] = list(dict.fromkeys(config.imported))
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.unlink(missing_ok=True)  # a leftover (or a checked-in link) where the temp file goes
        with open(tmp, "x", encoding="utf-8") as fh:  # "x": never writes through a link
            fh.write(text)
        os.replace(tmp, path)
    except OSError as err:  # a full or read-only disk: the old file stays, no partial .tmp is left
        try:
            tmp.unlink()
        except OSError:
            pass
        from qmdlab.errors import StoreError
        from qmdlab.store.failures import disk_full_message, read_only_message

        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StoreError(disk_full_message(path, needed=len(text.encode("utf-8")))) from err
        if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise StoreError(read_only_message(path)) from err
        raise


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
