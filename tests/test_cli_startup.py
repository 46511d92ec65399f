"""CLI cold start: ``import qmdlab.cli`` and the ``search`` verb stay free of heavy libraries.

Structural, not timed: each check runs a fresh interpreter and looks at ``sys.modules``
(timings are in ``benchmarks/bench.py`` and the README's performance section).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import click
from click.testing import CliRunner

HEAVY = (
    "polars",
    "numpy",
    "torch",
    "llama_cpp",
    "marimo",
    "transformers",
    "lightgbm",
    "sentence_transformers",
    "ranx",
    "mcp",
)


def _loaded_after(code: str) -> list[str]:
    """Top-level packages from :data:`HEAVY` in ``sys.modules`` after running ``code`` in a child."""
    probe = (
        f"import sys\n{code}\nimport json\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_cli_loads_no_heavy_library():
    assert _loaded_after("import qmdlab.cli") == []


def test_import_cli_loads_no_command_area():
    code = (
        "import qmdlab.cli\nassert not [m for m in sys.modules if m.startswith('qmdlab.commands.')\n"
        "            or m.startswith(('qmdlab.eval', 'qmdlab.training')) or m == 'importlib.metadata'], sys.modules"
    )
    assert _loaded_after(code) == []


def test_search_verb_loads_no_heavy_library(tmp_path):
    """``qmdlab search`` on an (empty) index: resolving the verb, opening the index and running BM25."""
    code = (
        "from qmdlab.store import Index\n"
        f"Index.open({str(tmp_path / 'idx')!r}).close()\n"  # reading verbs open existing indexes only
        "from qmdlab.cli import main\n"
        f"rc = main(['--index', {str(tmp_path / 'idx')!r}, 'search', 'anything'])\n"
        "assert rc == 0, rc"
    )
    assert _loaded_after(code) == []


def test_heavy_probe_can_fail():
    """The probe sees a heavy import when there is one (so the tests above can fail)."""
    assert _loaded_after("import numpy") == ["numpy"]


def test_verb_table_matches_registered_verbs():
    """``COMMAND_VERBS`` names, for every verb a core area registers, that area (and nothing else)."""
    from qmdlab.cli import COMMAND_MODULES, COMMAND_VERBS

    registered = {}
    for area in COMMAND_MODULES:
        group = click.Group()
        importlib.import_module(f"qmdlab.commands.{area}").register(group)
        registered.update({verb: area for verb in group.commands})
    assert COMMAND_VERBS == registered


def test_entry_points_name_the_verbs_they_register():
    """Each ``qmdlab.commands`` entry point registers (at least) the verb it is named after, the
    verbs of qmdlab.eval and qmdlab.training come only from entry points, and no entry point shadows a core verb
    (a stale install — ``pip install -e .`` not re-run after pyproject.toml changed — fails here)."""
    from qmdlab.cli import COMMAND_VERBS, plugin_verbs

    eps = plugin_verbs()
    assert {"eval", "tune", "train"} <= set(eps), sorted(eps)
    assert not set(eps) & set(COMMAND_VERBS)
    provided = {}
    for verb, ep in eps.items():
        group = click.Group()
        ep.load()(group)
        assert verb in group.commands, (verb, ep.value, sorted(group.commands))
        provided.update(dict.fromkeys(group.commands, ep.value))
    assert set(provided) == set(eps), "an area registers a verb it has no entry point for"


def test_core_imports_nothing_above_it():
    """No core module of ``qmdlab/`` (all but ``qmdlab/eval`` and ``qmdlab/training``) imports
    ``qmdlab.eval`` or ``qmdlab.training`` (function-level imports included): their CLI verbs reach the
    core only through entry points."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "qmdlab"
    above = (root / "eval", root / "training")
    core = [p for p in sorted(root.rglob("*.py")) if not any(p.is_relative_to(a) for a in above)]
    assert core and len(core) < len(list(root.rglob("*.py")))
    bad = []
    for path in core:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            bad += [
                f"{path.relative_to(root.parent)}:{node.lineno}: {n}"
                for n in names
                if n.split(".")[0] in ("eval", "training") or n.startswith(("qmdlab.eval", "qmdlab.training"))
            ]
    assert not bad, bad


def test_eval_verb_loads_only_its_area():
    """Looking up ``qmdlab eval`` registers the eval area through its entry point and no core area."""
    code = (
        "import click\nfrom qmdlab.cli import cli\n"
        "assert cli.get_command(click.Context(cli), 'eval') is not None\n"
        "assert 'qmdlab.eval.commands' in sys.modules and 'qmdlab.training.commands' not in sys.modules\n"
        "assert not [m for m in sys.modules if m.startswith('qmdlab.commands.')], sorted(sys.modules)"
    )
    assert _loaded_after(code) == []


def test_help_lists_every_verb():
    from qmdlab.cli import COMMAND_VERBS, cli, plugin_verbs

    res = CliRunner().invoke(cli, ["--help"])
    assert res.exit_code == 0, res.output
    for verb in [*COMMAND_VERBS, *plugin_verbs()]:
        assert verb in res.output


def test_unknown_verb_is_a_usage_error():
    from qmdlab.cli import cli

    res = CliRunner().invoke(cli, ["no-such-verb"])
    assert res.exit_code == 1 and "No such command" in res.output


def _run_process(tmp_path, body: str, *argv: str) -> subprocess.CompletedProcess:
    """A child that sets up ``body`` and then is the ``qmdlab`` process (``qmdlab.cli.run``) for ``argv``."""
    script = f"import sys, atexit, threading\n{body}\nsys.argv = ['qmdlab', *{list(argv)!r}]\nfrom qmdlab.cli import run\nrun()\n"
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False
    )


def test_the_process_exit_keeps_the_status_the_output_and_the_exit_handlers(tmp_path):
    """``run`` leaves without the interpreter's teardown: what a normal exit gives must still be there."""
    flag = tmp_path / "atexit.txt"
    done = _run_process(tmp_path, f"atexit.register(lambda: open({str(flag)!r}, 'w').write('ran'))", "--help")
    assert done.returncode == 0 and "Usage: qmdlab" in done.stdout and flag.read_text() == "ran"
    bad = _run_process(tmp_path, "", "no-such-verb")
    assert bad.returncode == 1 and "no-such-verb" in bad.stderr  # qmd's status for a usage error
    big = _run_process(
        tmp_path, "sys.stdout = open(sys.stdout.fileno(), 'w', buffering=1 << 20, closefd=False)", "--help"
    )
    assert big.stdout == done.stdout  # a large buffer is flushed before the process leaves


def test_the_process_waits_for_a_thread_that_must_finish(tmp_path):
    out = tmp_path / "worker.txt"
    body = (  # the worker finishes once the main thread has (a normal exit's shutdown)
        f"def work():\n    threading.main_thread().join()\n    open({str(out)!r}, 'w').write('finished')\n"
        "threading.Thread(target=work).start()\n"  # not a daemon: the exit must wait for it
    )
    done = _run_process(tmp_path, body, "--help")
    assert done.returncode == 0 and out.read_text() == "finished"
