"""docs/reference/ is generated from the code and kept complete: every PipelineConfig field has a
description and a stage group, every QMDLAB_* variable the code reads is listed, and the committed
pages equal what scripts/gen_reference.py writes now."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from qmdlab.environment import ENVIRONMENT
from qmdlab.pipeline.config import PipelineConfig

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gen_reference", REPO / "scripts" / "gen_reference.py")
gen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)


def test_every_config_field_has_a_description():
    desc = gen.config_descriptions()
    missing = [f.name for f in fields(PipelineConfig) if not desc.get(f.name)]
    assert not missing, f"PipelineConfig fields without a description in its docstring: {missing}"


def test_every_config_field_declares_a_known_stage_and_the_page_lists_it():
    from qmdlab.pipeline.config import CONFIG_STAGES

    staged = [n for names in PipelineConfig.stage_fields().values() for n in names]
    assert sorted(staged) == sorted(PipelineConfig.field_names())
    assert set(PipelineConfig.stage_fields()) == set(CONFIG_STAGES)
    page = gen.page_config()
    for stage, title in CONFIG_STAGES.items():
        assert f"## {title}" in page
    assert "| `rrf_k` | `60` | no |" in page and "| `bm25_mode` | `'or'` | yes |" in page


def test_every_environment_variable_read_is_listed():
    files = subprocess.run(
        ["git", "ls-files", "qmdlab", "notebooks", "scripts", "Makefile", ".ci/run", "tests"],
        cwd=REPO,
        capture_output=True,
        text=True,
    ).stdout.split()
    if not files:
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    seen: dict[str, str] = {}
    for f in files:
        path = REPO / f
        if path.is_file() and path.suffix in (".py", "") and f != "qmdlab/environment.py":
            for name in re.findall(
                r"QMDLAB_[A-Z][A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8", errors="ignore")
            ):
                seen.setdefault(name, f)
    missing = {n: f for n, f in seen.items() if n not in ENVIRONMENT}
    assert not missing, f"list these in qmdlab/environment.py ENVIRONMENT: {missing}"


def test_committed_reference_pages_are_current():
    """Rendered in a fresh interpreter with no QMDLAB_* variables set: a page must not depend on what
    other tests imported, registered or exported before this one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QMDLAB_") and k != "COLUMNS"}
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_reference.py"), "--check"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
