"""docs/ARCHITECTURE.md restates code: the files it names, the signatures it quotes, the model
presets it lists. Each of those is checked against the code here, so the page cannot drift.

- every backticked repository path (``qmdlab/…``, ``eval/…``, ``training/…``, ``tests/…``, …)
  exists, and every ``name.py`` in a Packages row about a folder is a file of that folder;
- every backticked dotted name ``qmdlab.x.y`` imports (a module, or an attribute of one);
- every quoted call ``name(params) [-> ret]`` (inline, and each call in the code blocks) names a
  real function or class whose ``inspect.signature`` agrees: the parameters it writes exist, in
  that order, positional or keyword-only as written (after ``*``), with the defaults written; a
  parameter it leaves out must be optional (or stand under a ``…``); a return written is the
  annotation's text;
- the fields a ``class X(NamedTuple)`` / ``class X(Protocol)`` line lists are the class's own;
- the ``Presets`` line lists exactly :data:`qmdlab.models.registry.PRESETS`.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "ARCHITECTURE.md"
TOP = ("qmdlab", "scripts", "benchmarks", "experiments", "notebooks", "tests", "docs")

#: Where the names a section quotes without their module live, searched in order.
SCOPES: dict[str, tuple[str, ...]] = {
    "Store": ("qmdlab.store.index:Index", "qmdlab.store"),
    "Search": ("qmdlab.search", "qmdlab.search.lexical", "qmdlab.search.vector", "qmdlab.search.filters"),
    "Models": (
        "qmdlab.models",
        "qmdlab.models.base",
        "qmdlab.models.fakes",
        "qmdlab.models.cross_encoder",
        "qmdlab.models.cached",
        "qmdlab.models.cached:CachedReranker",
    ),
    "Pipeline": (
        "qmdlab.pipeline.lab:Lab",
        "qmdlab.pipeline.config:PipelineConfig",
        "qmdlab.pipeline",
        "qmdlab.pipeline.retune",
        "qmdlab",
    ),
    "Evaluation": (
        "qmdlab.eval.record",
        "qmdlab.eval.runner",
        "qmdlab.eval.ablation",
        "qmdlab.eval.study",
        "qmdlab.eval",
    ),
    "Capacity limits": ("qmdlab.store",),
}


def _load(spec: str) -> Any:
    module, _, attr = spec.partition(":")
    obj: Any = importlib.import_module(module)
    return getattr(obj, attr) if attr else obj


def _attr(obj: Any, name: str) -> Any:
    """``obj.name``, importing a submodule of a package when that is what ``name`` is."""
    if hasattr(obj, name):
        return getattr(obj, name)
    if inspect.ismodule(obj) and hasattr(obj, "__path__"):
        try:
            return importlib.import_module(f"{obj.__name__}.{name}")
        except ModuleNotFoundError:
            pass
    raise AttributeError(name)


def _resolve(name: str, scopes: tuple[str, ...]) -> Any:
    """The object a quoted dotted ``name`` means in ``scopes`` (``idx.`` is an :class:`Index`)."""
    parts = name.split(".")
    if parts[0] == "idx":
        scopes, parts = ("qmdlab.store.index:Index",), parts[1:]
    if parts[0] == "qmdlab":
        scopes, parts = ("qmdlab",), parts[1:]
    for spec in scopes:
        obj = _load(spec)
        try:
            for p in parts:
                obj = _attr(obj, p)
        except AttributeError:
            continue
        return obj
    raise LookupError(f"{name}: not found in {', '.join(scopes)}")


def _sections() -> list[tuple[str, str]]:
    """``(title, text)`` of each ``## `` section (the text before the first: title ``""``)."""
    out, title, lines = [], "", []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            out.append((title, "\n".join(lines)))
            title, lines = line[3:].strip(), []
        else:
            lines.append(line)
    out.append((title, "\n".join(lines)))
    return out


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and quotes."""
    out, depth, cur, quote = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


ANY = object()  # a default written as ``…``: any default


def _doc_params(text: str) -> list[tuple[str, str, Any]]:
    """``(kind, name, default)`` of a quoted parameter list; kind: ``pos``, ``kw``, ``*``, ``**``,
    or ``…`` (parameters left out here)."""
    out: list[tuple[str, str, Any]] = []
    kw = False
    for item in _split_top(text):
        if item in ("…", "..."):
            out.append(("…", "", None))
            continue
        if item == "*":
            kw = True
            continue
        if item.startswith("**"):
            out.append(("**", item[2:].split(":")[0].strip(), inspect.Parameter.empty))
            continue
        if item.startswith("*"):
            out.append(("*", item[1:].split(":")[0].strip(), inspect.Parameter.empty))
            kw = True
            continue
        name, eq, default = item.partition("=")
        name = name.split(":")[0].strip()
        value: Any = inspect.Parameter.empty
        if eq:
            default = default.strip()
            value = ANY if default in ("…", "...") else ast.parse(default, mode="eval").body
        out.append(("kw" if kw else "pos", name, value))
    return out


def _default(node: ast.expr, obj: Any) -> Any:
    """A quoted default's value: a literal, or a name of the object's module (``EVAL_DEPTH``)."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        module = inspect.getmodule(obj)
        return eval(compile(ast.Expression(node), "<doc>", "eval"), vars(module))  # noqa: S307


KINDS = {
    inspect.Parameter.POSITIONAL_ONLY: "pos",
    inspect.Parameter.POSITIONAL_OR_KEYWORD: "pos",
    inspect.Parameter.KEYWORD_ONLY: "kw",
    inspect.Parameter.VAR_POSITIONAL: "*",
    inspect.Parameter.VAR_KEYWORD: "**",
}


def _optional(p: inspect.Parameter) -> bool:
    return p.default is not inspect.Parameter.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)


def signature_problems(obj: Any, params: str, ret: str | None) -> list[str]:
    """Where the quoted ``params`` (and ``ret``) disagree with ``obj``'s signature."""
    sig = inspect.signature(obj)
    real = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
    problems: list[str] = []
    j, gap = 0, False
    for kind, name, default in _doc_params(params):
        if kind == "…":
            gap = True
            continue
        names = [p.name for p in real[j:]]
        if name not in names:
            where = "" if name not in [p.name for p in real] else " at that place"
            problems.append(f"no parameter {name!r}{where} (code: {sig})")
            continue
        k = j + names.index(name)
        skipped = [p.name for p in real[j:k] if not _optional(p)]
        if skipped and not gap:
            problems.append(f"leaves out the required parameter(s) {skipped} (code: {sig})")
        p = real[k]
        if KINDS[p.kind] != kind:
            problems.append(f"{name!r} is {KINDS[p.kind]} in the code, {kind} in the doc (code: {sig})")
        if default is not inspect.Parameter.empty and default is not ANY:
            if p.default is inspect.Parameter.empty:
                problems.append(f"{name!r} has no default in the code (code: {sig})")
            elif _default(default, obj) != p.default:
                problems.append(f"{name!r} defaults to {p.default!r} in the code (code: {sig})")
        j, gap = k + 1, False
    missing = [p.name for p in real[j:] if not _optional(p)]
    if missing and not gap:
        problems.append(f"leaves out the required parameter(s) {missing} (code: {sig})")
    if ret is not None:
        have = sig.return_annotation
        have = have if isinstance(have, str) else inspect.formatannotation(have)
        if have is inspect.Signature.empty or have.replace(" ", "") != ret.replace(" ", ""):
            problems.append(f"returns {have} in the code, -> {ret} in the doc")
    return problems


RET = r"[\w.]+(?:\[[^#;]*?\])?(?:\s*\|\s*[\w.]+(?:\[[^#;]*?\])?)*"
CALL = re.compile(
    r"([A-Za-z_][\w.]*)\(((?:[^()]|\((?:[^()]|\([^()]*\))*\))*)\)(?:\s*->\s*(" + RET + r"))?(?=$|\s|[#;,/])"
)


def _calls(text: str) -> list[tuple[str, str, str | None]]:
    return [(m[1], m[2], (m[3] or "").strip() or None) for m in CALL.finditer(text)]


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def _quoted(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))


def _rows() -> list[tuple[str, str]]:
    """The Packages table: ``(first cell, second cell)`` of each row."""
    text = dict(_sections())["Packages"]
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `") and len(cells) >= 2:
            rows.append((cells[0], " | ".join(cells[1:])))
    return rows


def _row_scope(first: str) -> tuple[str, ...]:
    """The module(s) a Packages row speaks of, from its first cell."""
    scopes = []
    for token in re.findall(r"`([^`]+)`", first):
        token = token.split(" ")[0]
        if token.startswith("qmdlab."):
            scopes.append(token)
        elif token.endswith(".py") and "<" not in token:
            scopes.append(token[:-3].replace("/", "."))
        elif token.endswith("/") and token.rstrip("/") in ("qmdlab/store", "qmdlab/search", "qmdlab/models"):
            scopes.append(token.rstrip("/").replace("/", "."))
        elif token.endswith("/") and token.startswith("qmdlab/"):
            scopes.append(token.rstrip("/").replace("/", "."))
    return tuple(scopes)


def quoted_calls() -> list[tuple[str, str, str, str | None, tuple[str, ...]]]:
    """``(where, name, params, ret, scopes)`` of every call the page quotes."""
    out = []
    for first, rest in _rows():
        if "<area>" in first:
            continue  # the commands row: checked against every area by its own test
        for token in _quoted(rest):
            for name, params, ret in _calls(token):
                out.append((f"Packages {first}", name, params, ret, _row_scope(first)))
    for heading, text in _sections():
        title = heading.split(" (")[0]
        if title not in SCOPES:
            continue
        for token in _quoted(text):
            for name, params, ret in _calls(token):
                out.append((title, name, params, ret, SCOPES[title]))
        for block in _code_blocks(text):
            for line in block.splitlines():
                if re.match(r"\s+def ", line):
                    continue  # a Protocol's method: test_protocol_and_namedtuple_lines_match_the_classes
                code = line.split("#")[0]
                code = re.sub(r"^\s*[\w.]+\s*=\s*", "", code)  # idx = Index.open(…)
                code = re.sub(r"^\s*class\s+\w+\((NamedTuple|Protocol)\):.*", "", code)
                code = re.sub(r"^\s*\w+:\s+(?=[A-Z])", "", code)  # "fakes: KeywordEmbedder(…)"
                for name, params, ret in _calls(code):
                    out.append((title, name, params, ret, SCOPES[title]))
    return out


def _protocol_methods() -> list[tuple[str, str, str, str | None]]:
    """``(class, method, params, ret)`` of the ``def`` lines under a ``class X(Protocol):`` line."""
    out = []
    for _, text in _sections():
        for block in _code_blocks(text):
            owner = None
            for line in block.splitlines():
                m = re.match(r"class (\w+)\((?:Protocol|NamedTuple)\):", line)
                if m:
                    owner = m[1]
                elif not line.startswith(" "):
                    owner = None
                d = re.match(r"\s+def (\w+)\((.*)\)\s*->\s*(.+?)\s*$", line.split("#")[0])
                if owner and d:
                    out.append((owner, d[1], d[2], d[3]))
    return out


def test_every_path_it_names_exists():
    text = DOC.read_text(encoding="utf-8")
    missing = []
    for token in re.findall(r"`([^`\n]+)`", text):
        token = token.split(" ")[0]
        if not token.startswith(tuple(f"{t}/" for t in TOP)):
            continue
        if "<" in token:
            if not list(REPO.glob(re.sub(r"<[^>]+>", "*", token))):
                missing.append(token)
        elif not (REPO / token).exists():
            missing.append(token)
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_module_file_of_a_package_row_exists():
    missing = []
    for first, rest in _rows():
        dirs = [t for t in re.findall(r"`([^`]+)`", first) if t.endswith("/")]
        dirs += [f"{m}/" for m in re.findall(r"\((`?)(eval|training)/\1\)", first) for m in m[1:]]
        if not dirs:
            continue
        folder = REPO / dirs[-1]
        for name in re.findall(r"\b([a-z_][a-z0-9_]*\.py)\b", rest):
            if not (folder / name).is_file():
                missing.append(f"{dirs[-1]}{name}")
    assert not missing, f"docs/ARCHITECTURE.md's Packages table names files that do not exist: {missing}"


def test_every_dotted_name_it_quotes_imports():
    bad = []
    for token in re.findall(r"`([^`\n]+)`", DOC.read_text(encoding="utf-8")):
        for name in re.findall(r"(?<![\w.])qmdlab(?:\.[A-Za-z_]\w*)+", token):
            try:
                _resolve(name, ("qmdlab",))
            except (LookupError, ImportError) as err:
                bad.append(f"{name} ({err})")
    assert not bad, "docs/ARCHITECTURE.md quotes names that do not import: " + "; ".join(bad)


def test_the_page_quotes_signatures():
    assert len(quoted_calls()) >= 40, "the signature check found few calls: has the page's format changed?"


@pytest.mark.parametrize("where,name,params,ret,scopes", quoted_calls(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_quoted_signature_matches_the_code(where, name, params, ret, scopes):
    try:
        obj = _resolve(name, scopes)
    except (LookupError, ImportError) as err:
        pytest.fail(f"docs/ARCHITECTURE.md ({where}) quotes {name}(…), which is not there: {err}")
    problems = signature_problems(obj, params, ret)
    assert not problems, f"docs/ARCHITECTURE.md ({where}) `{name}({params})`: " + "; ".join(problems)


def test_protocol_and_namedtuple_lines_match_the_classes():
    text = DOC.read_text(encoding="utf-8")
    wrong = []
    for block in _code_blocks(text):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"class (\w+)\((NamedTuple|Protocol)\):(.*)", line)
            if not m:
                continue
            cls = _resolve(m[1], ("qmdlab.models", "qmdlab.models.base", "qmdlab.search"))
            written = m[3].split("#")[0]
            for more in lines[i + 1 :]:
                if not more.startswith(" ") or more.lstrip().startswith("def "):
                    break
                written += ";" + more.split("#")[0]
            names = [f.split(":")[0].strip() for f in written.split(";") if ":" in f]
            if m[2] == "NamedTuple":
                if names != list(cls._fields):
                    wrong.append(f"{m[1]}: doc {names}, code {list(cls._fields)}")
            else:
                own = list(getattr(cls, "__annotations__", {}))
                if names != own:
                    wrong.append(f"{m[1]}: doc {names}, code {own}")
    for owner, method, params, ret in _protocol_methods():
        cls = _resolve(owner, ("qmdlab.models", "qmdlab.models.base", "qmdlab.search"))
        problems = signature_problems(getattr(cls, method), params.removeprefix("self").lstrip(", "), ret)
        wrong += [f"{owner}.{method}: {p}" for p in problems]
    assert not wrong, "docs/ARCHITECTURE.md's class lines disagree with the code:\n" + "\n".join(wrong)


def test_every_command_area_has_the_register_contract():
    first, rest = next(r for r in _rows() if "<area>" in r[0])
    (params,) = [p for token in _quoted(rest) for n, p, _ in _calls(token) if n == "register"]
    areas = [p.stem for p in (REPO / "qmdlab" / "commands").glob("*.py") if "def register(" in p.read_text("utf-8")]
    assert areas
    wrong = {}
    for area in areas:
        problems = signature_problems(importlib.import_module(f"qmdlab.commands.{area}").register, params, None)
        if problems:
            wrong[area] = problems
    assert not wrong, wrong


def test_the_preset_list_is_the_registry():
    from qmdlab.models.registry import PRESETS

    lines = [
        line for line in DOC.read_text(encoding="utf-8").splitlines() if "`qmdlab.models.registry.PRESETS`" in line
    ]
    assert lines, "docs/ARCHITECTURE.md should list the presets on a line naming `qmdlab.models.registry.PRESETS`"
    for line in lines:
        listed = re.findall(r"`([a-z][a-z-]*)`", line.split(":", 1)[1])
        assert listed == list(PRESETS), f"docs/ARCHITECTURE.md lists presets {listed}, the registry has {list(PRESETS)}"


def test_the_signature_check_catches_drift():
    def f(a, b=1, *, c=None, **kw): ...

    assert signature_problems(f, "a, b=1, *, c=None", None) == []
    assert signature_problems(f, "a, …", None) == []
    assert signature_problems(f, "a, b=2", None)  # a wrong default
    assert signature_problems(f, "a, c=None", None)  # keyword-only written as positional
    assert signature_problems(f, "b=1", None)  # a required parameter left out
    assert signature_problems(f, "a, d", None)  # no such parameter
    assert signature_problems(f, "a", "int")  # a return the code does not annotate


def _line_with(marker: str) -> str:
    (line,) = [line for line in DOC.read_text(encoding="utf-8").splitlines() if marker in line]
    return line


def test_the_import_layers_are_the_import_tests_layers():
    """The Packages section's "Imports go one way" sentence names the base modules and layers of
    ``tests/test_imports.py`` (``BASE``, ``LAYERS``), in that order."""
    spec = importlib.util.spec_from_file_location("_imports_test", REPO / "tests" / "test_imports.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    line = _line_with("Imports go one way")
    base_text, _, rest = line.partition("→")
    base = [f"qmdlab.{n}" for n in re.findall(r"`([\w.]+)`", base_text)]
    assert sorted(base) == sorted(m for m in mod.BASE if m != "qmdlab"), base
    layers = [[f"qmdlab.{n}" for n in re.findall(r"`([\w.]+)`", part)] for part in rest.split("→")]
    code = [sorted(prefixes) for _, prefixes in mod.LAYERS]
    assert [sorted(part) for part in layers] == code, (
        f"docs/ARCHITECTURE.md's layers {layers}, tests/test_imports.py {code}"
    )


def test_the_trace_attributes_are_the_trace_tables():
    from qmdlab.pipeline.trace import SCHEMAS

    listed = re.search(r"polars attributes: `([^`]+)`", DOC.read_text(encoding="utf-8").replace("\n", " "))
    assert listed, "docs/ARCHITECTURE.md should list the Trace's tables after 'polars attributes:'"
    assert [t.strip() for t in listed[1].split(",")] == list(SCHEMAS)


def test_the_fts_modes_and_channels_are_the_codes():
    from qmdlab.search.channels import CHANNELS
    from qmdlab.search.lexical import MODES

    modes = re.findall(r'"(\w+)"', _line_with("build_fts_query(").split("# mode:")[1].split(";")[0])
    assert modes == list(MODES), f"docs/ARCHITECTURE.md's FTS modes {modes}, qmdlab.search.lexical.MODES {list(MODES)}"
    channels_text = _line_with("`channels.py`").split("`channels.py` (")[1].split(";")[0]
    named = re.findall(r"`(\w+)`", channels_text)
    assert named == list(CHANNELS), (
        f"docs/ARCHITECTURE.md's channels {named}, qmdlab.search.channels.CHANNELS {list(CHANNELS)}"
    )


def test_the_http_routes_it_names_are_served():
    source = (REPO / "qmdlab" / "mcp_server" / "http.py").read_text(encoding="utf-8")
    served = set(re.findall(r'custom_route\("(/\w+)"', source)) | set(
        re.findall(r'streamable_http_path="(/\w+)"', source)
    )
    text = _line_with("`http.py` (").split("`http.py` (")[1].split("their limits")[0]
    named = set(re.findall(r"`(/\w+)`", text))
    assert named == served, f"docs/ARCHITECTURE.md names routes {sorted(named)}, http.py serves {sorted(served)}"


def test_the_shared_fixtures_are_the_conftests():
    source = (REPO / "tests" / "conftest.py").read_text(encoding="utf-8")
    fixtures = re.findall(r'@pytest\.fixture(?:\([^)]*name="(\w+)"[^)]*\)\n|(?:\([^)]*\))?\ndef (\w+))', source)
    code = sorted({a or b for a, b in fixtures})
    text = DOC.read_text(encoding="utf-8").split("Shared fixtures in `tests/conftest.py`:")[1].split("\n- ")[0]
    named = sorted(set(re.findall(r"`(\w+)`", text)))
    assert named == code, f"docs/ARCHITECTURE.md names fixtures {named}, tests/conftest.py has {code}"
