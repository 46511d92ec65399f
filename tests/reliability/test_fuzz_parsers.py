"""Fuzz targets over what arrives from outside: front matter, qmd's ``index.yml``, stdio frames, globs.

Each example must finish within :data:`EXAMPLE_S` seconds and raise the process's peak resident
memory by less than :data:`EXAMPLE_RSS_MB` — no crash, no hang, no memory blow-up — whatever it
holds: YAML anchors, aliases and merge keys (alias bombs among them), deep nesting, huge numbers,
impossible dates, brace patterns, lone surrogates, malformed JSON-RPC.

Example counts come from the profile (``tests/reliability/conftest.py``): a few dozen per target
in ``make test``, 1,000 per target in ``make fuzz`` (``QMDLAB_FUZZ_PROFILE=deep``).
"""

from __future__ import annotations

import json
import re
import resource
import time
from contextlib import contextmanager

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from qmdlab.errors import ConfigError
from qmdlab.store import limits
from qmdlab.store.frontmatter import parse_front_matter

from .conftest import fuzz_settings

EXAMPLE_S = 5.0
EXAMPLE_RSS_MB = 200


@contextmanager
def bounded(what: object):
    """Assert the body takes less than EXAMPLE_S and raises the peak RSS by less than EXAMPLE_RSS_MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.monotonic()
    yield
    took = time.monotonic() - start
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) / 1024  # KiB on Linux
    assert took < EXAMPLE_S, (f"{took:.1f} s", repr(what)[:300])
    assert grew < EXAMPLE_RSS_MB, (f"peak RSS +{grew:.0f} MB", repr(what)[:300])


# ---------------------------------------------------------------- YAML fragments
ANCHORS = ["a", "b", "c"]
scalar = st.one_of(
    st.sampled_from(
        [
            "x",
            "'quoted'",
            '"dq \\u00e9"',
            "2024-01-02",
            "2024-13-45",
            "2024-02-30T25:61:00",
            "1" * 5000,
            "0x" + "f" * 200,
            "1e999",
            ".nan",
            "~",
            "null",
            "yes",
            "!!binary aGVsbG8=",
            "!!python/object:os.system x",
            "!!str 3",
            "!!int x",
            "!!timestamp nope",
            "|\n  block\n  text",
            "&x [1, 2]",
            "東京",
            '"\\ud800"',
            "\t",
            "{",
            "]",
            "#",
        ]
    ),
    st.text(max_size=20),
)


def _flow(kids: list[str]) -> str:
    return "[" + ", ".join(kids) + "]"


alias = st.sampled_from(ANCHORS).map(lambda a: "*" + a)
value = st.recursive(
    st.one_of(scalar, alias),
    lambda inner: st.one_of(
        st.lists(inner, max_size=9).map(_flow),
        st.lists(st.tuples(st.sampled_from(["k", "tags", "<<", "title", "date"]), inner), max_size=5).map(
            lambda kv: "{" + ", ".join(f"{k}: {v}" for k, v in kv) + "}"
        ),
    ),
    max_leaves=30,
)


@st.composite
def yaml_doc(draw) -> str:
    """A YAML mapping of anchors, aliases (possibly a bomb), merge keys and odd scalars."""
    lines = []
    for name in draw(st.lists(st.sampled_from(ANCHORS), max_size=3, unique=True)):
        lines.append(f"{name}_: &{name} {draw(value)}")
    for _ in range(draw(st.integers(0, 6))):
        key = draw(st.sampled_from(["title", "tags", "date", "n", "<<", "x", "aliases", "list"]))
        lines.append(f"{key}: {draw(value)}")
    if draw(st.booleans()):
        depth = draw(st.integers(1, 400))
        lines.append("deep: " + "[" * depth + "]" * depth)
    if draw(st.booleans()):  # an alias bomb of random shape
        fan, levels = draw(st.integers(2, 12)), draw(st.integers(2, 9))
        names = [f"l{i}" for i in range(levels)]
        lines.append(f"{names[0]}: &{names[0]} [" + ",".join(["lol"] * fan) + "]")
        for prev, name in zip(names, names[1:]):
            lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * fan) + "]")
        lines.append(f"tags: [*{names[-1]}]")
    return "\n".join(lines)


BOMB = "\n".join(
    ["a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]"]
    + [f"{n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefg", "bcdefgh")]
    + ["tags: [*h]"]
)


@fuzz_settings()
@given(doc=yaml_doc(), body=st.text(max_size=40), close=st.sampled_from(["---", "..."]))
@example(doc=BOMB, body="# Bomb", close="---")
@example(doc="tags: " + " ".join(f"t{i}" for i in range(5000)), body="x", close="---")
@example(doc="x: &a [*a]", body="", close="---")
@example(doc="m: &m {k: 1}\n" + "\n".join(f"m{i}: &m{i} {{<<: [*m]}}" for i in range(20)), body="", close="---")
def test_front_matter_parses_within_its_limits(doc, body, close):
    text = f"---\n{doc}\n{close}\n{body}"
    with bounded(text):
        fm = parse_front_matter(text)
    assert 0 <= fm.body_offset <= len(text)
    json.dumps(fm.metadata, ensure_ascii=False).encode("utf-8", "surrogatepass")  # storable as the index stores it
    if fm.problem is not None:
        assert fm.metadata == {} and fm.problem.startswith("front matter over the limit")
    else:
        assert len(fm.metadata.get("tags") or []) <= limits.MAX_TAGS


# ---------------------------------------------------------------- qmd's index.yml
brace_pattern = st.recursive(
    st.sampled_from(["*.md", "**/", "a", "b", "", ",", "}", "{"]),
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=4).map(lambda xs: "{" + ",".join(xs) + "}"),
        st.lists(inner, min_size=1, max_size=6).map("".join),
    ),
    max_leaves=40,
)


@st.composite
def index_yml(draw, path: str) -> str:
    colls = []
    for i in range(draw(st.integers(0, 3))):
        pattern = draw(brace_pattern).replace("'", "")
        extra = draw(st.sampled_from(["", f"\n    ignore: [{draw(value)}]", f"\n    context: {draw(value)}"]))
        colls.append(f"  c{i}:\n    path: {path}\n    pattern: '{pattern}'{extra}")
    head = draw(yaml_doc())
    return head + "\ncollections:\n" + "\n".join(colls) if colls else head


@fuzz_settings()
@given(data=st.data())
@example(data=None)
def test_index_yml_plans_or_refuses_within_its_limits(tmp_path_factory, data):
    from qmdlab.store.qmdimport import plan_import

    folder = tmp_path_factory.mktemp("qmd")
    (folder / "notes").mkdir()
    if data is None:  # the probe's brace bomb
        text = (
            f"collections:\n  bomb:\n    path: {folder / 'notes'}\n    pattern: '**/*{{a,b,c}}{{a,b,c}}"
            + "{a,b,c}" * 12
            + "'\n"
        )
    else:
        text = data.draw(index_yml(str(folder / "notes")))
    cfg = folder / "index.yml"
    cfg.write_text(text, encoding="utf-8", errors="surrogatepass")
    with bounded(text):
        try:
            plan = plan_import(cfg)
        except ConfigError as err:
            assert str(cfg) in str(err) and "\n" not in str(err)
            return
    for cp in plan.collections:
        assert len(cp.mask.split(",")) <= limits.MAX_BRACE_EXPANSIONS


# ---------------------------------------------------------------- stdio frames
def _jsonrpc_frame() -> st.SearchStrategy[str]:
    ids = st.one_of(st.integers(-5, 5), st.text(max_size=5), st.none(), st.booleans(), st.floats(allow_nan=False))
    params = st.one_of(
        st.none(),
        st.dictionaries(
            st.text(max_size=8),
            st.one_of(st.text(max_size=20), st.integers(), st.lists(st.text(max_size=4))),
            max_size=4,
        ),
        st.text(max_size=10),
        st.lists(st.integers(), max_size=3),
    )
    method = st.one_of(
        st.sampled_from(["ping", "tools/call", "tools/list", "initialize", "notifications/cancelled"]),
        st.integers(),
        st.text(max_size=10),
    )
    obj = st.fixed_dictionaries(
        {},
        optional={
            "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
            "id": ids,
            "method": method,
            "params": params,
            "result": st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
            "error": st.just({"code": 1}),
        },
    ).map(json.dumps)
    surrogate = obj.map(lambda s: s.replace('"', '"\\ud800', 1) if '"' in s else s)
    return st.one_of(
        obj,
        surrogate,
        st.text(max_size=80),
        st.binary(max_size=60).map(lambda b: b.decode("utf-8", "replace")),
        st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
    )


@fuzz_settings()
@given(line=_jsonrpc_frame())
@example(
    line='{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "search", "arguments": {"query": "\\ud800"}}}'
)
@example(line='{"jsonrpc": "2.0", "id": "\\udc80", "method": "ping"}')
@example(line="[" * 100_000 + "]" * 100_000)
def test_every_stdio_frame_is_handed_over_answered_or_dropped(line):
    from mcp_types import jsonrpc_message_adapter

    from qmdlab.mcp_server.frames import check_frame

    with bounded(line[:200]):
        msg, reply = check_frame(line)
    assert msg is None or reply is None
    if reply is not None:  # an answer the client can read: JSON-RPC 2.0, a standard code, an id or null
        text = json.dumps(reply)
        text.encode("utf-8")
        assert reply["jsonrpc"] == "2.0" and reply["error"]["code"] in (-32700, -32600)
        assert reply["id"] is None or isinstance(reply["id"], (str, int))
    if msg is not None:  # what is handed to the SDK is a message the SDK accepts: no id is ever dropped
        jsonrpc_message_adapter.validate_json(line, by_name=False)


# ---------------------------------------------------------------- globs
def _reference_regex(pattern: str) -> str:
    """The glob translation before the backtracking bound (``qmdlab.store.scan`` at the probe)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape("["))
                i += 1
            else:
                body = pattern[i + 1 : j].replace("\\", "\\\\")
                out.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
                i = j + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


glob = st.lists(st.sampled_from(["*", "**", "**/", "/", "a", "b", ".", "?", "[!a]", "[ab]", "[/]"]), max_size=10).map(
    "".join
)
path = st.lists(st.sampled_from(["a", "b", "/", ".", "ab", "a/"]), max_size=14).map("".join)


@fuzz_settings()
@given(pattern=glob, paths=st.lists(path, min_size=1, max_size=8))
@example(pattern="**/" * 9 + "x", paths=["a/" * 25 + "y"])
@example(pattern="*a" * 5 + "*b", paths=["a" * 120])
def test_globs_match_as_written_in_bounded_time(pattern, paths):
    from qmdlab.store.scan import GlobError, _glob_regex

    try:
        rx = re.compile(_glob_regex(pattern))
    except GlobError:
        return  # refused with one line: too many wildcards that could backtrack
    ref = re.compile(_reference_regex(pattern))
    for p in paths:
        with bounded((pattern, p)):
            got = rx.fullmatch(p) is not None
        if len(p) <= 14:  # the reference itself is only fast on short paths
            assert got == (ref.fullmatch(p) is not None), (pattern, p, rx.pattern)


@pytest.mark.parametrize("text", ["a: 1", "[1, 2]", "", "a: &x {b: *x}"])
def test_safe_yaml_agrees_with_pyyaml_where_both_answer(text):
    from qmdlab.store import safeyaml

    try:
        want = yaml.safe_load(text)
    except yaml.YAMLError:
        want = "error"
    try:
        got = safeyaml.load(text, max_bytes=1000, max_nodes=1000)
    except (yaml.YAMLError, safeyaml.YamlLimitError):
        got = "error"
    if "*x" not in text:
        assert got == want
    else:
        assert got == "error"  # a recursive alias is refused, not built
