"""Every experiment and benchmark script still imports against the library (they are not run).

An experiment is a one-off study, but its script must keep working for the next person who wants
to reproduce its README's figures: a renamed helper in the library fails here, not months later.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = (
    sorted(REPO.glob("experiments/*/run.py")) + sorted(REPO.glob("benchmarks/*.py")) + sorted(REPO.glob("scripts/*.py"))
)


def test_every_experiment_has_a_readme():
    folders = [p for p in (REPO / "experiments").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))]
    assert folders, "no experiments found"
    missing = [f.name for f in folders if not (f / "README.md").is_file() or not (f / "run.py").is_file()]
    assert not missing, f"each experiment folder needs README.md and run.py: {missing}"
    for f in folders:
        text = (f / "README.md").read_text(encoding="utf-8")
        for heading in ("**Question.**", "**Command.**", "**Result**"):
            assert heading in text, f"experiments/{f.name}/README.md lacks {heading}"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_script_imports(path, monkeypatch, require):
    monkeypatch.syspath_prepend(str(path.parent))
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    name = f"_script_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)  # top-level code only: every script guards main() by __name__
    except ImportError as err:  # a script of an extra (notebooks, eval, …) skips without it, naming it
        require.import_error(err)
    if "__main__" in path.read_text(encoding="utf-8"):
        assert hasattr(module, "main"), f"{path.relative_to(REPO)} has no main()"
