"""``qmdlab mcp --daemon`` / ``--stop`` (pid file, a real background server) and ``qmdlab skill``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_daemon_starts_answers_and_stops(tmp_path, qmdlab_home, require, monkeypatch):
    require.module("uvicorn", "the HTTP MCP server needs the 'mcp' extra")
    monkeypatch.setenv("QMDLAB_PRESET", "fake")
    idx = str(tmp_path / "idx")
    runner = CliRunner()
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nheron\n", encoding="utf-8")
    assert runner.invoke(cli, ["--index", idx, "collection", "add", str(notes), "--name", "notes"]).exit_code == 0
    port = _port()
    res = runner.invoke(cli, ["--index", idx, "mcp", "--daemon", "--port", str(port), "--preset", "fake"])
    assert res.exit_code == 0, res.output
    from qmdlab.mcp_server.daemon import pid_file

    pid_path = pid_file(idx)  # this index's pid file: one daemon per index
    assert pid_path.parent == qmdlab_home and pid_path.name.startswith("mcp-") and pid_path.name.endswith(".pid")
    info = json.loads(pid_path.read_text())
    try:
        assert (info["port"], info["index"]) == (port, idx) and f"PID {info['pid']}" in res.output
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            assert r.status == 200
        status = runner.invoke(cli, ["--index", idx, "status"]).output
        assert f"MCP: running (PID {info['pid']}, http://127.0.0.1:{port}/mcp" in status
        again = runner.invoke(cli, ["--index", idx, "mcp", "--daemon", "--port", str(_port())])
        assert again.exit_code == 1 and "already running" in again.output
        assert f"qmdlab --index {idx} mcp --stop" in again.output
        assert "no MCP server running" in runner.invoke(cli, ["mcp", "--stop"]).output  # the default index's: none
        res = runner.invoke(cli, ["--index", idx, "mcp", "--stop"])
        assert res.exit_code == 0 and f"stopped the MCP server (PID {info['pid']}" in res.output
    finally:
        if pid_path.exists():  # leave no server behind when an assertion failed
            os.kill(info["pid"], 15)
    assert not pid_path.exists()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(info["pid"], 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the daemon is still running after --stop")
    assert "no MCP server running" in runner.invoke(cli, ["mcp", "stop"]).output  # qmd's spelling
    assert "MCP:" not in runner.invoke(cli, ["--index", idx, "status"]).output


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(f"PID {pid} is still running after --stop")


def test_two_indexes_each_run_a_daemon(tmp_path, qmdlab_home, require, monkeypatch):
    """As qmd keys mcp.pid per index: the default index and another each get a daemon, `status`
    shows each its own, and stopping one leaves the other running."""
    require.module("uvicorn", "the HTTP MCP server needs the 'mcp' extra")
    from qmdlab.mcp_server.daemon import pid_file

    monkeypatch.setenv("QMDLAB_PRESET", "fake")
    monkeypatch.chdir(tmp_path)  # no project index above the test's folder
    runner = CliRunner()
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nheron\n", encoding="utf-8")
    indexes = {"default": [], "work": ["--index", "work"]}
    infos = {}
    try:
        for name, opt in indexes.items():
            assert runner.invoke(cli, [*opt, "collection", "add", str(notes), "--name", "n"]).exit_code == 0
            port = _port()
            res = runner.invoke(cli, [*opt, "mcp", "--daemon", "--port", str(port), "--preset", "fake"])
            assert res.exit_code == 0, res.output
            infos[name] = json.loads(pid_file(name).read_text())
            assert infos[name]["port"] == port
        assert (pid_file("default").name, pid_file("work").name) == ("mcp.pid", "mcp-work.pid")
        assert (qmdlab_home / "mcp.pid").exists() and (qmdlab_home / "mcp-work.log").exists()
        for name, opt in indexes.items():
            assert f"MCP: running (PID {infos[name]['pid']}," in runner.invoke(cli, [*opt, "status"]).output
        res = runner.invoke(cli, ["--index", "work", "mcp", "--stop"])
        assert res.exit_code == 0 and f"stopped the MCP server (PID {infos['work']['pid']}" in res.output
        _wait_gone(infos["work"]["pid"])
        with urllib.request.urlopen(f"http://127.0.0.1:{infos['default']['port']}/health", timeout=5) as r:
            assert r.status == 200  # the other index's daemon still answers
        assert "MCP:" not in runner.invoke(cli, ["--index", "work", "status"]).output
        res = runner.invoke(cli, ["mcp", "stop"])
        assert res.exit_code == 0 and f"stopped the MCP server (PID {infos['default']['pid']}" in res.output
        _wait_gone(infos["default"]["pid"])
    finally:
        for name, info in infos.items():  # leave no server behind when an assertion failed
            if pid_file(name).exists():
                os.kill(info["pid"], 15)


def test_stale_pid_file_is_cleaned(qmdlab_home):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    qmdlab_home.mkdir(parents=True, exist_ok=True)
    (qmdlab_home / "mcp.pid").write_text(json.dumps({"pid": proc.pid, "port": 1, "host": "127.0.0.1"}))
    res = CliRunner().invoke(cli, ["mcp", "--stop"])
    assert res.exit_code == 0 and "stale pid file" in res.output
    assert not (qmdlab_home / "mcp.pid").exists()
    bad = CliRunner().invoke(cli, ["mcp", "--stop", "--daemon"])
    assert bad.exit_code == 1 and "exclude each other" in bad.output


def test_daemon_that_cannot_start_says_why(tmp_path, qmdlab_home, require):
    require.module("uvicorn", "the HTTP MCP server needs the 'mcp' extra")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nheron\n", encoding="utf-8")
    idx = str(tmp_path / "idx")
    assert CliRunner().invoke(cli, ["--index", idx, "collection", "add", str(notes), "--name", "n"]).exit_code == 0
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = CliRunner().invoke(cli, ["--index", idx, "mcp", "--daemon", "--port", str(port), "--preset", "fake"])
    from qmdlab.mcp_server.daemon import log_file, pid_file

    assert res.exit_code == 1 and "exited at start" in res.output and str(log_file(idx)) in res.output
    assert "in use" in res.output.lower()  # the server's own reason, from its log
    assert not pid_file(idx).exists()


def test_skill_show_and_install(tmp_path, monkeypatch):
    from qmdlab.mcp_server.instructions import TOOL_GUIDE

    runner = CliRunner()
    shown = runner.invoke(cli, ["skill", "show"])
    assert shown.exit_code == 0 and shown.output.startswith("---\nname: qmdlab\ndescription: ")
    assert TOOL_GUIDE[0] in shown.output  # the same tool guide the MCP server's instructions give
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(cli, ["skill", "install", "--yes"])
    assert res.exit_code == 0, res.output
    skill = tmp_path / ".agents" / "skills" / "qmdlab" / "SKILL.md"
    assert skill.read_text() == shown.output
    link = tmp_path / ".claude" / "skills" / "qmdlab"
    assert link.is_symlink() and (link / "SKILL.md").read_text() == shown.output
    assert "up to date" in runner.invoke(cli, ["skill", "install", "--yes"]).output
    skill.write_text("my own skill\n")
    res = runner.invoke(cli, ["skill", "install"])
    assert res.exit_code == 1 and "exists with other content" in res.output and "--force" in res.output
    assert skill.read_text() == "my own skill\n"  # never replaced without --force
    assert runner.invoke(cli, ["skill", "install", "--force"]).exit_code == 0
    assert skill.read_text() == shown.output
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    res = runner.invoke(cli, ["skill", "install", "--global"])
    assert res.exit_code == 0 and (tmp_path / "home" / ".agents" / "skills" / "qmdlab" / "SKILL.md").is_file()
