"""``qmdlab update --watch`` / ``qmdlab mcp --watch``: keep collections fresh as their files change.

A :class:`Watcher` asks the operating system for the changes under every collection root
(watchdog: inotify on Linux, FSEvents, ReadDirectoryChangesW; its polling observer where those
cannot be had, or with ``poll=True``), waits until the changes have been quiet for ``debounce``
seconds (an editor's save is several events; a ``git checkout`` hundreds), then runs one
:meth:`~qmdlab.store.update.UpdateMixin.update` pass over the collections that changed — the same
pass as ``qmdlab update``, with its guarantees: it reads the files and never writes them, the
vanish guard refuses a pass in which a collection's files disappear wholesale, and an
unapproved root outside a project is refused as ``update`` refuses it.

A pass that fails (a locked index, a full disk, a vanished mount) is reported through ``on_error``
and tried again after ``retry`` seconds, doubling up to a minute, until one succeeds; the watcher
itself keeps running. An update command (``qmdlab collection update-cmd``) is not run by the
watcher: it pulls changes from elsewhere, which ``update`` does on request.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qmdlab.store.index import Index
    from qmdlab.store.update import UpdateReport

#: Seconds of quiet after the last change before a pass runs.
DEFAULT_DEBOUNCE_S = 0.5
#: Seconds before a failed pass is tried again (doubled after each failure, up to :data:`MAX_RETRY_S`).
DEFAULT_RETRY_S = 2.0
MAX_RETRY_S = 60.0


@dataclass
class WatchPass:
    """One pass: the collections it updated, its report, or the error that stopped it."""

    number: int
    collections: list[str]
    report: UpdateReport | None = None
    error: BaseException | None = None
    seconds: float = 0.0
    #: The index the pass updated (an ``after_pass`` that embeds writes the vectors there).
    watcher_index: Any = None

    @property
    def changed(self) -> bool:
        r = self.report
        return r is not None and bool(r.new or r.changed or r.moved or r.vanished)


@dataclass
class Watcher:
    """Watch ``idx``'s collections (``collections``: only these) and update them on change.

    ``after_pass(pass_)`` runs after each pass (printing, embedding new chunks); ``on_error(pass_)``
    after a failed one. :meth:`run` blocks until ``stop`` is set; :meth:`wait_for_pass` lets a
    caller (a test, the MCP server) wait for the next pass without sleeping.
    """

    idx: Index
    collections: list[str] | None = None
    debounce: float = DEFAULT_DEBOUNCE_S
    poll: bool = False
    retry: float = DEFAULT_RETRY_S
    after_pass: Callable[[WatchPass], Any] | None = None
    on_error: Callable[[WatchPass], Any] | None = None
    allow_vanish: bool = False
    stop: threading.Event = field(default_factory=threading.Event)
    observer_kind: str = ""
    passes: list[WatchPass] = field(default_factory=list)
    _dirty: set[str] = field(default_factory=set)
    _last_change: float = 0.0
    _cond: threading.Condition = field(default_factory=threading.Condition)

    # ------------------------------------------------------------------------------------ events
    def _roots(self) -> dict[str, Path]:
        wanted = None if self.collections is None else set(self.collections)
        return {c.name: Path(c.root) for c in self.idx.collections() if wanted is None or c.name in wanted}

    def _ignored(self, path: str) -> bool:
        """Changes of the index itself (a project's ``.qmdlab/`` under a root) start no pass."""
        index_dir = str(Path(self.idx.db_path).parent)
        return path == index_dir or path.startswith(index_dir + os.sep)

    def mark(self, collection: str) -> None:
        """Record a change in ``collection`` (called from the observer's thread)."""
        with self._cond:
            self._dirty.add(collection)
            self._last_change = time.monotonic()
            self._cond.notify_all()

    def _handler(self, name: str):
        from watchdog.events import FileSystemEventHandler

        watcher = self

        class Changed(FileSystemEventHandler):
            def on_any_event(self, event):  # noqa: D401 - watchdog's callback
                if event.event_type in ("opened", "closed_no_write"):
                    return  # reads change nothing
                paths = [event.src_path, getattr(event, "dest_path", "") or ""]
                if all(not p or watcher._ignored(os.fsdecode(p)) for p in paths):
                    return
                watcher.mark(name)

        return Changed()

    def _observer(self):
        from watchdog.observers.polling import PollingObserver

        if self.poll:
            return PollingObserver(timeout=max(0.2, self.debounce)), "polling"
        from watchdog.observers import Observer

        return Observer(), Observer.__name__.removesuffix("Observer").lower() or "native"

    # ------------------------------------------------------------------------------------ passes
    def run_pass(self, names: Iterable[str]) -> WatchPass:
        """One update pass over ``names`` (reported, never raised)."""
        names = sorted(names)
        p = WatchPass(len(self.passes) + 1, names, watcher_index=self.idx)
        t0 = time.perf_counter()
        try:
            self.idx.ensure_chunker()
            p.report = self.idx.update(names, allow_vanish=self.allow_vanish)
        except Exception as err:  # reported and retried: the watcher outlives a bad pass
            p.error = err
        p.seconds = time.perf_counter() - t0
        try:
            if p.error is None and self.after_pass is not None:
                self.after_pass(p)
        except Exception as err:  # an embedding that failed: the pass is retried as a whole
            p.error = err
        if p.error is not None and self.on_error is not None:
            self.on_error(p)
        with self._cond:
            self.passes.append(p)
            self._cond.notify_all()
        return p

    def wait_for_pass(self, after: int, timeout: float) -> WatchPass | None:
        """The first pass numbered above ``after``, waiting at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.passes) <= after:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            return self.passes[after]

    def run(self, *, initial: bool = True) -> None:
        """Watch until :attr:`stop` is set: one pass at start (``initial``), then one per burst of changes."""
        roots = self._roots()
        if not roots:
            from qmdlab.errors import StoreError

            raise StoreError("no collection to watch; add one with `qmdlab collection add PATH`")
        observer, self.observer_kind = self._observer()
        for name, root in roots.items():
            observer.schedule(self._handler(name), str(root), recursive=True)
        try:
            observer.start()
        except OSError as err:  # inotify watches exhausted (fs.inotify.max_user_watches): poll instead
            from watchdog.observers.polling import PollingObserver

            if self.on_error is not None:
                self.on_error(WatchPass(0, sorted(roots), error=err))
            observer, self.observer_kind = PollingObserver(timeout=max(0.2, self.debounce)), "polling"
            for name, root in roots.items():
                observer.schedule(self._handler(name), str(root), recursive=True)
            observer.start()
        try:
            if initial:
                self._settle(self.run_pass(roots), roots)
            while not self.stop.is_set():
                names = self._next_burst()
                if names:
                    self._settle(self.run_pass(names), names)
        finally:
            observer.stop()
            observer.join(timeout=5)

    def _next_burst(self) -> set[str]:
        """Wait for changes, then for ``debounce`` seconds of quiet; the collections that changed."""
        with self._cond:
            while not self._dirty and not self.stop.is_set():
                self._cond.wait(0.5)
            while self._dirty and not self.stop.is_set():
                quiet = time.monotonic() - self._last_change
                if quiet >= self.debounce:
                    break
                self._cond.wait(self.debounce - quiet)
            names, self._dirty = set(self._dirty), set()
        return names

    def _settle(self, p: WatchPass, names: Iterable[str]) -> None:
        """After a failed pass: retry the same collections, backing off, until one succeeds or stop."""
        delay = self.retry
        while p.error is not None and not self.stop.wait(delay):
            with self._cond:
                pending, self._dirty = set(self._dirty), set()
            p = self.run_pass(set(names) | pending)
            delay = min(delay * 2, MAX_RETRY_S)


__all__ = ["DEFAULT_DEBOUNCE_S", "WatchPass", "Watcher"]
