"""mypy (``make lint``) checks the whole product: every folder the wheel installs from, with no
module exempted from its errors."""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def test_mypy_covers_every_installed_package():
    project = _pyproject()
    # the packages the wheel installs are folders of the one top-level package, and mypy checks it whole
    packages = project["tool"]["setuptools"]["packages"]
    assert "qmdlab.eval" in packages and "qmdlab.training" in packages, packages
    assert {p.split(".", 1)[0] for p in packages} == {"qmdlab"}, packages
    assert "package-dir" not in project["tool"]["setuptools"], "every package lives in its own folder"
    assert set(project["tool"]["mypy"]["files"]) == {"qmdlab"}, project["tool"]["mypy"]["files"]


def test_no_module_is_exempt_from_mypy():
    mypy = _pyproject()["tool"]["mypy"]
    assert not mypy.get("ignore_errors"), "mypy's ignore_errors is on for everything"
    exempt = [o["module"] for o in mypy.get("overrides", []) if o.get("ignore_errors")]
    assert not exempt, f"ignore_errors overrides are back for {exempt}: fix the type errors instead"
