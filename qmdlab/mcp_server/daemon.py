"""``qmdlab mcp --daemon`` / ``--stop``: the HTTP MCP server in the background, with a pid file.

One daemon per index, as qmd keys its ``mcp.pid`` per index: the files of the default index are
``$QMDLAB_HOME/mcp.pid``, ``mcp.pid.lock`` and ``mcp.log``; another index's are ``mcp-NAME.*`` (an
index under ``$QMDLAB_HOME/indexes``) or ``mcp-HASH.*`` (an index at another path; HASH: twelve
hex digits of its folder's path) — :func:`state_name`. Below, "the pid file" is the index's.

:func:`start` takes an exclusive ``flock`` on the index's lock file (a second ``--daemon`` of the
same index, even one started at the same moment, is refused while it is held), runs
``qmdlab mcp --http`` as a detached child that inherits the locked descriptor (its own session,
stdin closed, output to the index's log file) with a random token in its environment
(:data:`TOKEN_ENV`), waits until ``GET /health`` answers from a socket that child listens on, and
writes the pid file (JSON: pid, host, port, index, token, the process's start time).
The lock is held as long as the daemon lives, and released by the kernel when it exits.

:func:`stop` signals only a process it has identified as that daemon: the pid file's pid must be
an integer above 1 (``0``, negative pids, ``-1`` would signal process groups or every process),
the lock must be held (no daemon of this index runs otherwise: the file is stale and removed, and
nothing is signalled), and — where ``/proc`` tells — the process must carry the token in its
environment, have the recorded start time (a reused pid does not) and run ``qmdlab … mcp``. The
process is pinned with a pidfd before it is checked, so the signal reaches the process checked;
SIGTERM goes to that one pid (never ``killpg``), and the stop waits until the lock is released.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from qmdlab.display import printable
from qmdlab.errors import QmdlabError
from qmdlab.paths import home, resolve_index_dir

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 15
#: The daemon's environment variable holding the token its pid file records.
TOKEN_ENV = "QMDLAB_MCP_DAEMON_TOKEN"


def state_name(index: str | os.PathLike[str] | None = None) -> str:
    """The stem of an index's daemon files (``index``: as ``--index`` takes it; ``None``: the index
    a command without ``--index`` uses): ``mcp`` for the default index, ``mcp-NAME`` for another
    index under ``$QMDLAB_HOME/indexes``, ``mcp-HASH`` for one at another path.

    >>> import os; saved = dict(os.environ); os.environ["QMDLAB_HOME"] = "/home/me/.qmdlab"
    >>> state_name("default"), state_name("notes"), state_name("/home/me/.qmdlab/indexes/notes")
    ('mcp', 'mcp-notes', 'mcp-notes')
    >>> state_name("/data/idx") == state_name("/data/idx/") != state_name("/data/other")
    True
    >>> os.environ.clear(); os.environ.update(saved)
    """
    folder = os.path.abspath(resolve_index_dir(None if index is None else str(index)))
    parent, name = os.path.realpath(os.path.dirname(folder)), os.path.basename(folder)
    if parent == os.path.realpath(home() / "indexes"):
        return "mcp" if name == "default" else f"mcp-{name}"
    key = os.path.join(parent, name).encode("utf-8", "surrogateescape")
    return "mcp-" + hashlib.sha256(key).hexdigest()[:12]


def pid_file(index: str | os.PathLike[str] | None = None) -> Path:
    """The index's pid file (``$QMDLAB_HOME/mcp.pid`` for the default index)."""
    return home() / f"{state_name(index)}.pid"


def lock_file(index: str | os.PathLike[str] | None = None) -> Path:
    """The index's lock file (``$QMDLAB_HOME/mcp.pid.lock`` for the default index): held
    (``flock``) by the running daemon; never removed."""
    return home() / f"{state_name(index)}.pid.lock"


def log_file(index: str | os.PathLike[str] | None = None) -> Path:
    """The index's daemon log (``$QMDLAB_HOME/mcp.log`` for the default index)."""
    return home() / f"{state_name(index)}.log"


# ------------------------------------------------------------------------------------- the lock
def _stop_hint(index: str | os.PathLike[str] | None) -> str:
    """The command that stops the index's daemon.

    >>> _stop_hint(None), _stop_hint("my notes")
    ('`qmdlab mcp --stop`', "`qmdlab --index 'my notes' mcp --stop`")
    """
    return f"`qmdlab --index {shlex.quote(str(index))} mcp --stop`" if index else "`qmdlab mcp --stop`"


def _acquire(index: str | os.PathLike[str] | None = None) -> int | None:
    """The index's lock file's descriptor, locked exclusively; ``None`` when another process holds it."""
    home().mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(lock_file(index), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as err:
        raise QmdlabError(
            f"{lock_file(index)}: cannot open the daemon's lock file ({err.strerror or err}); make $QMDLAB_HOME "
            "writable (and the lock file a plain file)"
        ) from None
    if fcntl is None:  # pragma: no cover
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _lock_held(index: str | os.PathLike[str] | None = None) -> bool:
    """Does a process (the daemon, or a start in progress) hold the index's lock? (Creates nothing
    when no daemon was ever started for it.)"""
    if not os.path.lexists(lock_file(index)):
        return False
    fd = _acquire(index)
    if fd is None:
        return True
    os.close(fd)
    return False


# ------------------------------------------------------------------------------------- identity
def valid_pid(value: object) -> int | None:
    """A pid file's pid when it can name one process: an integer above 1 (``0`` and negative
    values name process groups, ``-1`` every process, ``1`` is init).

    >>> [valid_pid(v) for v in (4242, 0, -1, -4242, 1, True, "4242", 42.0, None)]
    [4242, None, None, None, None, None, None, None, None]
    """
    return value if type(value) is int and value > 1 else None


def _proc(pid: int, name: str) -> bytes | None:
    """``/proc/<pid>/<name>``, or ``None`` (no such process, no ``/proc``, not readable)."""
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return None


def _has_proc() -> bool:
    return Path("/proc/self/stat").exists()


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks after boot (``/proc/<pid>/stat`` field 22)."""
    raw = _proc(pid, "stat")
    if raw is None:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return fields[19].decode() if len(fields) > 19 else None


def _alive(pid: int) -> bool:
    if valid_pid(pid) is None:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or another user's process: not ours
        return False
    state = _proc(pid, "stat")
    if state is not None and state[state.rfind(b")") + 2 :][:1] in (b"Z", b"X"):
        return False  # a zombie (a child of this very process, not waited for) counts as gone
    return True


def _not_ours(pid: int, info: dict) -> str | None:
    """Why ``pid`` is not the daemon ``info`` (the pid file) records; ``None`` when it is."""
    if not _alive(pid):
        return "no such process"
    if not _has_proc():  # pragma: no cover - the lock (held) is all there is to go by
        return None
    cmdline = _proc(pid, "cmdline")
    if cmdline is None:
        return "its command line cannot be read"
    args = cmdline.split(b"\0")
    if not (any(b"qmdlab" in a for a in args) and b"mcp" in args):
        return "its command line is not `qmdlab mcp`"
    token = info.get("token")
    environ = _proc(pid, "environ")
    if not isinstance(token, str) or not token:
        return "the pid file has no token (written by an older qmdlab?)"
    if environ is None or f"{TOKEN_ENV}={token}".encode() not in environ.split(b"\0"):
        return "it does not carry the pid file's token"
    recorded = info.get("start_time")
    if recorded is not None and str(recorded) != start_time(pid):
        return "it started at another time than the daemon (its pid was reused)"
    return None


def _read_info(index: str | os.PathLike[str] | None = None) -> tuple[dict | None, str]:
    """The index's pid file's record and, when it is unusable, why."""
    path = pid_file(index)
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, "is missing"
    except (OSError, ValueError) as err:
        return None, f"cannot be read ({err.__class__.__name__})"
    if not isinstance(info, dict):
        return None, "does not hold a pid record"
    if valid_pid(info.get("pid")) is None:
        return None, f"names pid {info.get('pid')!r}, which is not one process (a pid must be an integer above 1)"
    return info, ""


def read_pid(index: str | os.PathLike[str] | None = None) -> dict | None:
    """The record of the index's running daemon, or ``None`` (no file, unreadable, or its process
    is not the daemon started for this index)."""
    info, _ = _read_info(index)
    if info is None or not _lock_held(index):
        return None
    return info if _not_ours(int(info["pid"]), info) is None else None


# ------------------------------------------------------------------------------------- start
def _health(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _listens(pid: int, port: int) -> bool:
    """Does ``pid`` hold a listening TCP socket on ``port``? (True where ``/proc`` cannot tell.)"""
    if not _has_proc():  # pragma: no cover
        return True
    sockets = set()
    for table in ("net/tcp", "net/tcp6"):
        for line in (_proc(pid, table) or b"").decode("ascii", "replace").splitlines()[1:]:
            cols = line.split()  # sl local_address rem_address st … inode
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                sockets.add(f"socket:[{cols[9]}]")
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return True
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in sockets:
                return True
        except OSError:
            continue
    return False


def _open_log(index: str | os.PathLike[str] | None, flags: int) -> int:
    """A descriptor of the index's log, opened without following a symbolic link (``O_NOFOLLOW``):
    a link left at the log's path would have the daemon's output written into (or a start error
    read from) whatever it points to. A link is refused with a one-line :class:`QmdlabError`."""
    path = log_file(index)
    try:
        return os.open(path, flags | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as err:
        if os.path.islink(path):
            raise QmdlabError(
                f"{path}: the daemon's log is a symbolic link (to {os.path.realpath(path)}); nothing was written "
                "through it — remove the link, then start the server again"
            ) from None
        raise QmdlabError(
            f"{path}: cannot open the daemon's log ({err.strerror or err}); make $QMDLAB_HOME writable"
        ) from None


def _log_tail(index: str | os.PathLike[str] | None = None, n: int = 5) -> str:
    try:
        with os.fdopen(_open_log(index, os.O_RDONLY), "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
    except (OSError, QmdlabError):
        return ""
    return printable(" | ".join(text.strip().splitlines()[-n:]))


def _write_info(info: dict, index: str | os.PathLike[str] | None = None) -> None:
    path = pid_file(index)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with open(tmp, "x", encoding="utf-8") as fh:
        fh.write(json.dumps(info))
    os.replace(tmp, path)


def start(
    server_args: Sequence[str], *, host: str, port: int, index: str | None, timeout: float = START_TIMEOUT_S
) -> dict:
    """Start the background server (``server_args``: the ``mcp --http …`` options) and return the
    pid record; a :class:`QmdlabError` when one is running (or starting) already for this index or
    the child does not come up."""
    lock = _acquire(index)
    for _ in range(5):  # a `status` or `--stop` holds the lock for an instant while it looks
        if lock is not None:
            break
        time.sleep(0.1)
        lock = _acquire(index)
    if lock is None:
        running = read_pid(index)
        if running is not None:
            raise QmdlabError(
                f"an MCP server is already running for this index (PID {running['pid']}, port {running['port']}); "
                f"stop it with {_stop_hint(index)}"
            )
        raise QmdlabError(
            f"an MCP server of this index is already running or starting (it holds {lock_file(index)}); "
            f"wait for it, or stop it with {_stop_hint(index)}"
        )
    try:
        pid_file(index).unlink(missing_ok=True)  # no daemon holds the lock: whatever the file says is stale
        token = secrets.token_hex(16)
        argv = (
            [sys.executable, "-m", "qmdlab.cli"]
            + (["--index", index] if index else [])
            + ["mcp", "--http", "--host", host, "--port", str(port), *server_args]
        )
        env = dict(os.environ, **{TOKEN_ENV: token})
        with os.fdopen(_open_log(index, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "wb") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                pass_fds=(lock,),  # the daemon holds the lock as long as it lives
                env=env,
            )
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc.poll() is not None:
                raise QmdlabError(
                    f"the MCP server exited at start (status {proc.returncode}): {_log_tail(index)}; "
                    f"full log: {log_file(index)}"
                )
            if _health(host, port) and _listens(proc.pid, port) and proc.poll() is None:
                info = {
                    "pid": proc.pid,
                    "host": host,
                    "port": port,
                    "index": index,
                    "token": token,
                    "start_time": start_time(proc.pid),
                }
                try:
                    _write_info(info, index)
                except OSError as err:  # a daemon no pid file names must not be left running
                    proc.terminate()
                    raise QmdlabError(
                        f"{pid_file(index)}: cannot write the pid file ({err.strerror or err}); the server was "
                        "stopped — make $QMDLAB_HOME writable and start it again"
                    ) from None
                return info
            time.sleep(0.2)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise QmdlabError(
            f"the MCP server did not answer on http://{host}:{port}/health within {timeout:g} s; see {log_file(index)}"
        )
    finally:
        os.close(lock)


# ------------------------------------------------------------------------------------- stop
def _pin(pid: int) -> int | None:
    """A pidfd of ``pid`` (the process it names cannot be replaced by a reused pid), or ``None``."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:  # pragma: no cover
        return None
    try:
        return opener(pid)
    except OSError:
        return None


def _terminate(pid: int, pidfd: int | None) -> None:
    """SIGTERM to exactly one process (``pid`` > 1; never a process group)."""
    assert valid_pid(pid) is not None
    sender = getattr(signal, "pidfd_send_signal", None)
    if pidfd is not None and sender is not None:
        sender(pidfd, signal.SIGTERM)
    else:  # pragma: no cover
        os.kill(pid, signal.SIGTERM)


def _reap(pid: int) -> None:
    """Collect the exit status of ``pid`` when it is a child of this process (a daemon started
    and stopped by one process, as in the tests), so it leaves no zombie."""
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done == pid:
            return
        time.sleep(0.05)


def stop(timeout: float = STOP_TIMEOUT_S, *, index: str | os.PathLike[str] | None = None) -> str:
    """Stop the index's background server; a line saying what happened. Nothing is signalled
    unless the pid file names the daemon started for this index (see the module's documentation)."""
    path = pid_file(index)
    if not os.path.lexists(path) and not os.path.lexists(lock_file(index)):
        return "no MCP server running (no pid file)"
    lock = _acquire(index)
    if lock is not None:  # no daemon of this index runs
        try:
            if not os.path.lexists(path):
                return "no MCP server running (no pid file)"
            path.unlink(missing_ok=True)
            return (
                f"removed a stale pid file ({path}): its server was not running (no daemon of this "
                "index holds its lock), so nothing was signalled"
            )
        finally:
            os.close(lock)
    info, problem = _read_info(index)
    if info is None:
        raise QmdlabError(
            f"an MCP server of this index holds {lock_file(index)}, but {path} {problem}; nothing was "
            "signalled — if a `qmdlab mcp --daemon` is starting, wait for it; otherwise find the server "
            "(`ps -ef | grep 'qmdlab.cli mcp'`) and stop it with `kill PID`"
        )
    pid = int(info["pid"])
    pidfd = _pin(pid)
    try:
        reason = _not_ours(pid, info)
        if reason is not None:
            raise QmdlabError(
                f"{path} names PID {pid}, which is not the MCP server started for this index ({reason}); "
                "nothing was signalled — find the server (`ps -ef | grep 'qmdlab.cli mcp'`) and stop it "
                "with `kill PID`"
            )
        _terminate(pid, pidfd)
    finally:
        if pidfd is not None:
            os.close(pidfd)
    end = time.monotonic() + timeout
    while True:  # the daemon has exited once its lock is free; the file goes while this holds it
        lock = _acquire(index)
        if lock is not None:
            try:
                path.unlink(missing_ok=True)
            finally:
                os.close(lock)
            _reap(pid)
            return f"stopped the MCP server (PID {pid}, port {info['port']})"
        if time.monotonic() >= end:
            raise QmdlabError(
                f"the MCP server (PID {pid}) did not stop within {timeout:g} s of SIGTERM; stop it with `kill {pid}`"
            )
        time.sleep(0.1)
