"""Read a qmd collection config (``index.yml``) and register the same setup in a qmdlab index.

Where the file is found (:func:`find_qmd_config`), first match wins:

1. the path given (a file, or a folder holding ``index.yaml``, ``index.yml``, ``.qmd/index.yaml``
   or ``.qmd/index.yml``, in that order);
2. ``index.yaml`` or ``index.yml`` beside qmd's database when ``$INDEX_PATH`` names one (a
   project's ``.qmd/index.sqlite``);
3. a project-local ``.qmd/index.yaml`` or ``.qmd/index.yml`` (``.yaml`` first, as qmd's
   ``findLocalConfigPath``) in the current folder or the nearest one above it (qmd prefers it too);
4. ``{name}.yml`` (default ``index.yml``) in qmd's config folder: ``$QMD_CONFIG_DIR``, else
   ``$XDG_CONFIG_HOME/qmd``, else ``~/.config/qmd``.

What maps (:func:`plan_import`, then :func:`apply_import`):

=====================================  ===================================================
qmd                                    qmdlab
=====================================  ===================================================
``collections.NAME.path``              the collection's root (``~`` expanded; a relative
                                       path is taken from the project folder of a
                                       ``.qmd/`` config, else from the config's folder)
``pattern``                            ``mask`` (``{a,b}`` braces become a comma union)
``ignore``                             ``ignore`` globs, plus qmd's built-in exclusions
                                       (:data:`QMD_BUILTIN_IGNORES`) made explicit
``includeByDefault: false``            ``qmdlab collection exclude NAME``
``update``                             the update command, *not approved*: it runs only
                                       after ``qmdlab trust``
``context: {PREFIX: TEXT}``            ``qmdlab context add NAME/PREFIX TEXT``
``global_context``                     ``qmdlab context add / TEXT``
``models.embed|rerank|generate``       ``embed``/``rerank``/``expand`` in the index's own
                                       ``models:`` (its ``collections.yaml``, read over
                                       ``$QMDLAB_HOME/models.yaml``)
``editor_uri`` (qmd's aliases           the index's ``editor_uri``
``editor_uri_template``, ``editorUri``,
``editor-uri``, read in that order)
=====================================  ===================================================

Anything else (unknown keys, a missing folder, a name qmdlab cannot use, a collection already
registered with another root, an editor template holding a control character) is reported and
left out. qmd's file is only read, never written; every value of it is printed escaped
(:func:`qmdlab.store.trust.shown`).

An imported config is untrusted (:mod:`qmdlab.store.trust`): the index records it
(``imported_from:``), and what it points elsewhere is registered but waits for ``qmdlab trust``,
which the import says: a served model (``http://``, ``https://``, ``openai:``: nothing is sent to
it before), the editor template, and — from a project's ``.qmd/`` config, or into a project-local
index — a collection root outside the project (not indexed before).

qmd's database (:func:`qmd_index_path`) is read last, once the imported collections are indexed:
its vectors go to the chunks of those collections (never one whose root waits for approval) that
qmd embedded with qmdlab's embed model file from the same text (:mod:`qmdlab.store.qmdvectors`);
the rest is left for ``qmdlab embed``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from qmdlab.errors import ConfigError
from qmdlab.store import safeyaml
from qmdlab.store.config import _NAME, Collection, Config, template_problem
from qmdlab.store.limits import MAX_BRACE_EXPANSIONS, MAX_GLOB_CHARS

QMD_COLLECTION_KEYS = {"path", "pattern", "ignore", "update", "includeByDefault", "context"}
#: qmd's names for the editor link template, in the order qmd reads them (``getEditorUriTemplate``).
QMD_EDITOR_KEYS = ("editor_uri", "editor_uri_template", "editorUri", "editor-uri")
QMD_TOP_KEYS = {"collections", "global_context", "models", *QMD_EDITOR_KEYS}
#: A project-local qmd config (``.qmd/``), in the order qmd looks for it.
QMD_LOCAL_NAMES = ("index.yaml", "index.yml")
#: Folders qmd never indexes, whatever a collection's globs say; qmdlab has no built-in
#: exclusions, so an import adds them to each collection's ``ignore``.
QMD_BUILTIN_IGNORES = ("node_modules/**", ".git/**", ".cache/**", "vendor/**", "dist/**", "build/**")
#: qmd's model roles → qmdlab's.
MODEL_ROLES = {"embed": "embed", "rerank": "rerank", "generate": "expand"}


def qmd_config_dir(environ: Mapping[str, str] | None = None) -> Path:
    """qmd's config folder: ``$QMD_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/qmd``, else ``~/.config/qmd``.

    >>> str(qmd_config_dir({"QMD_CONFIG_DIR": "/c", "XDG_CONFIG_HOME": "/x"})), str(qmd_config_dir({"XDG_CONFIG_HOME": "/x"}))
    ('/c', '/x/qmd')
    """
    env = os.environ if environ is None else environ
    if env.get("QMD_CONFIG_DIR"):
        return Path(env["QMD_CONFIG_DIR"]).expanduser()
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]).expanduser() / "qmd"
    return Path.home() / ".config" / "qmd"


def qmd_index_path(
    config: Path | None = None, index_name: str | None = None, environ: Mapping[str, str] | None = None
) -> Path:
    """Where qmd keeps the SQLite index that goes with a config: ``$INDEX_PATH`` when set, else
    ``index.sqlite`` beside a project-local ``.qmd/`` config, else ``NAME.sqlite`` (default
    ``index``) in ``$XDG_CACHE_HOME/qmd`` or ``~/.cache/qmd`` (qmd's ``getDefaultDbPath``).

    >>> str(qmd_index_path(environ={"INDEX_PATH": "/q/x.sqlite", "XDG_CACHE_HOME": "/c"}))
    '/q/x.sqlite'
    >>> str(qmd_index_path(index_name="work", environ={"XDG_CACHE_HOME": "/c"}))
    '/c/qmd/work.sqlite'
    >>> str(qmd_index_path(Path("/p/.qmd/index.yaml"), environ={}))
    '/p/.qmd/index.sqlite'
    """
    env = os.environ if environ is None else environ
    if env.get("INDEX_PATH"):
        return Path(env["INDEX_PATH"]).expanduser()
    if config is not None and config.parent.name == ".qmd":
        return config.parent / "index.sqlite"
    cache = Path(env["XDG_CACHE_HOME"]).expanduser() if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return cache / "qmd" / f"{index_name or 'index'}.sqlite"


def find_qmd_config(
    path: str | os.PathLike | None = None,
    *,
    index_name: str | None = None,
    cwd: str | os.PathLike | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """The qmd config file to read (see the module notes); a :class:`ConfigError` naming every
    place looked at when there is none."""
    if path is not None:
        p = Path(path).expanduser()
        if p.is_dir():
            for cand in (*(p / n for n in QMD_LOCAL_NAMES), *(p / ".qmd" / n for n in QMD_LOCAL_NAMES)):
                if cand.is_file():
                    return cand
            raise ConfigError(
                f"{p}: no index.yaml, index.yml or .qmd/index.yaml in this folder; pass qmd's config file"
            )
        if not p.is_file():
            raise ConfigError(f"{p}: no such file; pass qmd's index.yml (default {qmd_config_dir(environ)}/index.yml)")
        return p
    looked = []
    env = os.environ if environ is None else environ
    if index_name is None and env.get("INDEX_PATH"):
        # qmd's database named by $INDEX_PATH: the project-local config beside it (`.qmd/`)
        db = Path(env["INDEX_PATH"]).expanduser()
        for local in QMD_LOCAL_NAMES:
            if (db.parent / local).is_file():
                return db.parent / local
        looked.append(f"{db.parent}/index.yaml or index.yml (beside $INDEX_PATH)")
    if index_name is None:
        here = Path(cwd or os.getcwd()).resolve()
        for folder in (here, *here.parents):
            for local in QMD_LOCAL_NAMES:
                cand = folder / ".qmd" / local
                if cand.is_file():
                    return cand
        looked.append(f"{here}/.qmd/index.yaml or index.yml (and above)")
    name = index_name or "index"
    if "/" in name or "\\" in name or name.startswith("."):
        raise ConfigError(f"--qmd-index {name!r}: a qmd index name, not a path (pass a path as CONFIG instead)")
    cand = qmd_config_dir(environ) / f"{name}.yml"
    if cand.is_file():
        return cand
    looked.append(str(cand))
    raise ConfigError(
        "no qmd config found (looked at " + ", ".join(looked) + "); pass its path: "
        "`qmdlab collection import-qmd PATH/index.yml`"
    )


def expand_braces(pattern: str, limit: int = MAX_BRACE_EXPANSIONS) -> str:
    """qmd's one-glob ``pattern`` as qmdlab's comma-separated union: ``{a,b}`` expanded as a shell
    does (nested braces too; an unmatched brace is a literal), bounded: a pattern longer than
    :data:`~qmdlab.store.limits.MAX_GLOB_CHARS`, nested deeper than 32 braces or expanding to more
    than ``limit`` globs is a :class:`ConfigError`, found before anything is expanded (``{a,b}``
    twenty times over would be a million globs).

    >>> expand_braces("**/*.{md,markdown}"), expand_braces("docs/**/*.md"), expand_braces("{a,{b,c}}.md")
    ('**/*.md,**/*.markdown', 'docs/**/*.md', 'a.md,b.md,c.md')
    >>> expand_braces("x{a,b"), expand_braces("{a,b}{c,d}")
    ('x{a,b', 'ac,ad,bc,bd')
    >>> expand_braces("{a,b}" * 20)
    Traceback (most recent call last):
    ...
    qmdlab.errors.ConfigError: pattern expands to more than 256 globs; write fewer alternatives
    """
    if len(pattern) > MAX_GLOB_CHARS:
        raise ConfigError(f"pattern of {len(pattern)} characters, over {MAX_GLOB_CHARS}; shorten it")
    tree = _brace_tree(pattern)
    if _count(tree, limit) > limit:
        raise ConfigError(f"pattern expands to more than {limit} globs; write fewer alternatives")
    return ",".join(dict.fromkeys(_expand(tree)))


_MAX_BRACE_DEPTH = 32
# A sequence is a list of parts; a part is literal text or a group: a list of alternative sequences.
_Seq = list


def _brace_tree(pattern: str) -> _Seq:
    """Parse ``pattern``'s braces (iteratively): the top-level sequence."""
    frames: list[tuple[list[_Seq], _Seq]] = [([], [])]  # (finished alternatives, current sequence)
    for ch in pattern:
        alts, cur = frames[-1]
        if ch == "{":
            if len(frames) > _MAX_BRACE_DEPTH:
                raise ConfigError(f"pattern nests braces more than {_MAX_BRACE_DEPTH} deep; simplify it")
            frames.append(([], []))
        elif ch == "," and len(frames) > 1:
            alts.append(cur)
            frames[-1] = (alts, [])
        elif ch == "}" and len(frames) > 1:
            frames.pop()
            alts.append(cur)
            frames[-1][1].append(alts)
        elif cur and isinstance(cur[-1], str):
            cur[-1] += ch
        else:
            cur.append(ch)
    while len(frames) > 1:  # an unclosed brace: its text is literal (groups closed inside it stay groups)
        alts, cur = frames.pop()
        parts: _Seq = ["{"]
        for alt in alts:
            parts += [*alt, ","]
        frames[-1][1].extend(parts + cur)
    return frames[0][1]


def _count(seq: _Seq, cap: int) -> int:
    """How many globs ``seq`` expands to, at most ``cap + 1`` (a sequence multiplies, a group adds)."""
    n = 1
    for part in seq:
        if not isinstance(part, str):
            n = min(n * min(sum(_count(alt, cap) for alt in part), cap + 1), cap + 1)
    return n


def _expand(seq: _Seq) -> list[str]:
    out = [""]
    for part in seq:
        subs = [part] if isinstance(part, str) else [s for alt in part for s in _expand(alt)]
        out = [o + x for o in out for x in subs]
    return out


@dataclass(frozen=True)
class CollectionPlan(Collection):
    """A qmd collection as qmdlab will register it, with the contexts qmd attached to it."""

    contexts: list[tuple[str, str]] = field(default_factory=list)  # (qmdlab target, text)


@dataclass
class ImportPlan:
    """What :func:`plan_import` read: the collections, the global context, the model overrides,
    the editor template, and a line per thing that does not map (``skipped``)."""

    source: Path
    collections: list[CollectionPlan] = field(default_factory=list)
    global_context: str | None = None
    models: dict[str, str] = field(default_factory=dict)
    editor_uri: str | None = None
    skipped: list[str] = field(default_factory=list)


def _str_list(value: Any) -> list[str] | None:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def plan_import(path: str | os.PathLike) -> ImportPlan:
    """Parse qmd's config into an :class:`ImportPlan` (reads the file, writes nothing)."""
    path = Path(path)
    try:
        data = safeyaml.load_config(path)  # within the parser limits of qmdlab.store.limits
    except OSError as err:
        raise ConfigError(f"{path}: cannot read ({err.strerror or err}); pass a readable qmd config") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; pass qmd's index.yml") from None
    except (safeyaml.YamlLimitError, yaml.YAMLError) as err:
        raise safeyaml.config_error(path, err, "fix qmd's config first") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with 'collections'; pass qmd's index.yml")
    plan = ImportPlan(path)
    local = path.parent.name == ".qmd"
    base = path.parent.parent if local else path.parent
    for key in sorted(set(data) - QMD_TOP_KEYS, key=str):
        plan.skipped.append(f"{key}: not a setting qmdlab has; left out")
    gc = data.get("global_context")
    if isinstance(gc, str) and gc.strip():
        plan.global_context = gc
    elif gc is not None:
        plan.skipped.append("global_context: not a string; left out")
    for key in QMD_EDITOR_KEYS:  # qmd takes the first non-empty one
        editor = data.get(key)
        if isinstance(editor, str) and editor.strip():
            why = template_problem(editor.strip())
            if why is None:
                plan.editor_uri = editor.strip()
            else:
                plan.skipped.append(f"{key}: holds {why}, which a terminal link cannot carry; left out")
            break
    models = data.get("models")
    if isinstance(models, dict):
        for role, value in models.items():
            if role in MODEL_ROLES and isinstance(value, str) and value.strip():
                plan.models[MODEL_ROLES[role]] = value
            else:
                plan.skipped.append(f"models.{role}: not a model role qmdlab has (embed, rerank, generate); left out")
    elif models is not None:
        plan.skipped.append("models: not a mapping; left out")
    colls = data.get("collections") or {}
    if not isinstance(colls, dict):
        raise ConfigError(f"{path}: 'collections' must be a mapping of name → settings; fix qmd's config first")
    for name, c in colls.items():
        name = str(name)
        if not isinstance(c, dict) or not isinstance(c.get("path"), str):
            plan.skipped.append(f"collection {name}: no 'path'; left out")
            continue
        if not _NAME.match(name):
            plan.skipped.append(
                f"collection {name}: not a name qmdlab accepts (letters, digits, '_', '-', '.'); "
                "left out — add it with `qmdlab collection add PATH --name NEW`"
            )
            continue
        root = Path(c["path"]).expanduser()
        root = (root if root.is_absolute() else base / root).resolve()
        if not root.is_dir():
            plan.skipped.append(f"collection {name}: folder {root} not found; left out")
            continue
        cp = CollectionPlan(name, root)
        if isinstance(c.get("pattern"), str) and c["pattern"].strip():
            try:
                cp = replace(cp, mask=expand_braces(c["pattern"].strip()))
            except ConfigError as err:
                plan.skipped.append(f"collection {name}: {err}; left out")
                continue
        ignore = _str_list(c.get("ignore"))
        if ignore is None:
            plan.skipped.append(f"collection {name}: 'ignore' is not a list of globs; left out")
        else:
            cp = replace(cp, ignore=tuple(dict.fromkeys((*ignore, *QMD_BUILTIN_IGNORES))))
        inc = c.get("includeByDefault", True)
        if isinstance(inc, bool):
            cp = replace(cp, include=inc)
        else:
            plan.skipped.append(f"collection {name}: includeByDefault {inc!r} is not true/false; kept included")
        if isinstance(c.get("update"), str) and c["update"].strip():
            cp = replace(cp, update_cmd=c["update"].strip())
        ctx = c.get("context") or {}
        if isinstance(ctx, dict):
            for prefix, text in ctx.items():
                if not isinstance(text, str) or not text.strip():
                    plan.skipped.append(f"collection {name}: context {prefix!r} has no text; left out")
                    continue
                p = str(prefix).strip().strip("/")
                cp.contexts.append((f"{name}/{p}" if p else name, text))
        else:
            plan.skipped.append(f"collection {name}: 'context' is not a mapping of prefix → text; left out")
        for key in sorted(set(c) - QMD_COLLECTION_KEYS, key=str):
            plan.skipped.append(f"collection {name}: {key}: not a setting qmdlab has; left out")
        plan.collections.append(cp)
    return plan


@dataclass
class ImportResult:
    lines: list[str] = field(default_factory=list)  # what was mapped
    skipped: list[str] = field(default_factory=list)  # what was not
    registered: list[str] = field(default_factory=list)  # collections added or updated
    pending_commands: list[str] = field(default_factory=list)  # collections whose update command awaits `qmdlab trust`
    held: list[str] = field(default_factory=list)  # what waits for `qmdlab trust` (served models, editor, roots)
    held_roots: list[str] = field(default_factory=list)  # collections not indexed until their root is approved


def apply_import(idx, plan: ImportPlan, *, models: bool = True, dry_run: bool = False) -> ImportResult:
    """Register ``plan`` in the index ``idx`` (nothing with ``dry_run``); a re-import updates the
    settings of collections it registered before (same root). What the imported config points
    elsewhere is registered but held for ``qmdlab trust`` (``res.held``)."""
    from qmdlab.store import trust

    res = ImportResult(skipped=list(plan.skipped))
    source = os.path.realpath(plan.source)
    existing = {c.name: c for c in idx.collections()}
    if not dry_run and (plan.collections or plan.global_context or plan.editor_uri or (models and plan.models)):
        idx.note_import(source)  # first: from now on the config's served models and editor wait for approval
    for cp in plan.collections:
        old = existing.get(cp.name)
        if old is not None and Path(old.root).resolve() != cp.root:
            res.skipped.append(
                f"collection {cp.name}: qmdlab already has it at {old.root}; left out "
                f"(`qmdlab collection remove {cp.name}` first to import qmd's)"
            )
            continue
        own = [g for g in cp.ignore if g not in QMD_BUILTIN_IGNORES]
        extras = (
            [f"mask {cp.mask}"]
            + ([f"ignore {', '.join(own)}"] if own else [])
            + ([] if cp.include else ["excluded from unscoped queries"])
        )
        res.lines.append(
            f"collection {cp.name}: {cp.root} ({'; '.join(extras)})" + (" [updated]" if old is not None else "")
        )
        if not dry_run:
            if old is None:
                idx.add_collection(cp.name, cp.root, cp.mask, cp.ignore, include=cp.include, update_cmd=cp.update_cmd)
            idx.update_collection(
                cp.name, mask=cp.mask, ignore=cp.ignore, include=cp.include, update_cmd=cp.update_cmd, source=source
            )
        res.registered.append(cp.name)
        held = trust.pending_roots(idx.dir, idx.config_path, [Collection(cp.name, cp.root, source=source)])
        for _, real in held:
            res.held.append(
                f"collection {cp.name}: root {real} is outside the project "
                f"{trust.project_of(idx.dir, Collection(cp.name, cp.root, source=source))}; "
                f"not indexed until `qmdlab trust -c {cp.name}`"
            )
            res.held_roots.append(cp.name)
        if cp.update_cmd:
            res.lines.append(
                f"  update command '{cp.update_cmd}': not approved; it runs before `qmdlab update` "
                f"only after `qmdlab trust -c {cp.name}`"
            )
            res.pending_commands.append(cp.name)
        for target, text in cp.contexts:
            res.lines.append(f"  context {target}: {text[:60]}{'…' if len(text) > 60 else ''}")
            if not dry_run:
                idx.add_context(target, text)
    if plan.global_context:
        res.lines.append(f"context /: {plan.global_context[:60]}{'…' if len(plan.global_context) > 60 else ''}")
        if not dry_run:
            idx.add_context("/", plan.global_context)
    imported = Config(editor_uri=plan.editor_uri, models=dict(plan.models), imported=[source])
    if plan.editor_uri:
        res.lines.append(f"editor_uri: {plan.editor_uri}")
        if not dry_run:
            idx.set_editor_uri(plan.editor_uri)
        if trust.editor_held(idx.dir, idx.config_path, imported) is not None:
            res.held.append(f"editor_uri {plan.editor_uri}: result paths are not links until `qmdlab trust`")
    if plan.models:
        if models:
            res.lines.append(
                f"models (this index's {idx.config_path.name}): "
                + ", ".join(f"{k} = {v}" for k, v in plan.models.items())
            )
            if not dry_run:
                idx.set_models(plan.models)
            for role, ref in trust.pending_models(idx.dir, idx.config_path, imported):
                res.held.append(
                    f"models.{role} = {ref}: a model served over HTTP; nothing is sent to it until `qmdlab trust`"
                )
        else:
            res.skipped.append("models: left out (--no-models)")
    return res
