"""Harness for the marimo notebooks: headless runs, a ``marimo run`` server, headless Chromium.

Three ways a notebook is exercised, each of which fails the test when any cell raises:

* :func:`run_notebook` — in-process ``app.run()`` (marimo's script runner, the path of
  ``python notebooks/x.py``). A cell exception propagates; cells halted by ``mo.stop``
  do not. Returns the cells' definitions so tests can check the numbers shown.
* :func:`export_html` — ``marimo export html`` in a subprocess, the CI/command-line path;
  marimo exits non-zero when a cell fails ("some cells failed to execute").
* :func:`marimo_server` + :func:`chrome` — ``marimo edit|run --headless`` on a free loopback
  port driven by Debian's Chromium through selenium + chromedriver.

Notebooks are run on the default corpus with the deterministic ``fake`` model preset in
an isolated ``QMDLAB_HOME`` shared by the tests of this directory (the index is built once).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
RESULTS = REPO / "results"
LIMIT = 40
NB_ARGS = ("--suite", "default", "--preset", "fake", "--limit", str(LIMIT))
"""The CLI arguments every test passes: the default corpus, the fake models, and only its
first LIMIT judged queries where a notebook records the whole suite (tune, evaluate)."""
RECORD_ARGS = (*NB_ARGS, "--record")
"""``NB_ARGS`` plus ``--record``: tune/evaluate record what is missing without the button
(a headless run cannot click); without it they only open what is recorded already."""

CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1440,1800",
)


# -- environment ---------------------------------------------------------------------
@pytest.fixture(scope="session")
def nb_home(tmp_path_factory) -> Path:
    """One QMDLAB_HOME for the notebook tests (indexes and LLM caches live here)."""
    return tmp_path_factory.mktemp("nb-qmdlab-home")


@pytest.fixture
def nb_env(nb_home, monkeypatch) -> dict[str, str]:
    """Environment of a notebook run: isolated home, fake models, a non-GUI matplotlib."""
    # PYTHONPATH: the repository's packages (qmdlab, eval, training) import in subprocesses
    # even where the project is not pip-installed in editable mode.
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {"QMDLAB_HOME": str(nb_home), "QMDLAB_PRESET": "fake", "MPLBACKEND": "Agg", "PYTHONPATH": pythonpath}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("QMDLAB_INDEX", raising=False)
    return {**os.environ, **env}


# -- in-process run --------------------------------------------------------------------
def load_app(path: Path):
    """Import a notebook file as a fresh module and return its ``marimo.App``."""
    name = f"_nb_{path.stem}_{time.monotonic_ns()}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader, f"cannot import {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


def run_notebook(path: Path, *args: str, monkeypatch, defs: dict | None = None):
    """Run every cell of a notebook in this process; return ``(outputs, definitions)``.

    ``args`` are the notebook's CLI arguments (read by ``mo.cli_args()`` from ``sys.argv``,
    patched for the call); ``defs`` replaces the cells that define those names (e.g. a
    clicked ``run_button`` or a moved slider). Any exception raised by a cell propagates
    and fails the calling test.
    """
    monkeypatch.setattr(sys, "argv", [str(path), *args])
    return load_app(path).run(defs=defs)


# -- subprocess export -----------------------------------------------------------------
def export_html(
    path: Path, out: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess:
    """``marimo export html`` a notebook (cells executed) to ``out``; returns the process."""
    cmd = [
        sys.executable,
        "-m",
        "marimo",
        "-y",
        "export",
        "html",
        str(path),
        "-o",
        str(out),
        "--force",
        "--no-sandbox",
        "--",
        *args,
    ]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


# -- marimo edit/run server ------------------------------------------------------------
def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"marimo exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        with contextlib.suppress(OSError, urllib.error.URLError):
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        time.sleep(0.25)
    raise RuntimeError(f"marimo did not answer at {url} within {timeout:.0f}s:\n{log.read_text()[-4000:]}")


@pytest.fixture
def marimo_server(nb_env, tmp_path):
    """Factory: ``start(notebook, *args, mode="run") -> url`` serving it with ``marimo <mode>``
    (``run``: the app view; ``edit``: the editor a newcomer opens) on loopback.

    The server runs in its own process group and is stopped (by that group's id) after
    the test; its log is ``server.log`` in the test's tmp dir.
    """
    started: list[subprocess.Popen] = []

    def start(path: Path, *args: str, mode: str = "run", timeout: float = 60) -> str:
        port = free_port()
        log = tmp_path / f"server-{port}.log"
        cmd = [
            sys.executable,
            "-m",
            "marimo",
            "-y",
            mode,
            # relative to the checkout (the server's cwd): the editor's title shows this path, and
            # the README's picture is taken from this page
            str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path),
            "--headless",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-token",
            "--no-sandbox",
            "--",
            *args,
        ]
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                cmd, cwd=REPO, env=nb_env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
            )
        started.append(proc)
        url = f"http://127.0.0.1:{port}/"
        _wait_http(url, proc, log, timeout)
        return url

    yield start
    for proc in started:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


# -- headless Chromium -----------------------------------------------------------------
def _chromium_paths() -> tuple[str | None, str | None]:
    browser = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser")) if p), None)
    return browser, shutil.which("chromedriver")


@pytest.fixture
def chrome(tmp_path, require):
    """A selenium WebDriver on Debian's headless Chromium with a fresh profile.

    Skips (with the reason) when selenium, chromium or chromedriver is absent — and fails
    instead under CI / QMDLAB_REQUIRE_ALL=1 (tests/conftest.py); `.ci/run` installs the Debian
    packages and `make setup` installs selenium (the dev extra).
    """
    webdriver = require.module("selenium.webdriver", "selenium is not installed (pip install -e '.[dev]')")
    from selenium.webdriver.chrome.service import Service

    browser, driver_path = _chromium_paths()
    require(
        browser and driver_path,
        "Chromium or chromedriver is not installed (apt-get install chromium chromium-driver); .ci/run installs them",
    )
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        opts.add_argument(flag)
    service = Service(driver_path, log_output=str(tmp_path / "chromedriver.log"))
    driver = webdriver.Chrome(service=service, options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
