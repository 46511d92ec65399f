"""Fixtures shared by every test area. Area-specific fixtures live in tests/<area>/conftest.py."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _find_cisi() -> Path:
    """$QMDLAB_CISI_DIR, else ``shared/data/cisi`` beside the checkout or beside any parent folder."""
    if os.environ.get("QMDLAB_CISI_DIR"):
        return Path(os.environ["QMDLAB_CISI_DIR"])
    for parent in REPO.parents:
        candidate = parent / "shared" / "data" / "cisi"
        if (candidate / "CISI.ALL").exists():
            return candidate
    return REPO.parent / "shared" / "data" / "cisi"


CISI_DIR = _find_cisi()
DEFAULT_CORPUS = REPO / "data" / "corpus"


@pytest.fixture
def qmdlab_home(tmp_path, monkeypatch) -> Path:
    """An isolated QMDLAB_HOME (indexes) for one test; the model cache is left alone."""
    home = tmp_path / "qmdlab-home"
    monkeypatch.setenv("QMDLAB_HOME", str(home))
    monkeypatch.delenv("QMDLAB_INDEX", raising=False)
    return home


@pytest.fixture(scope="session")
def cisi_dir() -> Path:
    if not (CISI_DIR / "CISI.ALL").exists():
        pytest.skip(f"CISI collection not present at {CISI_DIR} (set QMDLAB_CISI_DIR); it is not shipped with qmdlab")
    return CISI_DIR


@pytest.fixture(scope="session")
def default_corpus() -> Path:
    return DEFAULT_CORPUS
