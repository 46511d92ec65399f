"""Every module of qmdlab (qmdlab.eval and qmdlab.training included) imports.

An ImportError in a rarely taken branch (a helper renamed in one module, still imported by
another) is otherwise found by a user. A module whose *third-party* optional dependency is not
installed is skipped with the missing package named — except under CI (``$CI`` set), where
every extra is installed and a missing one is a failure.

The import graph, read from the source, keeps its shape: no circle (function-level imports
included) and no layer importing one above it (:data:`LAYERS`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OURS = ("qmdlab",)
FOLDERS = {"qmdlab": "qmdlab"}


def _modules() -> list[str]:
    names = []
    for pkg, folder in FOLDERS.items():
        names.append(pkg)
        for info in pkgutil.walk_packages([str(REPO / folder)], prefix=f"{pkg}."):
            names.append(info.name)
    return sorted(set(names))


MODULES = _modules()


def test_every_package_is_walked():
    assert {"qmdlab.terms", "qmdlab.mcp_server.backend", "qmdlab.eval.record", "qmdlab.training.reward"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_module_imports(name):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as err:
        missing = (err.name or "").split(".")[0]
        if missing and missing not in OURS and not os.environ.get("CI"):
            pytest.skip(f"{name}: optional dependency {missing!r} is not installed ({err})")
        raise


def _from_imports(name: str):
    """``(line, module, imported name)`` of every ``from X import Y`` in module ``name`` whose X
    is ours — also those inside functions, which importing the module does not run."""
    import ast

    spec = importlib.util.find_spec(name)
    path = Path(spec.origin)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = (
            importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level else node.module
        )
        if target and target.split(".")[0] in OURS:
            for alias in node.names:
                yield node.lineno, target, alias.name


@pytest.mark.parametrize("name", MODULES)
def test_names_imported_inside_functions_exist(name):
    """``from qmdlab.x import y`` anywhere in a module (a function-level import in a rare
    branch included) names a module or attribute that exists."""
    import importlib.util

    bad = []
    for line, target, attr in _from_imports(name):
        try:
            mod = importlib.import_module(target)
        except ModuleNotFoundError as err:
            if (err.name or "").split(".")[0] not in OURS and not os.environ.get("CI"):
                continue  # an optional extra the target needs; test_module_imports reports it
            bad.append(f"line {line}: from {target} import {attr}: {err}")
            continue
        submodule = hasattr(mod, "__path__") and importlib.util.find_spec(f"{target}.{attr}") is not None
        if attr != "*" and not hasattr(mod, attr) and not submodule:
            bad.append(f"line {line}: from {target} import {attr}: {target} has no {attr!r}")
    assert not bad, f"{name}: " + "; ".join(bad)


# --- The import graph: no circle, and no layer importing one above it --------------------------
#
# Built from the source with ``ast`` (nothing is imported), over every ``import`` statement of every
# module of qmdlab — those inside functions included: a function-level import
# closes a circle as surely as a module-level one, only later. Imports under ``if TYPE_CHECKING:``
# are left out: they never run, and an annotation may name a type from anywhere.


def _source_modules() -> dict[str, tuple[Path, bool]]:
    """``{module name: (file, is a package)}`` for every .py of the package."""
    found = {}
    for pkg, folder in FOLDERS.items():
        root = REPO / folder
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            found[".".join([pkg, *(parts[:-1] if is_pkg else parts)])] = (path, is_pkg)
    return found


def _type_checking_only(tree):
    """The ids of every node under an ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``)."""
    import ast

    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def import_graph() -> dict[str, dict[str, int]]:
    """``{module: {module it imports: first line}}`` over the modules of :func:`_source_modules`.

    ``from package import name`` is an edge to ``package.name`` when that is a module, else to
    ``package``; ``import a.b.c`` to the longest of ``a.b.c``, ``a.b``, ``a`` that is ours.
    Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; those implicit edges are not
    drawn (every package would otherwise be a circle with the modules its ``__init__`` re-exports).
    """
    import ast

    modules = _source_modules()

    def ours(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for name, (path, is_pkg) in modules.items():
        package = name if is_pkg else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_only(tree)
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [ours(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = (
                    importlib.util.resolve_name("." * node.level + (node.module or ""), package)
                    if node.level
                    else node.module or ""
                )
                targets = [ours(f"{base}.{alias.name}") for alias in node.names]
            for target in targets:
                if target is not None and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One circle of ``graph`` as ``[a, b, …, a]``, or ``None`` (iterative depth-first search).

    >>> find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}})
    ['a', 'b', 'c', 'a']
    >>> find_cycle({"a": {"b": 1}, "b": {}}) is None
    True
    """
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path, on_path = [start], {start}
        stack = [iter(sorted(graph[start]))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
            elif nxt in on_path:
                return path[path.index(nxt) :] + [nxt]
            elif nxt not in done and nxt in graph:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_no_import_cycle():
    graph = import_graph()
    cycle = find_cycle(graph)
    if cycle is not None:
        steps = [f"{a} -> {b} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])]
        pytest.fail("import circle:\n  " + "\n  ".join(steps))


def test_the_graph_sees_function_level_and_submodule_imports():
    graph = import_graph()
    # ``from qmdlab.store import schema`` is an edge to the submodule, not to the package.
    assert "qmdlab.store.schema" in graph["qmdlab.store.doc_expansions"]
    # qmdlab/eval and qmdlab/training are read as the subpackages they are.
    assert "qmdlab.eval.record" in graph and "qmdlab.training.reward" in graph
    assert any(t.startswith("qmdlab.") for t in graph["qmdlab.eval.runner"])


#: Layers, lowest first. A module may import its own layer and any below it, never one above.
#: A module belongs to the layer of its longest matching prefix. The lowest shared modules (BASE)
#: import nothing of ours but each other and are importable by every layer.
BASE = (
    "qmdlab",  # the package: lazy attribute look-ups only
    "qmdlab.errors",
    "qmdlab.paths",
    "qmdlab.terms",
    "qmdlab.cancel",
    "qmdlab.environment",
    "qmdlab.subproc",
    "qmdlab.display",
    "qmdlab.served",
)
LAYERS = (
    ("store", ("qmdlab.store",)),
    ("search and models", ("qmdlab.search", "qmdlab.models")),
    ("pipeline", ("qmdlab.pipeline",)),
    ("eval, training and scale", ("qmdlab.eval", "qmdlab.training", "qmdlab.scale")),
    # The front ends: the CLI verbs (eval's and train's included), MCP, result formatting, doctor.
    (
        "front ends",
        (
            "qmdlab.cli",
            "qmdlab.qmd_argv",
            "qmdlab.commands",
            "qmdlab.eval.commands",
            "qmdlab.training.commands",
            "qmdlab.mcp_server",
            "qmdlab.output",
            "qmdlab.doctor",
            "qmdlab.role_options",
        ),
    ),
)


def layer_of(module: str) -> int | None:
    """0 for a base module, 1… for the layers of :data:`LAYERS`; ``None`` when unassigned.

    >>> layer_of("qmdlab.errors"), layer_of("qmdlab.store.scan"), layer_of("qmdlab.eval.commands")
    (0, 1, 5)
    """
    if module in BASE:
        return 0
    best, best_len = None, -1
    for level, (_, prefixes) in enumerate(LAYERS, start=1):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = level, len(prefix)
    return best


def test_every_module_has_a_layer():
    assert [m for m in import_graph() if layer_of(m) is None] == []


def test_no_layer_imports_one_above_it():
    def name(level: int) -> str:
        return "base" if level == 0 else LAYERS[level - 1][0]

    bad = []
    for module, edges in sorted(import_graph().items()):
        here = layer_of(module)
        for target, line in sorted(edges.items()):
            there = layer_of(target)
            if here is not None and there is not None and there > here:
                bad.append(f"{module} ({name(here)}) -> {target} ({name(there)}), line {line}")
    assert not bad, "imports from a higher layer:\n  " + "\n  ".join(bad)
