"""Approval of collection update commands (``qmdlab trust``) and running them before ``update``.

A collection's ``update`` command (``qmdlab collection update-cmd NAME 'git pull --ff-only'``) is a
shell command; a ``collections.yaml`` can arrive with a checkout (a project-local index made by
``qmdlab init`` and committed) or come from an imported qmd config, so no command runs because a
config file says so. It runs only once this user has approved exactly that command, for exactly
that collection of exactly that config file: the approvals live in ``$QMDLAB_HOME/trusted.yaml``,
outside every index, keyed by the SHA-256 of (the config's real path, the collection, the
command). Editing the command, moving the config or renaming the collection asks again.

``qmdlab collection update-cmd`` approves the command it is given (the user typed it);
``qmdlab trust`` approves the pending ones after showing them; ``qmdlab trust list`` /
``qmdlab trust revoke`` show and drop approvals. ``QMDLAB_TRUST_UPDATE_HOOKS=1`` approves every
command for one run (unattended CI). Nothing here ever prompts: a command not approved is
skipped with a line that says how to approve it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from qmdlab.errors import ConfigError
from qmdlab.paths import home
from qmdlab.store.config import Collection

TRUST_ENV = "QMDLAB_TRUST_UPDATE_HOOKS"
#: Seconds an update command may run before it is stopped.
DEFAULT_TIMEOUT_S = 600


def trust_file() -> Path:
    """``$QMDLAB_HOME/trusted.yaml``: the approved update commands."""
    return home() / "trusted.yaml"


def command_key(config_path: str | os.PathLike, collection: str, command: str) -> str:
    """The approval key of one command of one collection of one config file.

    >>> command_key("/x/collections.yaml", "notes", "git pull") == command_key("/x/collections.yaml", "notes", "git pull")
    True
    >>> command_key("/x/collections.yaml", "notes", "git pull") == command_key("/x/collections.yaml", "notes", "rm -rf ~")
    False
    """
    real = os.path.realpath(os.fspath(config_path))
    return hashlib.sha256("\0".join((real, collection, command)).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Approval:
    key: str
    config: str
    collection: str
    command: str
    approved_at: str


def _load() -> list[Approval]:
    path = trust_file()
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(
            f"{path}: unreadable approvals ({err.__class__.__name__}); fix or delete the file "
            "(then approve again with `qmdlab trust`)"
        ) from None
    rows = data.get("approved") if isinstance(data, dict) else None
    out = []
    for r in rows or []:
        if isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ("key", "config", "collection", "command")):
            out.append(Approval(r["key"], r["config"], r["collection"], r["command"], str(r.get("approved_at", ""))))
    return out


def _save(rows: list[Approval]) -> None:
    path = trust_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(
            yaml.safe_dump({"approved": [r.__dict__ for r in rows]}, sort_keys=False, allow_unicode=True),
            encoding="utf-8",
        )
        os.replace(tmp, path)
    except OSError as err:
        raise ConfigError(
            f"{path}: cannot write the approvals ({err.strerror or err}); make $QMDLAB_HOME writable and approve again"
        ) from None


def approvals() -> list[Approval]:
    """Every recorded approval."""
    return _load()


def is_approved(config_path: str | os.PathLike, coll: Collection) -> bool:
    """May ``coll``'s update command run (approved, or ``$QMDLAB_TRUST_UPDATE_HOOKS=1``)?"""
    if not coll.update_cmd:
        return False
    if os.environ.get(TRUST_ENV) == "1":
        return True
    key = command_key(config_path, coll.name, coll.update_cmd)
    return any(a.key == key for a in _load())


def pending(config_path: str | os.PathLike, collections: Iterable[Collection]) -> list[Collection]:
    """The collections whose update command is not approved."""
    keys = {a.key for a in _load()}
    return [c for c in collections if c.update_cmd and command_key(config_path, c.name, c.update_cmd) not in keys]


def approve(config_path: str | os.PathLike, collections: Iterable[Collection]) -> list[Collection]:
    """Record approval of the update commands of ``collections``; returns those newly approved."""
    rows = _load()
    keys = {a.key for a in rows}
    done = []
    for c in collections:
        if not c.update_cmd:
            continue
        key = command_key(config_path, c.name, c.update_cmd)
        if key not in keys:
            rows.append(
                Approval(
                    key,
                    os.path.realpath(os.fspath(config_path)),
                    c.name,
                    c.update_cmd,
                    time.strftime("%Y-%m-%dT%H:%M:%S"),
                )
            )
            keys.add(key)
            done.append(c)
    if done:
        _save(rows)
    return done


def revoke(config_path: str | os.PathLike, names: Iterable[str] | None = None) -> list[Approval]:
    """Drop the approvals of a config's collections (``names``; all of that config when ``None``)."""
    real = os.path.realpath(os.fspath(config_path))
    wanted = None if names is None else set(names)
    rows = _load()
    gone = [a for a in rows if a.config == real and (wanted is None or a.collection in wanted)]
    if gone:
        _save([a for a in rows if a not in gone])
    return gone


def refusal(coll: Collection) -> str:
    """The line printed when an update command is not approved."""
    return (
        f"collection {coll.name}: update command {coll.update_cmd!r} is not approved, so it did not run; "
        f"approve it with `qmdlab trust -c {coll.name}` (or `qmdlab trust` for every pending one)"
    )


def run_update_command(coll: Collection, *, timeout: float = DEFAULT_TIMEOUT_S) -> tuple[bool, str]:
    """Run ``coll``'s update command in its root (``bash -c``, else ``sh -c``); ``(ok, message)``.

    The command's output comes back in ``message``. A non-zero exit, a stop by signal or a
    timeout is reported there too (``ok`` false), never raised.
    """
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
        return False, f"collection {coll.name}: update command stopped after {timeout:g} s"
    except OSError as err:
        return False, f"collection {coll.name}: update command could not start ({err.strerror or err})"
    out = proc.stdout.decode("utf-8", "replace").rstrip()
    if proc.returncode == 0:
        return True, out
    how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
    tail = ("; last output: " + out.splitlines()[-1][:200]) if out else ""
    return False, f"collection {coll.name}: update command failed ({how}){tail}"
