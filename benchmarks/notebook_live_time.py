"""Seconds from ``marimo edit|run notebooks/tune.py`` to live sliders, and from a control move to the
new nDCG@10 on screen, in headless Chromium.

The newcomer's path after ``make demo``: the command with no notebook arguments, the home's
recordings. Each launch starts the server, opens the page and waits until a weight slider and an
nDCG@10 number are shown (the browser test's probes). Then it moves each kind of control
``--moves`` times (default 10), back and forth between two settings whose nDCG@10 differ, and
times each move from the key press to the frame in which the new nDCG@10 text is on screen:

==========  ==============================  =================================================
kind        control (label on the page)     what a move re-runs
==========  ==============================  =================================================
fusion      weight: original BM25           re-fuse + re-blend + re-score (no index, no model)
rrf_k       RRF k                           the same
blend       position weight, band 1         re-blend + re-score (needs rerank scores)
stage       vector lists (switch)           drops/keeps the vector lists, then as fusion
bm25        title weight                    re-runs BM25 on every recorded BM25 list first
==========  ==============================  =================================================

The value a move must show is computed here first, from the same recording with the same library
calls as the notebook (:class:`qmdlab.eval.lexical.LexicalStudy`), so a move is only timed once
the page shows exactly that number, and a control whose neighbouring settings give the same
nDCG@10 is moved to the nearest pair of settings that differ. The blend knobs act on rerank
scores only: when the recording the page opens has none (``make demo``'s retrieval tier), the
blend control is measured on the first recording that has them (its LLM tier), picked in the
page's recording dropdown, and the table says which.

Timing: an in-page ``requestAnimationFrame`` loop notes when the nDCG@10 text changes and a
capture-phase listener when the key went down, both on the page's clock, so the figure is
key down -> first frame showing the new number (the round trip, the cells that run before the
headline, the page's render), not the driver's polling. Between moves it waits ``--gap`` seconds
so that each move starts from an idle kernel (the per-query views below the headline finish).

Goals on a quiet 2-core machine: median < 300 ms and worst < 600 ms for fusion, rrf_k, blend and
stage. The BM25 control re-runs BM25 (``qmdlab.pipeline.rerun_bm25``: one FTS5 query per recorded
BM25 list, ~2 ms per query on the default corpus) and re-codes the study's lists
(``qmdlab.pipeline.coded.CodedLists``) before the same re-fuse; it is bounded by that, so its goal is its own: median
< 800 ms, worst < 1.5 s on the default corpus.

It fails if the trace cache changed (the notebook must open what is recorded, not record).
Output: one line per launch and a table of min/median/max per control on stdout (with the 1-minute
load average), and ``--json PATH`` (every move's milliseconds, the load before and after, the
marimo version, the command).

    .venv/bin/python benchmarks/notebook_live_time.py --mode edit --json results/tune-live-edit.json
    .venv/bin/python benchmarks/notebook_live_time.py --mode run --home "$QMDLAB_HOME" --json results/tune-live-run.json
    .venv/bin/python benchmarks/notebook_live_time.py --controls fusion,stage --moves 4   # quicker
    .venv/bin/python benchmarks/notebook_live_time.py --gap 0.3   # moves back to back: the cells below
                                                                  # the headline still running count

The home needs ``make demo``'s two tiers (or any recording of the default suite; ``--limit N``
when it was recorded with the notebook's ``--limit``). Take published figures on a quiet machine
and give the 1-minute load printed beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.notebooks.conftest import CHROMIUM_FLAGS, _chromium_paths, free_port  # noqa: E402
from tests.notebooks.test_browser import FIND, _sliders, _stat_text  # noqa: E402

CHEAP = "return document.querySelectorAll('marimo-slider').length > 0 && document.querySelectorAll('marimo-stat').length > 0"


class LiveTimeError(RuntimeError):
    """The page did not do what a move asks (no new nDCG@10, a control missing, a recording made)."""


@dataclass(frozen=True)
class Control:
    """One kind of control the benchmark moves."""

    kind: str
    knob: str  # the notebook's knob name (optimise.apply_params vocabulary)
    label: str  # part of the control's label on the page
    tag: str  # marimo-slider or marimo-switch
    needs_rerank: bool = False


CONTROLS = {
    c.kind: c
    for c in (
        Control("fusion", "weight_original_fts", "weight: original BM25", "marimo-slider"),
        Control("rrf_k", "rrf_k", "RRF k", "marimo-slider"),
        Control("blend", "blend_weight_1", "position weight, band 1", "marimo-slider", needs_rerank=True),
        Control("stage", "vector", "vector lists", "marimo-switch"),
        Control("bm25", "bm25_weight_title", "title weight", "marimo-slider"),
    )
}
GOALS_MS = {"fusion": (300, 600), "rrf_k": (300, 600), "blend": (300, 600), "stage": (300, 600), "bm25": (800, 1500)}
"""(median, worst) goals in milliseconds on a quiet 2-core machine (see the module docstring)."""

# An in-page watcher: every animation frame, the nDCG@10 text (found again when the output was
# replaced); key downs and clicks noted in the capture phase. Both on performance.now().
WATCH = """
if (!window.__live) {
  const find = () => {
    function all(root) {
      let out = [...root.querySelectorAll('marimo-stat')];
      for (const el of root.querySelectorAll('*')) if (el.shadowRoot) out = out.concat(all(el.shadowRoot));
      return out;
    }
    return all(document).find(el => (el.getAttribute('data-label') || '').includes('nDCG@10')) || null;
  };
  const live = {log: [], input: []};
  window.__live = live;
  window.addEventListener('keydown', () => live.input.push(performance.now()), true);
  window.addEventListener('pointerdown', () => live.input.push(performance.now()), true);
  let el = null, last = null;
  const tick = () => {
    if (!el || !el.isConnected) el = find();
    const text = el ? (el.shadowRoot || el).textContent : null;
    if (text !== last) { last = text; live.log.push([performance.now(), text]); }
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
}
return true;
"""
SINCE = """
const [nLog, nInput] = arguments;
const live = window.__live;
return [live.input.slice(nInput), live.log.slice(nLog), live.log.length, live.input.length];
"""


def _trace_files(home: Path) -> dict[str, tuple[int, int]]:
    root = home / "eval"
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() and "traces" in p.parts
    }


class Expected:
    """nDCG@10 text the page must show for a knob setting, from the recording the page shows."""

    def __init__(self, suite_name: str, limit: int | None):
        from qmdlab.eval import choices, record, suites

        self.suite = suites.get_suite(suite_name)
        self.limit = limit
        self.available = record.recorded(self.suite)
        if not self.available:
            raise SystemExit(f"suite {suite_name}: nothing recorded in this home; run `make demo` first")
        labels, chosen = choices.picker_choices(self.available)
        self.open(next(r for r in self.available if r.label == chosen))
        del labels

    def open(self, rec) -> None:
        from qmdlab.eval import record
        from qmdlab.eval.lexical import LexicalStudy
        from qmdlab.eval.study import Study
        from qmdlab.store import Index

        self.recording = rec
        study = Study.from_recording(record.load_recorded(self.suite, rec.key, limit=self.limit))
        self.defaults = study.config
        self.n_queries = len(study.qids)
        self.study = LexicalStudy(study, Index.open(self.suite.workdir() / "index"))
        self._memo: dict[tuple, str] = {}

    def text(self, knob: str, value) -> str:
        from qmdlab.eval import optimise

        key = (knob, value)
        if key not in self._memo:
            cfg = optimise.apply_params(self.defaults, {knob: value})
            self._memo[key] = f"{self.study.evaluate(cfg).metrics['ndcg@10']:.4f}"
        return self._memo[key]

    def with_rerank(self):
        """The first recording whose configuration reranks (the blend knobs act on its scores)."""
        return next((r for r in self.available if r.config.rerank), None)


def _host(driver, control: Control):
    found = driver.execute_script(FIND, control.tag, control.label)
    if not found:
        raise LiveTimeError(f"no {control.tag} labelled {control.label!r} on the page")
    return found[0]


def _slider_state(driver, host) -> tuple[float, float, float, float]:
    """``(value, start, stop, step)`` of a marimo slider."""
    thumb = host.shadow_root.find_element("css selector", "[role=slider]")
    value = float(thumb.get_attribute("aria-valuenow"))
    return (
        value,
        float(host.get_attribute("data-start")),
        float(host.get_attribute("data-stop")),
        float(host.get_attribute("data-step")),
    )


def _round(x: float, step: float) -> float | int:
    digits = max(0, len(f"{step:.10g}".partition(".")[2]))
    return int(round(x)) if float(step).is_integer() else round(x, digits)


def _pair(expected: Expected, knob: str, value: float, lo: float, hi: float, step: float, reach: int = 40):
    """The nearest ``(a, a + step)`` within ``reach`` steps of ``value`` whose nDCG@10 texts differ."""
    for dist in range(reach):
        for a in (value + dist * step, value - (dist + 1) * step):
            b = a + step
            if a < lo - 1e-9 or b > hi + 1e-9:
                continue
            a, b = _round(a, step), _round(b, step)
            if expected.text(knob, a) != expected.text(knob, b):
                return a, b
    return None


def _shows(text: str | None, want: str) -> bool:
    """Whether the nDCG@10 stat's text (label, value, caption) has ``want`` as its value."""
    return (text or "").startswith(f"nDCG@10{want}")


class Page:
    """The page under the watcher: send input, wait for a text, read the key-down -> frame time."""

    def __init__(self, driver, poll: float, timeout: float):
        self.driver, self.poll, self.timeout = driver, poll, timeout
        driver.execute_script(WATCH)
        self.n_log, self.n_input = 0, 0
        self._sync()

    def _sync(self) -> list:
        inputs, log, self.n_log, self.n_input = self.driver.execute_script(SINCE, self.n_log, self.n_input)
        return [inputs, log]

    def shown(self) -> str:
        return _stat_text(self.driver, "nDCG@10") or ""

    def act(self, action, want: str) -> float:
        """Run ``action`` (a key press or click), wait until the nDCG@10 text holds ``want``;
        milliseconds from the input event to the first frame showing it."""
        self._sync()
        action()
        t0 = time.monotonic()
        inputs: list[float] = []
        while True:
            new_inputs, log = self._sync()
            inputs += new_inputs
            hit = next((t for t, text in log if _shows(text, want)), None)
            if hit is not None:
                if not inputs:
                    raise LiveTimeError("the page noted no input event for a move")
                return hit - inputs[0]
            if time.monotonic() - t0 > self.timeout:
                raise LiveTimeError(
                    f"nDCG@10 did not become {want} within {self.timeout:.0f} s (shown: {self.shown()!r})"
                )
            time.sleep(self.poll)

    def settle(self, want: str, gap: float) -> None:
        """Wait until the page shows ``want``, then ``gap`` seconds more (the cells below finish)."""
        t0 = time.monotonic()
        while not _shows(self.shown(), want):
            if time.monotonic() - t0 > self.timeout:
                raise LiveTimeError(f"nDCG@10 did not become {want} (shown: {self.shown()!r})")
            time.sleep(self.poll)
        time.sleep(gap)


def measure_control(driver, page: Page, expected: Expected, control: Control, moves: int, gap: float) -> dict:
    """Move one control ``moves`` times; returns its row (milliseconds per move, the settings used)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    host = _host(driver, control)
    if control.tag == "marimo-switch":
        button = host.shadow_root.find_element("css selector", "[role=switch]")
        state = button.get_attribute("aria-checked") == "true"
        values = (state, not state)
        if expected.text(control.knob, values[0]) == expected.text(control.knob, values[1]):
            return {"kind": control.kind, "skipped": "both settings give the same nDCG@10 on this recording"}

        def press(_i):
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", button)
            ActionChains(driver).move_to_element(button).click().perform()

        targets = [values[(i + 1) % 2] for i in range(moves)]
    else:
        value, lo, hi, step = _slider_state(driver, host)
        pair = _pair(expected, control.knob, _round(value, step), lo, hi, step)
        if pair is None:
            return {"kind": control.kind, "skipped": "no two neighbouring settings differ in nDCG@10 on this recording"}
        a, b = pair
        thumb = host.shadow_root.find_element("css selector", "[role=slider]")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].focus();", thumb)
        k = round((a - value) / step)
        if k:  # to the start of the pair, untimed
            ActionChains(driver).send_keys((Keys.ARROW_RIGHT if k > 0 else Keys.ARROW_LEFT) * abs(k)).perform()
            page.settle(expected.text(control.knob, a), gap)
        values = (a, b)

        def press(i):
            driver.execute_script("arguments[0].focus();", thumb)
            ActionChains(driver).send_keys(Keys.ARROW_RIGHT if i % 2 == 0 else Keys.ARROW_LEFT).perform()

        targets = [b if i % 2 == 0 else a for i in range(moves)]
    driver.execute_script("window.scrollTo(0, 0);")  # the headline in view
    print(f"  {control.kind}: {control.knob} {values[0]} <-> {values[1]}", file=sys.stderr, flush=True)
    ms = []
    for i, target in enumerate(targets):
        ms.append(page.act(lambda i=i: press(i), expected.text(control.knob, target)))
        time.sleep(gap)
    # Back to where it started (untimed): the next control's numbers assume this one at its default.
    if control.tag == "marimo-switch":
        if targets and targets[-1] != values[0]:
            press(0)
    else:
        back = round((value - (targets[-1] if targets else value)) / step)
        if back:
            driver.execute_script("arguments[0].focus();", thumb)
            ActionChains(driver).send_keys((Keys.ARROW_RIGHT if back > 0 else Keys.ARROW_LEFT) * abs(back)).perform()
    page.settle(expected.text("rrf_k", expected.defaults.rrf_k), gap)
    return {
        "kind": control.kind,
        "control": control.label,
        "knob": control.knob,
        "settings": list(values),
        "ndcg": [expected.text(control.knob, v) for v in values],
        "recording": expected.recording.label,
        "queries": expected.n_queries,
        "ms": ms,
    }


def _pick_recording(driver, page: Page, expected: Expected, rec, gap: float) -> None:
    """Choose ``rec`` in the page's recording dropdown and wait for its defaults' nDCG@10."""
    from selenium.webdriver.support.ui import Select

    host = _host(driver, Control("", "", "recording", "marimo-dropdown"))
    Select(host.shadow_root.find_element("css selector", "select")).select_by_visible_text(rec.label)
    expected.open(rec)
    page.settle(expected.text("rrf_k", expected.defaults.rrf_k), gap)
    # the controls were rebuilt at the new defaults: wait until they are live again
    t0 = time.monotonic()
    while not any(v is not None for v in _sliders(driver)):
        if time.monotonic() - t0 > page.timeout:
            raise LiveTimeError("the controls did not come back after changing the recording")
        time.sleep(page.poll)
    time.sleep(gap)


def launch(mode: str, notebook: Path, home: Path, work: Path, nb_args: list[str], env_extra: dict | None = None):
    """Start ``marimo <mode>`` on a free port; returns ``(process, url, started_at)``."""
    port = free_port()
    env = {
        **os.environ,
        "QMDLAB_HOME": str(home),
        "MPLBACKEND": "Agg",
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
        **(env_extra or {}),
    }
    cmd = [sys.executable, "-m", "marimo", "-y", mode, str(notebook), "--headless", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--no-token", "--no-sandbox"]
    if nb_args:
        cmd += ["--", *nb_args]
    t0 = time.monotonic()
    with open(work / f"server-{port}.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, f"http://127.0.0.1:{port}/", t0, work / f"server-{port}.log"


def wait_live(driver, poll: float, timeout: float) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout, poll_frequency=poll).until(
        lambda d: (
            d.execute_script(CHEAP)
            and any(v is not None for v in _sliders(d))
            and "." in (_stat_text(d, "nDCG@10") or "")
        )
    )


def drive(driver, expected: Expected, kinds: list[str], moves: int, gap: float, poll: float, timeout: float) -> list:
    """Measure each control kind on a live page; returns one row per kind (in ``kinds`` order)."""
    page = Page(driver, poll, timeout)
    page.settle(expected.text("rrf_k", expected.defaults.rrf_k), gap)
    rows = {}
    # controls that need rerank scores last: they may switch the page to another recording
    for kind in sorted(kinds, key=lambda k: CONTROLS[k].needs_rerank):
        control = CONTROLS[kind]
        if control.needs_rerank and not expected.defaults.rerank:
            rec = expected.with_rerank()
            if rec is None:
                rows[kind] = {"kind": kind, "skipped": "no recording with rerank scores (make demo's LLM tier)"}
                continue
            _pick_recording(driver, page, expected, rec, gap)
        rows[kind] = measure_control(driver, page, expected, control, moves, gap)
    return [rows[k] for k in kinds]


def once(args, home: Path, expected: Expected) -> dict:
    """One launch: the page's load times and every control's moves."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    before = _trace_files(home)
    nb_args = ["--limit", str(args.limit)] if args.limit else []
    proc, url, t0, log = launch(args.mode, args.notebook.resolve(), home, args.work, nb_args)
    driver = None
    try:
        while True:
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() - t0 > args.timeout:
                    raise SystemExit(f"marimo did not answer; see {log}") from None
                time.sleep(0.2)
        browser, driver_path = _chromium_paths()
        if not (browser and driver_path):
            raise SystemExit("Chromium or chromedriver is not installed (apt-get install chromium chromium-driver)")
        opts = webdriver.ChromeOptions()
        opts.binary_location = browser
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={args.work / f'profile-{time.monotonic_ns()}'}"):
            opts.add_argument(flag)
        driver = webdriver.Chrome(service=Service(driver_path), options=opts)
        driver.set_page_load_timeout(args.timeout)
        t1 = time.monotonic()
        driver.get(url)
        wait_live(driver, args.poll, args.timeout)
        t2 = time.monotonic()
        rows = drive(driver, expected, args.controls, args.moves, args.gap, args.poll, args.timeout)
    finally:
        if driver is not None:
            driver.quit()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    if _trace_files(home) != before:
        raise LiveTimeError("the notebook changed the trace cache (it recorded): it must open what is recorded")
    return {"page_to_sliders_s": t2 - t1, "command_to_sliders_s": t2 - t0, "controls": rows}


def table(rows: list[dict]) -> str:
    """min/median/max per control kind (over every launch's moves) against the goals."""
    lines = [
        f"{'control':<8} {'label':<26} {'moves':>5} {'min':>7} {'median':>7} {'max':>7}  goal (median/max)  recording",
    ]
    for kind in dict.fromkeys(r["kind"] for r in rows):
        mine = [r for r in rows if r["kind"] == kind]
        ms = [m for r in mine if "ms" in r for m in r["ms"]]
        goal = GOALS_MS[kind]
        if not ms:
            lines.append(f"{kind:<8} skipped: {mine[0].get('skipped')}")
            continue
        med, worst = statistics.median(ms), max(ms)
        ok = "ok" if med < goal[0] and worst < goal[1] else "MISSED"
        rec = f"{mine[0]['recording']} ({mine[0]['queries']} queries)"
        lines.append(
            f"{kind:<8} {mine[0]['control']:<26} {len(ms):>5} {min(ms):>5.0f}ms {med:>5.0f}ms {worst:>5.0f}ms"
            f"  < {goal[0]}/{goal[1]} ms {ok:<6}  {rec}"
        )
    return "\n".join(lines)


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
    ap.add_argument("--launches", type=int, default=1, help="server starts (each measures every control)")
    ap.add_argument("--moves", type=int, default=10, help="moves per control per launch")
    ap.add_argument(
        "--controls",
        type=lambda s: [k.strip() for k in s.split(",") if k.strip()],
        default=list(CONTROLS),
        help=f"comma-separated kinds (default: all of {','.join(CONTROLS)})",
    )
    ap.add_argument(
        "--gap", type=float, default=1.5, help="seconds between moves (the kernel finishes the cells below)"
    )
    ap.add_argument("--limit", type=int, default=None, help="the notebook's --limit (only the first N judged queries)")
    ap.add_argument("--poll", type=float, default=0.05, help="seconds between reads of the page's watcher")
    ap.add_argument("--timeout", type=float, default=400)
    ap.add_argument("--json", type=Path, default=None, help="write every move's milliseconds here")
    ap.add_argument(
        "--work",
        type=Path,
        default=Path(tempfile.gettempdir()) / "qmdlab-notebook-live-time",
        help="server logs and browser profiles",
    )
    args = ap.parse_args(argv)
    unknown = [k for k in args.controls if k not in CONTROLS]
    if unknown:
        ap.error(f"--controls: unknown kind(s) {', '.join(unknown)}; choose from {', '.join(CONTROLS)}")
    home = args.home or Path(os.environ.get("QMDLAB_HOME") or Path.home() / ".cache" / "qmdlab")
    if not (home / "eval").is_dir():
        ap.error(f"--home {home}: no eval/ recordings there; run `make demo` (or scripts/demo.py) first")
    os.environ["QMDLAB_HOME"] = str(home)  # the in-process study reads the same recordings
    args.work.mkdir(parents=True, exist_ok=True)
    import marimo

    launches, all_rows = [], []
    for i in range(args.launches):
        load = os.getloadavg()[0]
        expected = Expected("default", args.limit)
        try:
            got = once(args, home, expected)
        except LiveTimeError as err:
            print(f"notebook_live_time: {err}", file=sys.stderr)
            return 1
        got["load_1min"] = [load, os.getloadavg()[0]]
        launches.append(got)
        all_rows += got["controls"]
        print(
            f"{i + 1}/{args.launches} marimo {args.mode} {args.notebook.name}: page load -> sliders "
            f"{got['page_to_sliders_s']:.1f} s, command -> sliders {got['command_to_sliders_s']:.1f} s "
            f"(1-min load {load:.1f} -> {got['load_1min'][1]:.1f})",
            flush=True,
        )
    print(f"\ncontrol move -> new nDCG@10 on screen, marimo {args.mode} (marimo {marimo.__version__}):")
    print(table(all_rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "command": [sys.executable, *sys.argv] if argv is None else ["notebook_live_time.py", *argv],
            "mode": args.mode,
            "marimo": marimo.__version__,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "goals_ms": GOALS_MS,
            "launches": launches,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
