"""tune.py opened with ``marimo edit`` (what ``make demo`` tells a newcomer to run) and driven in
headless Chromium: once a suite is recorded the page shows live sliders by opening that recording —
the notebook records nothing itself (no file of the trace cache is added or changed) — a slider
moves and nDCG follows; the optimiser button loads its tuned config into the controls.

How long the page takes to become live is printed, not asserted (it depends on the machine;
``benchmarks/notebook_live_time.py`` measures it). Artefacts in the test's tmp dir, copied to the
git-ignored ``results/screenshots/``: ``tune-live.png`` (the page as it opens, sliders live; with
``QMDLAB_UPDATE_SCREENSHOT=1`` also written to ``docs/img/tune-live.png``, the README's picture —
the test suite never changes a tracked file otherwise),
``tune.png`` (after the slider step), ``tune-optimised.png`` (after the optimiser), or
``tune-failure.png`` plus ``tune.html`` (tmp dir only) when the test fails.
"""

from __future__ import annotations

import os
import shutil
import time

import polars as pl
import pytest

from .conftest import NB_ARGS, NOTEBOOKS, RECORD_ARGS, REPO, RESULTS

pytestmark = pytest.mark.extra("notebooks")  # the notebooks run in marimo

README_SHOT = REPO / "docs" / "img" / "tune-live.png"


@pytest.fixture(scope="module")
def nb_home(tmp_path_factory):
    """A home of its own: the page must show the number of the recording made here, and the picker
    opens the recording with the most queries, which another notebook test may have left in a
    shared home (in whatever order the tests run)."""
    return tmp_path_factory.mktemp("browser-qmdlab-home")


"""The live notebook as the browser test sees it, shown in the README."""

# marimo renders UI elements inside custom elements with shadow roots; search through them.
FIND = """
const [tag, labelPart] = arguments;
function all(root) {
  let out = [...root.querySelectorAll(tag)];
  for (const el of root.querySelectorAll('*')) if (el.shadowRoot) out = out.concat(all(el.shadowRoot));
  return out;
}
return all(document).filter(el => (el.getAttribute('data-label') || '').includes(labelPart));
"""
STAT_VALUE = """
const el = arguments[0];
return (el.shadowRoot || el).textContent;
"""


def _stat_text(driver, label: str) -> str | None:
    found = driver.execute_script(FIND, "marimo-stat", label)
    return driver.execute_script(STAT_VALUE, found[0]) if found else None


SLIDER_VALUES = """
function all(root) {
  let out = [...root.querySelectorAll('marimo-slider')];
  for (const el of root.querySelectorAll('*')) if (el.shadowRoot) out = out.concat(all(el.shadowRoot));
  return out;
}
return all(document).filter(h => !(h.getAttribute('data-label') || '').includes('folds')).map(h => {
  const thumb = h.shadowRoot && h.shadowRoot.querySelector('[role=slider]');
  return thumb ? thumb.getAttribute('aria-valuenow') : null;   // null: inside a closed accordion
});
"""


SHOW_PATH_IN_CHECKOUT = """
const want = arguments[0];
for (const el of document.querySelectorAll('input')) if ((el.value || '').endsWith('/' + want)) el.value = want;
for (const el of document.querySelectorAll('*'))
  if (el.children.length === 0 && (el.textContent || '').trim().endsWith('/' + want)) el.textContent = want;
"""
"""The editor's title shows the notebook's absolute path; the picture shows its path in the checkout."""


PAGE_TEXT = """
function text(root) {
  let out = root.textContent || '';
  for (const el of root.querySelectorAll('*')) if (el.shadowRoot) out += ' ' + text(el.shadowRoot);
  return out;
}
return text(document.body);
"""


def _sliders(driver) -> list[str | None]:
    """Values of the fusion/blend sliders (the optimiser's knobs)."""
    return driver.execute_script(SLIDER_VALUES)


def time_to_sliders(driver, url: str, timeout: float = 300) -> float:
    """Open ``url`` and return the seconds until the tune page shows a live weight slider and an
    nDCG@10 number (what a newcomer waits for)."""
    from selenium.webdriver.support.ui import WebDriverWait

    t0 = time.monotonic()
    driver.get(url)
    WebDriverWait(driver, timeout, poll_frequency=0.25).until(
        lambda d: any(v is not None for v in _sliders(d)) and "." in (_stat_text(d, "nDCG@10") or "")
    )
    return time.monotonic() - t0


def _trace_files() -> dict[str, tuple[int, int]]:
    """Every file of the default suite's trace cache: relative path -> (size, mtime_ns)."""
    from qmdlab.eval import record
    from qmdlab.eval.suites import get_suite

    root = record.cache_root(get_suite("default"))
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow
@pytest.mark.browser
def test_moving_a_weight_slider_changes_the_displayed_ndcg(marimo_server, chrome, tmp_path, nb_env, monkeypatch):
    import marimo as mo
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    from .conftest import run_notebook

    # What the page must show, from the same notebook run in-process (whose numbers the
    # in-process tests check against the eval API); this also records the traces the
    # server then loads from the cache. One step right on "weight: original BM25": 2.0 -> 2.1.
    _, plain = run_notebook(NOTEBOOKS / "tune.py", *RECORD_ARGS, monkeypatch=monkeypatch)
    _, moved = run_notebook(
        NOTEBOOKS / "tune.py",
        *NB_ARGS,
        monkeypatch=monkeypatch,
        defs={"knobs": mo.ui.dictionary({"weight_original_fts": mo.ui.slider(0.0, 4.0, step=0.1, value=2.1)})},
    )
    assert plain["start"].weight_original_fts == 2.0
    before, after = plain["evaluation"].metrics["ndcg@10"], moved["evaluation"].metrics["ndcg@10"]
    assert f"{before:.4f}" != f"{after:.4f}"

    # The editor a newcomer opens, not asked to record (no --record): it must open the recording
    # made above and leave the trace cache as it is.
    recorded = _trace_files()
    assert recorded, "the in-process run recorded nothing"
    started = time.monotonic()
    url = marimo_server(NOTEBOOKS / "tune.py", *NB_ARGS, mode="edit")
    driver = chrome
    shot = tmp_path / "tune.png"
    try:
        waited = time_to_sliders(driver, url)
        print(
            f"marimo edit tune.py: live sliders {waited:.1f} s after page load, "
            f"{time.monotonic() - started:.1f} s after the command (1-min load {os.getloadavg()[0]:.1f})"
        )
        assert _trace_files() == recorded, "opening the notebook recorded traces"
        driver.execute_script("window.scrollTo(0, 0);")  # the first screen: title, recording, nDCG cards
        driver.execute_script(SHOW_PATH_IN_CHECKOUT, "notebooks/tune.py")  # not this machine's folders
        time.sleep(1.5)  # let the plots draw
        driver.save_screenshot(str(tmp_path / "tune-live.png"))
        wait = WebDriverWait(driver, 90, poll_frequency=0.25)
        wait.until(lambda d: f"{before:.4f}" in (_stat_text(d, "nDCG@10") or ""))
        host = wait.until(lambda d: (d.execute_script(FIND, "marimo-slider", "original BM25") or [None])[0])
        thumb = host.shadow_root.find_element("css selector", "[role=slider]")
        assert thumb.get_attribute("aria-valuenow") == "2"
        controls = _sliders(driver)
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].focus();", thumb)
        ActionChains(driver).send_keys(Keys.ARROW_RIGHT).perform()
        wait.until(lambda d: f"{after:.4f}" in (_stat_text(d, "nDCG@10") or ""))
        assert thumb.get_attribute("aria-valuenow") == "2.1"
        text = _stat_text(driver, "nDCG@10")
        assert f"{after - before:+.4f} vs defaults" in text
        driver.execute_script("window.scrollTo(0, 0);")
        time.sleep(1.5)  # let the re-drawn plot replace the stale one
        driver.save_screenshot(str(shot))

        # The per-query table is built when its accordion opens: it lists the moved config's
        # changed queries, the worst first (the same rows as the in-process run's table).
        worst = moved["per_query_delta"].filter(pl.col("delta").abs() > 1e-12)["qid"][0]
        assert worst not in driver.execute_script(PAGE_TEXT)
        trigger = next(b for b in driver.execute_script(FIND, "button", "") if "per-query table" in b.text)
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].click();", trigger)
        wait.until(lambda d: worst in d.execute_script(PAGE_TEXT))

        # The optimiser (2 folds) loads its tuned config into the controls.
        folds = driver.execute_script(FIND, "marimo-slider", "folds")[0].shadow_root.find_element(
            "css selector", "[role=slider]"
        )
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'}); arguments[0].focus();", folds)
        ActionChains(driver).send_keys(Keys.HOME).perform()
        wait.until(lambda d: folds.get_attribute("aria-valuenow") == "2")
        button = next(b for b in driver.execute_script(FIND, "button", "") if b.text.strip() == "Optimise")
        driver.execute_script("arguments[0].click();", button)
        WebDriverWait(driver, 150, poll_frequency=0.5).until(
            lambda d: "over 2 folds" in d.execute_script("return document.body.innerText")
        )
        tuned = _sliders(driver)
        assert tuned != controls, "the tuned config was not loaded into the controls"
        time.sleep(1.5)
        driver.save_screenshot(str(tmp_path / "tune-optimised.png"))
        # moving sliders and optimising re-score the recording: still nothing recorded
        assert _trace_files() == recorded, "the notebook recorded traces"
    except Exception:
        driver.save_screenshot(str(tmp_path / "tune-failure.png"))
        (tmp_path / "tune.html").write_text(driver.page_source, encoding="utf-8")
        raise
    finally:
        (RESULTS / "screenshots").mkdir(parents=True, exist_ok=True)
        for name in ("tune-live.png", "tune.png", "tune-optimised.png", "tune-failure.png"):
            if (tmp_path / name).exists():
                shutil.copy(tmp_path / name, RESULTS / "screenshots" / name)
            else:  # no stale artefact from an earlier run
                (RESULTS / "screenshots" / name).unlink(missing_ok=True)
    assert shot.stat().st_size > 10_000 and (tmp_path / "tune-live.png").stat().st_size > 10_000
    if os.environ.get("QMDLAB_UPDATE_SCREENSHOT") == "1":
        shutil.copy(tmp_path / "tune-live.png", README_SHOT)


def _live_time_module():
    """benchmarks/notebook_live_time.py (it imports this module's probes, so it is loaded late)."""
    import importlib.util
    import sys

    path = REPO / "benchmarks" / "notebook_live_time.py"
    spec = importlib.util.spec_from_file_location("notebook_live_time", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.parametrize("mode", ["run", "edit"])
def test_every_kind_of_control_moves_the_displayed_ndcg(mode, marimo_server, chrome, nb_env, monkeypatch):
    """``marimo run`` and ``marimo edit``: a fusion weight, RRF k, a blend weight, a stage switch and a
    BM25 weight each moved back and forth; after every move the page must show the nDCG@10 that
    the same recording gives under the moved config (computed here with LexicalStudy) — it fails
    when the number does not change, or changes to another value. The move times are printed,
    not asserted (benchmarks/notebook_live_time.py measures them)."""
    from .conftest import LIMIT, run_notebook

    live = _live_time_module()
    run_notebook(NOTEBOOKS / "tune.py", *RECORD_ARGS, monkeypatch=monkeypatch)  # records the traces (cached)
    recorded = _trace_files()
    expected = live.Expected("default", LIMIT)
    assert expected.n_queries == LIMIT
    url = marimo_server(NOTEBOOKS / "tune.py", *NB_ARGS, mode=mode)
    chrome.get(url)
    live.wait_live(chrome, 0.25, 300)
    kinds = list(live.CONTROLS)
    rows = live.drive(chrome, expected, kinds, moves=2, gap=0.5, poll=0.05, timeout=90)
    print(f"marimo {mode}, move -> new nDCG@10 (ms, 1-min load {os.getloadavg()[0]:.1f}):")
    for row in rows:
        print(f"  {row['kind']}: {row.get('ms') or row.get('skipped')}")
    by_kind = {r["kind"]: r for r in rows}
    assert set(by_kind) == set(kinds)
    for kind in kinds:
        row = by_kind[kind]
        assert "skipped" not in row, f"{kind}: {row.get('skipped')}"
        assert len(row["ms"]) == 2 and row["ndcg"][0] != row["ndcg"][1]
    assert _trace_files() == recorded, "moving the controls recorded traces"
