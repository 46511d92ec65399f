"""``qmdlab mcp --stop`` signals only the daemon this QMDLAB_HOME started.

The pid file used to be trusted: pid ``0`` signalled --stop's own process group, a negative pid a
foreign group, ``-1`` (as root) every process, and a pid reused by another ``qmdlab mcp`` killed
that server; two ``--daemon`` started at once left one untracked. Every foreign process these
tests start must survive. ``--stop`` always runs in a session (process group) of its own, so that
the code before the fix cannot signal the test run; ``-1`` is tried only in-process (signals
recorded, not sent) and inside ``unshare --pid --fork --mount-proc``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ, QMDLAB_HOME=str(home), PYTHONPATH=str(REPO), QMDLAB_PRESET="fake")
    env.pop("QMDLAB_INDEX", None)
    return env


def _cli(home: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """The CLI in a session (and process group) of its own: were it to signal its own group, the
    test run would survive it."""
    return subprocess.run(
        [sys.executable, "-m", "qmdlab.cli", *args],
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except (OSError, IndexError):
            return False
    return True


def _pid_file(home: Path, pid: object, **extra) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "mcp.pid").write_text(json.dumps({"pid": pid, "host": "127.0.0.1", "port": 1, **extra}))


@pytest.fixture
def foreign():
    """Start processes this test owns (a `sleep`, or one whose command line reads `qmdlab … mcp`);
    each must survive; all are ended at the end."""
    procs: list[subprocess.Popen] = []

    def start(*argv: str, **kw) -> subprocess.Popen:
        p = subprocess.Popen(list(argv) or ["sleep", "120"], **kw)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(5)


def _qmdlab_lookalike(start) -> subprocess.Popen:
    """A process whose command line matches what the old check looked for ('qmdlab' and 'mcp')."""
    return start(sys.executable, "-c", "import time; time.sleep(120)", "qmdlab", "mcp", "--http")


# --------------------------------------------------------------------------- no signal, ever, to a group
@pytest.mark.parametrize("pid", [0, -1, -4242, 1, "4242", 42.0, True, None, [4242]], ids=repr)
def test_stop_never_signals_a_group_or_a_pid_that_is_not_one_process(qmdlab_home, monkeypatch, pid):
    """In-process, with os.kill/os.killpg/pidfd_send_signal recorded instead of sent."""
    from qmdlab.errors import QmdlabError
    from qmdlab.mcp_server import daemon

    sent: list[tuple[str, object, int]] = []

    def fake_kill(target, sig):
        sent.append(("kill", target, sig))
        if not (isinstance(target, int) and target > 1):
            return None  # pretend it worked: the old code went on to SIGTERM
        return os.kill(target, 0) if sig == 0 else None

    monkeypatch.setattr(os, "kill", fake_kill)
    monkeypatch.setattr(os, "killpg", lambda g, s: sent.append(("killpg", g, s)))
    if hasattr(signal, "pidfd_send_signal"):
        monkeypatch.setattr(signal, "pidfd_send_signal", lambda fd, s, *a: sent.append(("pidfd", fd, s)))
    _pid_file(qmdlab_home, pid)
    try:
        line = daemon.stop(timeout=1)
    except QmdlabError as err:
        line = str(err)
    assert "nothing was signalled" in line, line
    assert not [s for s in sent if s[2] != 0], sent  # no real signal at all
    assert not [s for s in sent if s[0] == "killpg" or not (isinstance(s[1], int) and s[1] > 1)], sent


def test_a_negative_pid_never_signals_a_foreign_group(qmdlab_home, foreign):
    group = foreign("sleep", "120", start_new_session=True)  # its own group: pgid = its pid
    _pid_file(qmdlab_home, -group.pid)
    res = _cli(qmdlab_home, "mcp", "--stop")
    assert res.returncode == 0 and "nothing was signalled" in res.stdout, (res.stdout, res.stderr)
    time.sleep(0.3)
    assert _alive(group.pid)
    assert not (qmdlab_home / "mcp.pid").exists()  # no daemon of this home holds the lock: stale


def test_pid_zero_never_signals_the_own_process_group(qmdlab_home, tmp_path):
    """--stop runs with a `sleep` in a new session (so the old code, signalling group 0, could only
    hit that process group); the sleep and --stop itself must come through."""
    _pid_file(qmdlab_home, 0)
    pidf = tmp_path / "sleep.pid"
    script = f"sleep 120 >/dev/null 2>&1 & echo $! > {pidf}; exec {sys.executable} -m qmdlab.cli mcp --stop"
    res = subprocess.run(
        ["sh", "-c", script], env=_env(qmdlab_home), capture_output=True, text=True, timeout=120, start_new_session=True
    )
    sleeper = int(pidf.read_text())
    try:
        assert res.returncode == 0 and "nothing was signalled" in res.stdout, (res.returncode, res.stdout, res.stderr)
        assert _alive(sleeper)
    finally:
        if _alive(sleeper):
            os.kill(sleeper, signal.SIGKILL)


def _unshare_works() -> bool:
    if not shutil.which("unshare") or sys.platform != "linux":
        return False
    try:
        r = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", "echo $$"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and r.stdout.strip() == "1"


@pytest.mark.parametrize("pid", [-1, 0])
def test_minus_one_and_zero_inside_a_pid_namespace(qmdlab_home, tmp_path, pid):
    """As root, pid -1 signals every process but init: run inside a PID namespace of its own,
    where every process is ours, with a `sleep` that must survive --stop."""
    if not _unshare_works():
        pytest.skip("no `unshare --pid --fork --mount-proc` here (needs root or user namespaces)")
    _pid_file(qmdlab_home, pid)
    out = tmp_path / "out.txt"
    script = (
        f"sleep 120 & S=$!; {sys.executable} -m qmdlab.cli mcp --stop > {out} 2>&1; echo rc=$? >> {out}; "
        f"sleep 0.3; if kill -0 $S 2>/dev/null; then echo sleep-alive >> {out}; fi; kill $S 2>/dev/null; true"
    )
    subprocess.run(  # a session of its own too: process groups are not confined to a PID namespace
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script],
        env=_env(qmdlab_home),
        timeout=120,
        check=False,
        start_new_session=True,
    )
    text = out.read_text()
    assert "rc=0" in text and "sleep-alive" in text and "nothing was signalled" in text, text


def test_a_reused_pid_of_another_qmdlab_mcp_is_not_signalled(qmdlab_home, foreign):
    """The daemon is gone (no lock held); its pid now belongs to another `qmdlab mcp`."""
    other = _qmdlab_lookalike(foreign)
    time.sleep(0.2)
    _pid_file(qmdlab_home, other.pid, token="0" * 32)
    res = _cli(qmdlab_home, "mcp", "--stop")
    assert res.returncode == 0 and "stale pid file" in res.stdout and "nothing was signalled" in res.stdout
    time.sleep(0.3)
    assert _alive(other.pid)


# --------------------------------------------------------------------------- with a real daemon
def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture
def served(tmp_path, qmdlab_home, require):
    """An index to serve; at the end every server process started for it is ended (by pid, > 1)."""
    require.module("uvicorn", "the HTTP MCP server needs the 'mcp' extra")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nheron\n", encoding="utf-8")
    idx = str(tmp_path / "idx-served")
    res = _cli(qmdlab_home, "--index", idx, "collection", "add", str(notes), "--name", "notes")
    assert res.returncode == 0, res.stderr
    yield idx
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if idx.encode() in args and b"mcp" in args and int(entry.name) > 1:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_the_running_daemon_is_stopped_only_through_its_own_record(qmdlab_home, served, foreign):
    port = _port()
    res = _cli(qmdlab_home, "--index", served, "mcp", "--daemon", "--port", str(port), "--preset", "fake")
    assert res.returncode == 0, (res.stdout, res.stderr)
    from qmdlab.mcp_server.daemon import pid_file

    path = pid_file(served)  # the served index's record (one daemon per index)
    info = json.loads(path.read_text())
    pid = info["pid"]
    assert len(info["token"]) == 32 and info["start_time"] and _answers(port)
    other = _qmdlab_lookalike(foreign)
    time.sleep(0.2)
    forged = [
        dict(info, pid=other.pid),  # another `qmdlab mcp` without the token
        dict(info, start_time=str(int(info["start_time"]) + 1)),  # the daemon's pid, another start time
        dict(info, token="f" * 32),  # another token
        dict(info, pid=0),  # (-1 is tried inside a PID namespace only, above)
    ]
    for record in forged:
        path.write_text(json.dumps(record))
        res = _cli(qmdlab_home, "--index", served, "mcp", "--stop")
        assert res.returncode == 1 and "nothing was signalled" in res.stderr, (record, res.stdout, res.stderr)
        assert res.stderr.count("\n") == 1
        assert _alive(other.pid) and _alive(pid) and _answers(port), record
    status = _cli(qmdlab_home, "--index", served, "status").stdout
    assert "MCP: running" not in status  # the forged record names no daemon
    path.write_text(json.dumps(info))
    assert f"MCP: running (PID {pid}" in _cli(qmdlab_home, "--index", served, "status").stdout
    res = _cli(qmdlab_home, "--index", served, "mcp", "--stop")
    assert res.returncode == 0 and f"stopped the MCP server (PID {pid}" in res.stdout, (res.stdout, res.stderr)
    assert not path.exists() and not _answers(port) and _alive(other.pid)
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)


def test_two_daemons_started_at_once_leave_none_untracked(qmdlab_home, served):
    ports = [_port(), _port()]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "qmdlab.cli", "--index", served, "mcp", "--daemon", "--port", str(p)],
            env=_env(qmdlab_home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in ports
    ]
    results = [p.communicate(timeout=180) + (p.returncode,) for p in procs]
    codes = sorted(r[2] for r in results)
    assert codes == [0, 1], results
    loser = next(r for r in results if r[2] == 1)
    assert "already running" in loser[1] and f"qmdlab --index {served} mcp --stop" in loser[1], loser
    assert [_answers(p) for p in ports].count(True) == 1
    res = _cli(qmdlab_home, "--index", served, "mcp", "--stop")
    assert res.returncode == 0 and "stopped the MCP server" in res.stdout, (res.stdout, res.stderr)
    time.sleep(0.5)
    assert not any(_answers(p) for p in ports)  # nothing left running that no pid file names


def test_looking_for_a_daemon_creates_nothing(tmp_path, monkeypatch):
    from qmdlab.mcp_server import daemon

    home = tmp_path / "fresh-home"
    monkeypatch.setenv("QMDLAB_HOME", str(home))
    assert daemon.read_pid() is None and daemon.stop() == "no MCP server running (no pid file)"
    assert not home.exists()
