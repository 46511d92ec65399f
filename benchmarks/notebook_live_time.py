"""Seconds from ``marimo edit notebooks/tune.py`` (or ``run``) to live sliders, in headless Chromium.

The newcomer's path after ``make demo``: the command with no notebook arguments, the home's
recordings. Each repeat starts the server, opens the page and waits until a weight slider and an
nDCG@10 number are shown (the browser test's probes), then moves "weight: original BM25" one step
and waits until the nDCG@10 shown changes. It fails if the trace cache changed (the notebook must
open what is recorded, not record). Prints one line per repeat (with the 1-minute load average)
and min/median at the end.

    .venv/bin/python benchmarks/notebook_live_time.py --mode edit --repeats 5
    .venv/bin/python benchmarks/notebook_live_time.py --mode run --home "$QMDLAB_HOME"
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.notebooks.conftest import CHROMIUM_FLAGS, _chromium_paths, free_port  # noqa: E402
from tests.notebooks.test_browser import FIND, _sliders, _stat_text  # noqa: E402

CHEAP = "return document.querySelectorAll('marimo-slider').length > 0 && document.querySelectorAll('marimo-stat').length > 0"


def _trace_files(home: Path) -> dict[str, tuple[int, int]]:
    root = home / "eval"
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() and "traces" in p.parts
    }


def once(mode: str, notebook: Path, home: Path, work: Path, poll: float, timeout: float) -> tuple[float, float, float]:
    """One launch: ``(page load -> sliders, command -> sliders, slider move -> new nDCG)`` seconds."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    before = _trace_files(home)
    port = free_port()
    env = {
        **os.environ,
        "QMDLAB_HOME": str(home),
        "MPLBACKEND": "Agg",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
    }
    cmd = [
        sys.executable,
        "-m",
        "marimo",
        "-y",
        mode,
        str(notebook),
        "--headless",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-token",
        "--no-sandbox",
    ]
    t0 = time.monotonic()
    with open(work / f"server-{port}.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    driver = None
    try:
        url = f"http://127.0.0.1:{port}/"
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() - t0 > timeout:
                    raise SystemExit(f"marimo did not answer; see {work / f'server-{port}.log'}")
                time.sleep(0.2)
        browser, driver_path = _chromium_paths()
        opts = webdriver.ChromeOptions()
        opts.binary_location = browser
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={work / f'profile-{port}'}"):
            opts.add_argument(flag)
        driver = webdriver.Chrome(service=Service(driver_path), options=opts)
        driver.set_page_load_timeout(timeout)
        t1 = time.monotonic()
        driver.get(url)
        WebDriverWait(driver, timeout, poll_frequency=poll).until(
            lambda d: (
                d.execute_script(CHEAP)
                and any(v is not None for v in _sliders(d))
                and "." in (_stat_text(d, "nDCG@10") or "")
            )
        )
        t2 = time.monotonic()
        shown = _stat_text(driver, "nDCG@10")
        thumb = driver.execute_script(FIND, "marimo-slider", "original BM25")[0].shadow_root.find_element(
            "css selector", "[role=slider]"
        )
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].focus();", thumb)
        ActionChains(driver).send_keys(Keys.ARROW_RIGHT).perform()
        WebDriverWait(driver, timeout, poll_frequency=poll).until(
            lambda d: (_stat_text(d, "nDCG@10") or shown) != shown
        )
        t3 = time.monotonic()
    finally:
        if driver is not None:
            driver.quit()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    if _trace_files(home) != before:
        raise SystemExit("the notebook changed the trace cache (it recorded): it must open what is recorded")
    return t2 - t1, t2 - t0, t3 - t2


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("edit", "run"), default="edit")
    ap.add_argument("--notebook", type=Path, default=REPO / "notebooks" / "tune.py")
    ap.add_argument(
        "--home",
        type=Path,
        default=None,
        help="QMDLAB_HOME with make demo's recordings (default: $QMDLAB_HOME or ~/.cache/qmdlab)",
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--poll", type=float, default=0.5, help="seconds between page probes")
    ap.add_argument("--timeout", type=float, default=400)
    ap.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "qmdlab-notebook-live-time",
        help="server logs and browser profiles",
    )
    args = ap.parse_args(argv)
    home = args.home or Path(os.environ.get("QMDLAB_HOME") or Path.home() / ".cache" / "qmdlab")
    if not (home / "eval").is_dir():
        ap.error(f"--home {home}: no eval/ recordings there; run `make demo` (or scripts/demo.py) first")
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(args.repeats):
        load = os.getloadavg()[0]
        page, command, move = once(args.mode, args.notebook.resolve(), home, args.work, args.poll, args.timeout)
        rows.append((page, command, move))
        print(
            f"{i + 1}/{args.repeats} marimo {args.mode} {args.notebook.name}: page load -> sliders {page:.1f} s, "
            f"command -> sliders {command:.1f} s, slider move -> new nDCG {move:.1f} s "
            f"(1-min load {load:.1f} -> {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    for j, name in enumerate(("page load -> sliders", "command -> sliders", "slider move -> new nDCG")):
        values = [r[j] for r in rows]
        print(f"{name}: min {min(values):.1f} s, median {statistics.median(values):.1f} s, max {max(values):.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
