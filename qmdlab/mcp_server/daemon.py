"""``qmdlab mcp --daemon`` / ``--stop``: the HTTP MCP server in the background, with a pid file.

:func:`start` runs ``qmdlab mcp --http`` as a detached child (its own session, stdin closed,
output to ``$QMDLAB_HOME/mcp.log``), waits until ``GET /health`` answers, and writes
``$QMDLAB_HOME/mcp.pid`` (JSON: pid, host, port, index). :func:`stop` sends that process SIGTERM
(the server finishes its requests and exits), waits for it, and removes the file; a pid file
whose process is gone — or is no longer a qmdlab MCP server — is removed as stale.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from qmdlab.errors import QmdlabError
from qmdlab.paths import home

START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 15


def pid_file() -> Path:
    return home() / "mcp.pid"


def log_file() -> Path:
    return home() / "mcp.log"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: not ours
        return False
    try:  # a zombie child of this process counts as gone
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    return True


def _is_ours(pid: int) -> bool:
    """Is ``pid`` a qmdlab MCP server (its command line, where ``/proc`` tells)?"""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True  # no /proc: trust the pid file
    try:
        args = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"qmdlab" in a for a in args) and b"mcp" in args


def read_pid() -> dict | None:
    """The pid file's record, or ``None`` (no file, unreadable, or its process is gone)."""
    path = pid_file()
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        pid = int(info["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if _alive(pid) and _is_ours(pid) else None


def _health(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _log_tail(n: int = 5) -> str:
    try:
        lines = log_file().read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(lines[-n:])


def start(
    server_args: Sequence[str], *, host: str, port: int, index: str | None, timeout: float = START_TIMEOUT_S
) -> dict:
    """Start the background server (``server_args``: the ``mcp --http …`` options) and return the
    pid record; a :class:`QmdlabError` when one is running already or the child does not come up."""
    running = read_pid()
    if running is not None:
        raise QmdlabError(
            f"an MCP server is already running (PID {running['pid']}, port {running['port']}); "
            "stop it with `qmdlab mcp --stop`"
        )
    home().mkdir(parents=True, exist_ok=True)
    argv = (
        [sys.executable, "-m", "qmdlab.cli"]
        + (["--index", index] if index else [])
        + ["mcp", "--http", "--host", host, "--port", str(port), *server_args]
    )
    with open(log_file(), "wb") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True
        )
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise QmdlabError(
                f"the MCP server exited at start (status {proc.returncode}): {_log_tail()}; full log: {log_file()}"
            )
        if _health(host, port):
            info = {"pid": proc.pid, "host": host, "port": port, "index": index}
            tmp = pid_file().with_name("mcp.pid.tmp")
            tmp.write_text(json.dumps(info), encoding="utf-8")
            os.replace(tmp, pid_file())
            return info
        time.sleep(0.2)
    proc.terminate()
    raise QmdlabError(
        f"the MCP server did not answer on http://{host}:{port}/health within {timeout:g} s; see {log_file()}"
    )


def stop(timeout: float = STOP_TIMEOUT_S) -> str:
    """Stop the background server; a line saying what happened."""
    path = pid_file()
    if not path.exists():
        return "no MCP server running (no pid file)"
    info = read_pid()
    if info is None:
        path.unlink(missing_ok=True)
        return f"removed a stale pid file ({path}): its server was not running"
    pid = int(info["pid"])
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout
    while time.monotonic() < end and _alive(pid):
        time.sleep(0.1)
    if _alive(pid):
        raise QmdlabError(
            f"the MCP server (PID {pid}) did not stop within {timeout:g} s of SIGTERM; stop it with `kill {pid}`"
        )
    path.unlink(missing_ok=True)
    return f"stopped the MCP server (PID {pid}, port {info['port']})"
