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
