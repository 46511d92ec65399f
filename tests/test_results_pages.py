"""Every docs/results page says how it was made with commands a user can run from a checkout: each
names its command, commit and machine, and no command reaches for a tool outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
PAGES = sorted(RESULTS.glob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_no_command_reaches_outside_the_repository(page):
    text = page.read_text(encoding="utf-8")
    outside = [m.group(0) for m in re.finditer(r"\.\./shared/(?!data\b)[\w./-]+", text)]
    assert not outside, f"{page.name}: {outside} is not part of the repository"
    bare = [m.start() for m in re.finditer(r"(?<![\w/])quiet-run(?![\w.-]*\.log)", text)]
    assert not bare, f"{page.name}: write `scripts/quiet-run` (the repository's), not a bare quiet-run"


def test_quiet_run_is_in_the_repository():
    script = RESULTS.parents[1] / "scripts" / "quiet-run"
    assert script.is_file() and script.stat().st_mode & 0o111


def named_run_files(text: str) -> list[str]:
    """The run files a page names, as paths under docs/results: ``runs/<name>.trec`` (in the page's own
    folder, passed in as ``<topic>/``-less text and resolved by the caller) and ``<topic>/runs/<name>.trec``.

    >>> named_run_files("`runs/a.trec`, scifact/runs/b-c.trec, docs/results/med/runs/d.trec; not runs/x/y.trec")
    ['docs/results/med/runs/d.trec', 'runs/a.trec', 'scifact/runs/b-c.trec']
    """
    found = re.findall(r"(?<![\w.-])((?:docs/results/)?(?:[\w-]+/)?runs/[\w.+-]+\.trec)\b", text)
    return sorted(set(found))


def _resolve(page: Path, rel: str) -> Path:
    if rel.startswith("docs/results/"):
        return RESULTS.parents[1] / rel
    if rel.startswith("runs/"):
        return page.with_suffix("") / rel
    return RESULTS / rel


@pytest.mark.parametrize(
    "page", [p for p in PAGES if named_run_files(p.read_text(encoding="utf-8"))], ids=lambda p: p.name
)
def test_every_run_file_a_page_names_is_committed(page):
    """A headline figure's run file must travel with the repository: present where the page says and not
    ignored by git (a ``runs/`` ignore rule once kept every SciFact run file out of the commits)."""
    import subprocess

    named = [_resolve(page, rel) for rel in named_run_files(page.read_text(encoding="utf-8"))]
    missing = [str(p) for p in named if not p.is_file()]
    assert not missing, f"{page.name} names run files that are not there: {missing}"
    ignored = subprocess.run(
        ["git", "check-ignore", *map(str, named)], cwd=RESULTS, capture_output=True, text=True
    ).stdout.split()
    assert not ignored, f"{page.name}: these run files are ignored by git, so they never reach a commit: {ignored}"
