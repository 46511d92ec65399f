"""Crash-test hooks of the write path: an event log and deterministic kill points.

Both are off unless their environment variable is set; then (and only then) the store
reports what its write transactions are doing, so the crash harness
(``tests/reliability/test_crash.py``) can tell a SIGKILL that landed *inside* a write from
one that landed during interpreter start-up, between transactions or at a commit.

``QMDLAB_TEST_EVENTS=<file>``
    One line per event is appended to ``<file>`` with an unbuffered ``os.write`` on an
    ``O_APPEND`` descriptor, so a line is on disk before the next SQL statement runs and a
    SIGKILL can never lose it. Lines are ``<kind> <label> <pid>``:

    - ``begin txn`` — ``BEGIN IMMEDIATE`` succeeded (a write transaction is open); the
      transaction's label replaces ``txn`` where the writer names it (``update:<collection>``
      for the one transaction of each collection ``update`` changes);
    - ``write <label>`` — statements of the open transaction have run (see the labels below);
    - ``commit-start txn`` — ``COMMIT`` is about to be issued;
    - ``commit txn`` / ``rollback txn`` — the transaction ended.

    A kill whose last line is ``begin`` or ``write`` landed before ``COMMIT`` was issued:
    the transaction was open and (after a ``write``) held uncommitted changes. After
    ``commit-start`` it is ambiguous and the harness does not count it as mid-write.

``QMDLAB_TEST_KILL_AT=<label>:<n>``
    SIGKILL this process the ``n``-th time (1-based) it passes the kill point ``<label>``:
    a deterministic crash between two statements of one transaction.

Labels (kill points):

- ``update.file`` — ``qmdlab update``: after the content/chunk/document statements of one
  new or changed file, inside the collection's transaction (more statements follow);
- ``update.insert`` — after inserting one new document row, inside the same transaction;
- ``vectors.batch`` — ``qmdlab embed``: after one batch's vector rows were inserted, before
  its ``COMMIT``.
"""

from __future__ import annotations

import os
import signal

from qmdlab.errors import ConfigError

EVENTS_ENV = "QMDLAB_TEST_EVENTS"
KILL_ENV = "QMDLAB_TEST_KILL_AT"
LABELS = ("update.file", "update.insert", "vectors.batch")

_fds: dict[str, int] = {}
_passes: dict[str, int] = {}


def enabled() -> bool:
    """Whether either hook is switched on (one dict lookup each; the normal path returns ``False``)."""
    return EVENTS_ENV in os.environ or KILL_ENV in os.environ


def parse_kill_at(spec: str) -> tuple[str, int]:
    """``"<label>:<n>"`` → ``(label, n)``.

    >>> parse_kill_at("vectors.batch:3")
    ('vectors.batch', 3)
    >>> parse_kill_at("update.file")
    Traceback (most recent call last):
    ...
    qmdlab.errors.ConfigError: $QMDLAB_TEST_KILL_AT='update.file': expected '<label>:<n>' with n >= 1 and a label of update.file, update.insert, vectors.batch; fix or unset it
    """
    label, _, n = spec.strip().rpartition(":")
    if label not in LABELS or not n.isdigit() or int(n) < 1:
        raise ConfigError(
            f"${KILL_ENV}={spec!r}: expected '<label>:<n>' with n >= 1 and a label of "
            f"{', '.join(LABELS)}; fix or unset it"
        )
    return label, int(n)


def event(kind: str, label: str = "txn") -> None:
    """Append ``<kind> <label> <pid>`` to ``$QMDLAB_TEST_EVENTS`` (no-op when unset)."""
    path = os.environ.get(EVENTS_ENV)
    if not path:
        return
    fd = _fds.get(path)
    if fd is None:
        fd = _fds[path] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    label = "_".join(label.split()) or "txn"  # one token: the line is split on whitespace
    os.write(fd, f"{kind} {label} {os.getpid()}\n".encode())


def point(label: str) -> None:
    """Kill point ``label``: logs a ``write`` event and dies here when ``$QMDLAB_TEST_KILL_AT`` says so."""
    if not enabled():
        return
    event("write", label)
    spec = os.environ.get(KILL_ENV)
    if not spec:
        return
    want, n = parse_kill_at(spec)
    if want != label:
        return
    _passes[label] = _passes.get(label, 0) + 1
    if _passes[label] == n:
        os.kill(os.getpid(), signal.SIGKILL)


__all__ = ["EVENTS_ENV", "KILL_ENV", "LABELS", "enabled", "event", "point", "parse_kill_at"]
