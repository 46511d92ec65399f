"""The harness itself: a failing cell must fail a headless run, both in-process and exported.

Without these the notebook tests could pass on a notebook whose cells raise (marimo renders
an error output and carries on), so the failure paths are checked on a throwaway notebook.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from .conftest import NOTEBOOKS, export_html, run_notebook

pytestmark = pytest.mark.extra("notebooks")  # the notebooks run in marimo

BROKEN = textwrap.dedent("""
    import marimo

    app = marimo.App()


    @app.cell
    def _():
        import marimo as mo
        return (mo,)


    @app.cell
    def _(mo):
        n = int(mo.cli_args().get("n") or 1)
        return (n,)


    @app.cell
    def _(n):
        if n > 1:
            raise ValueError(f"cell failed on purpose (n={n})")
        ok = "fine"
        return (ok,)


    @app.cell
    def _(mo):
        mo.stop(True, mo.md("stopped on purpose"))
        never = 1
        return (never,)


    if __name__ == "__main__":
        app.run()
""")


@pytest.fixture
def broken(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text(BROKEN)
    return path


def test_in_process_run_passes_args_and_tolerates_mo_stop(broken, monkeypatch):
    _, defs = run_notebook(broken, "--n", "1", monkeypatch=monkeypatch)
    assert defs["n"] == 1 and defs["ok"] == "fine"
    assert "never" not in defs  # the mo.stop'ed cell did not finish, and that is not an error


def test_in_process_run_raises_on_a_failing_cell(broken, monkeypatch):
    with pytest.raises(ValueError, match="cell failed on purpose"):
        run_notebook(broken, "--n", "2", monkeypatch=monkeypatch)


@pytest.mark.slow
def test_export_exits_nonzero_on_a_failing_cell(broken, tmp_path, nb_env):
    bad = export_html(broken, tmp_path / "bad.html", "--n", "2", env=nb_env)
    assert bad.returncode != 0
    assert "failed to execute" in bad.stderr


@pytest.mark.slow
def test_notebooks_pass_marimo_check():
    """marimo's linter: parseable, no multiply-defined names, no cycles, no warnings."""
    import subprocess

    files = sorted(str(p) for p in NOTEBOOKS.glob("*.py"))
    assert {p.rsplit("/", 1)[-1] for p in files} >= {"tune.py", "explore.py", "evaluate.py", "train.py"}
    proc = subprocess.run(
        [sys.executable, "-m", "marimo", "check", "--strict", *files], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
