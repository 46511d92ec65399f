"""Collections and contexts of an index: the ``collections.yaml`` beside the database.

:class:`CatalogMixin` is one part of :class:`~qmdlab.store.Index` (it uses the index's
``config_path``, ``_lock`` and ``transaction``); the YAML format itself is
:mod:`qmdlab.store.config`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from qmdlab.errors import ConfigError
from qmdlab.store import config as cfg
from qmdlab.store.base import IndexBase
from qmdlab.store.config import Collection, Context
from qmdlab.store.scan import check_globs

#: Between the texts of several contexts that apply to one document (qmd joins them with a blank line).
CONTEXT_SEPARATOR = "\n\n"


class CatalogMixin(IndexBase):
    """Collections (name, root, mask, ignores) and contexts (text attached to a docno prefix)."""

    def _config(self) -> cfg.Config:
        """The collections config, parsed once per version of the file.

        ``get``/``contexts_for`` run per result, so re-parsing the YAML each time dominated a
        100-query evaluation (2,000 parses). The key includes the inode because ``cfg.save``
        replaces the file atomically (a new inode even within one mtime tick), so writes by this
        or another process are always seen. Callers get a fresh ``Config`` (its lists are
        mutated before saving); the entries themselves are frozen.
        """
        try:
            st = self.config_path.stat()
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            key = None
        cached = getattr(self, "_config_cache", None)
        if cached is None or cached[0] != key:
            cached = (key, cfg.load(self.config_path))
            self._config_cache = cached
        conf = cached[1]
        return cfg.Config(
            list(conf.collections), list(conf.contexts), conf.editor_uri, dict(conf.models), list(conf.imported)
        )

    def _save_config(self, conf: cfg.Config) -> None:
        """Write ``collections.yaml``, after the checks every writer makes (a damaged or read-only
        index is refused: :meth:`~qmdlab.store.Index.check_writable`)."""
        self.check_writable(self.config_path)
        cfg.save(self.config_path, conf)

    def collections(self) -> list[Collection]:
        return self._config().collections

    def collection(self, name: str) -> Collection:
        for c in self.collections():
            if c.name == name:
                return c
        known = ", ".join(c.name for c in self.collections()) or "none"
        raise ConfigError(f"unknown collection {name!r} (known: {known}); see `qmdlab collection list`")

    def add_collection(
        self,
        name: str,
        root: str | os.PathLike,
        mask: str = cfg.DEFAULT_MASK,
        ignore: Sequence[str] = (),
        *,
        include: bool = True,
        update_cmd: str | None = None,
    ) -> Collection:
        cfg.check_name(name)
        root_path = Path(root).expanduser().resolve()
        if not root_path.is_dir():
            raise ConfigError(f"collection root {root} is not a directory; pass an existing folder")
        with self._lock:
            conf = self._config()
            if any(c.name == name for c in conf.collections):
                raise ConfigError(
                    f"collection {name!r} exists; pick another --name or `qmdlab collection remove {name}`"
                )
            coll = Collection(name, root_path, mask or cfg.DEFAULT_MASK, tuple(ignore), include, update_cmd or None)
            check_globs(coll)
            conf.collections.append(coll)
            self._save_config(conf)
        return coll

    def remove_collection(self, name: str) -> None:
        """Forget a collection: its rows, chunks and vectors go; its files are untouched."""
        self.collection(name)
        with self.transaction() as c:
            c.execute("DELETE FROM documents WHERE collection = ?", (name,))
            self._gc(c)
        with self._lock:
            conf = self._config()
            conf.collections = [x for x in conf.collections if x.name != name]
            conf.contexts = [
                x
                for x in conf.contexts
                if not cfg.context_matches(x.target, x.target, name) or x.target.strip("/") == ""
            ]
            self._save_config(conf)

    def rename_collection(self, old: str, new: str) -> None:
        self.collection(old)
        cfg.check_name(new)
        if any(c.name == new for c in self.collections()):
            raise ConfigError(f"collection {new!r} exists; pick another new name")
        with self.transaction() as c:
            c.execute("UPDATE documents SET collection = ? WHERE collection = ?", (new, old))
        with self._lock:
            conf = self._config()
            conf.collections = [x.replace(name=new) if x.name == old else x for x in conf.collections]
            ctxs = []
            for x in conf.contexts:
                t = x.target.strip("/")
                if t == old or t.startswith(old + "/"):
                    ctxs.append(Context(new + t[len(old) :], x.text))
                else:
                    ctxs.append(x)
            conf.contexts = ctxs
            self._save_config(conf)

    def update_collection(self, name: str, **changes) -> Collection:
        """Change a collection's settings (``mask``, ``ignore``, ``include``, ``update_cmd``) in
        ``collections.yaml``; its documents are untouched until the next ``update``."""
        self.collection(name)
        with self._lock:
            conf = self._config()
            conf.collections = [x.replace(**changes) if x.name == name else x for x in conf.collections]
            for x in conf.collections:
                if x.name == name:
                    check_globs(x)
            self._save_config(conf)
        return self.collection(name)

    def default_collections(self) -> list[str] | None:
        """The collections a query that names none searches: ``None`` (all of them) unless some
        are excluded (``qmdlab collection exclude``), then the included ones."""
        cols = self.collections()
        if all(c.include for c in cols):
            return None
        return [c.name for c in cols if c.include]

    def editor_uri(self) -> str | None:
        """The index's editor link template (``editor_uri`` in ``collections.yaml``), if any."""
        return self._config().editor_uri

    def set_editor_uri(self, template: str | None) -> None:
        with self._lock:
            conf = self._config()
            conf.editor_uri = template or None
            self._save_config(conf)

    def models(self) -> dict[str, str]:
        """The index's own model settings (``models:`` in ``collections.yaml``: ``preset``,
        ``embed``, ``expand``, ``rerank``), read over ``$QMDLAB_HOME/models.yaml``."""
        return self._config().models

    def set_models(self, models: dict[str, str]) -> None:
        """Set (merge) the index's model settings; an empty reference removes that key."""
        with self._lock:
            conf = self._config()
            merged = {**conf.models, **models}
            conf.models = {k: v for k, v in merged.items() if v}
            self._save_config(conf)

    def note_import(self, source: str | os.PathLike) -> None:
        """Record that ``source`` (a qmd config) was imported into this index (``imported_from:``):
        the config's served models and ``editor_uri`` then wait for ``qmdlab trust``."""
        real = os.path.realpath(os.fspath(source))
        with self._lock:
            conf = self._config()
            if real not in conf.imported:
                conf.imported.append(real)
                self._save_config(conf)

    def add_context(self, target: str, text: str) -> None:
        """Attach ``text`` to a collection, a docno prefix (``notes/work``, or the URI
        ``qmd://notes/work``) or ``/`` (all)."""
        from qmdlab.store.refs import strip_scheme

        t = strip_scheme(target).strip("/")
        if t and t.split("/")[0] not in {c.name for c in self.collections()}:
            raise ConfigError(
                f"context target {target!r} names no collection; use a collection name, 'collection/path/prefix' or '/'"
            )
        with self._lock:
            conf = self._config()
            conf.contexts = [x for x in conf.contexts if x.target.strip("/") != t] + [Context(t or "/", text)]
            self._save_config(conf)

    def remove_context(self, target: str) -> None:
        from qmdlab.store.refs import strip_scheme

        t = strip_scheme(target).strip("/")
        with self._lock:
            conf = self._config()
            kept = [x for x in conf.contexts if x.target.strip("/") != t]
            if len(kept) == len(conf.contexts):
                raise ConfigError(f"no context on {target!r}; see `qmdlab context list`")
            conf.contexts = kept
            self._save_config(conf)

    def contexts(self) -> list[Context]:
        return self._config().contexts

    def contexts_for(self, docno: str, contexts: Sequence[Context] | None = None) -> list[str]:
        """Texts of every context that applies to ``docno`` (broadest first); ``contexts``: the
        index's contexts when already read (one read for a whole result list)."""
        coll = docno.split("/", 1)[0]
        hits = [
            c for c in (self.contexts() if contexts is None else contexts) if cfg.context_matches(c.target, docno, coll)
        ]
        hits.sort(key=lambda c: len(c.target.strip("/")))
        return [c.text for c in hits]

    def context_text(self, docno: str, contexts: Sequence[Context] | None = None) -> str | None:
        """The contexts of ``docno`` as one text, as qmd gives a result's ``context``: every
        applying context, broadest first, separated by a blank line; ``None`` when none applies."""
        return CONTEXT_SEPARATOR.join(self.contexts_for(docno, contexts)) or None

    def _coll_clause(
        self, collections: Iterable[str] | None, alias: str = "d", *, scoped: bool = False
    ) -> tuple[str, list[str]]:
        """SQL restricting ``alias`` to ``collections`` (each checked to exist): ``(clause, params)``;
        ``("", [])`` for all collections. ``scoped``: a search, so ``None`` means
        :meth:`default_collections` (excluded collections left out)."""
        if collections is None and scoped:
            collections = self.default_collections()
        if collections is None:
            return "", []
        names = list(collections)
        for n in names:
            self.collection(n)
        if not names:
            return " AND 0", []
        return f" AND {alias}.collection IN ({','.join('?' * len(names))})", names
