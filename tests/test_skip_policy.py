"""The skip policy of tests/conftest.py: a missing prerequisite skips locally, and fails under
CI (``$CI``) or ``QMDLAB_REQUIRE_ALL=1`` — at module level, in a fixture and in a test.

The real conftest is copied next to three small test files and run in a pytest subprocess.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CASES = {
    "test_module_level.py": """
import pytest

@pytest.fixture(scope="module", autouse=True)
def _prerequisites(require):
    require(False, "widget library missing")

def test_a():
    pass
""",
    "test_in_fixture.py": """
import pytest

@pytest.fixture
def thing(require):
    require(0, "thing is not installed")

def test_b(thing):
    pass
""",
    "test_in_test.py": """
def test_c(require):
    require.module("qmdlab_no_such_module_xyz", "needs xyz")

def test_present(require):
    assert require.module("json", "stdlib").dumps(1) == "1"
    require(True, "never shown")
""",
}


def _run(tmp_path: Path, **env: str) -> tuple[int, dict[str, int], str]:
    d = tmp_path / "suite"
    if not d.exists():
        d.mkdir()
        shutil.copy(Path(__file__).parent / "conftest.py", d / "conftest.py")
        for name, text in CASES.items():
            (d / name).write_text(text, encoding="utf-8")
    full = {k: v for k, v in os.environ.items() if k not in ("CI", "QMDLAB_REQUIRE_ALL", "PYTEST_ADDOPTS")}
    full.update(env)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rA",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(d),
            "-c",
            os.devnull,
            str(d),
        ],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
    )
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|skipped|failed|errors?)", res.stdout.splitlines()[-1])}
    counts["errors"] = counts.pop("error", 0) + counts.pop("errors", 0)
    return res.returncode, counts, res.stdout


def test_locally_missing_prerequisites_skip_with_their_reason(tmp_path):
    rc, counts, out = _run(tmp_path)
    assert rc == 0 and counts == {"passed": 1, "skipped": 3, "errors": 0}, out
    for reason in ("widget library missing", "thing is not installed", "needs xyz"):
        assert reason in out


@pytest.mark.parametrize("env", [{"CI": "true"}, {"QMDLAB_REQUIRE_ALL": "1"}, {"CI": "1", "QMDLAB_REQUIRE_ALL": "yes"}])
def test_under_ci_missing_prerequisites_fail(tmp_path, env):
    rc, counts, out = _run(tmp_path, **env)
    assert rc == 1 and counts.get("skipped", 0) == 0, out
    assert counts.get("failed", 0) + counts["errors"] == 3 and counts["passed"] == 1, out
    assert out.count("CI/QMDLAB_REQUIRE_ALL forbids skipping") >= 3


def test_require_all_zero_overrides_ci(tmp_path):
    rc, counts, out = _run(tmp_path, CI="true", QMDLAB_REQUIRE_ALL="0")
    assert rc == 0 and counts["skipped"] == 3, out
