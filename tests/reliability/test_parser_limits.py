"""Parser limits (:mod:`qmdlab.store.limits`): what a hostile note or config can cost is bounded.

The probe's reproductions: a 520-byte YAML alias bomb in a note's front matter ran ``update``
for 600 s to 11 GB; a note of 40,000 tags (309 KB) took 39 s (a quadratic de-duplication);
``collection import-qmd`` on a 220-byte ``index.yml`` with nested brace expansion ran over 90 s.
Each runs here in a child process with a wall-clock limit and an address-space cap, so the old
behaviour fails the test instead of stalling the suite or the machine.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.errors import ConfigError
from qmdlab.store import Index, limits
from qmdlab.store.frontmatter import normalize_tags, parse_front_matter

from .conftest import cli_env

CHILD_TIMEOUT_S = 60
CHILD_MAX_RSS_MB = 600  # the child's peak resident memory (imports included)


def alias_bomb(levels: int = 8, fan: int = 9) -> str:
    """Front matter whose aliases expand to ``fan ** levels`` scalars (43 million here) in ~300 bytes."""
    lines = ["---", "a: &a [" + ",".join(["lol"] * fan) + "]"]
    prev = "a"
    for name in "bcdefghijk"[: levels - 1]:
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * fan) + "]")
        prev = name
    lines += [f"tags: [*{prev}]", "title: bomb", "---", "# Bomb", "", "body words"]
    return "\n".join(lines) + "\n"


def _limit_memory() -> None:  # runs in the child: never let an old, unbounded parser take the machine
    cap = 8 * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


# Runs ``qmdlab`` and, however it ends, writes its own memory high-water mark (VmHWM, KiB) to a file.
# VmHWM belongs to the program's own address space, made at exec; ru_maxrss would also count the
# pages the child inherited from this (possibly large) test process at fork. The figure is written at
# exit (``atexit``): the ``qmdlab`` process leaves through ``os._exit`` once its exit handlers have run
# (``qmdlab.cli.run``), so code after the command would not run.
_MEASURED = """
import atexit, os, runpy, sys
def _report():
    with open("/proc/self/status") as status:
        hwm = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["HWM_REPORT_FILE"], "w") as out:
        out.write(hwm)
atexit.register(_report)
sys.argv = ["qmdlab", *sys.argv[1:]]
runpy.run_module("qmdlab.cli", run_name="__main__")
"""


def _run_child(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``qmdlab ARGS`` in a child: (result, seconds, the child's own peak resident memory in MB)."""
    with tempfile.TemporaryDirectory() as d:
        hwm_file = Path(d) / "hwm"
        start = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _MEASURED, *args],
                env={**env, "HWM_REPORT_FILE": str(hwm_file)},
                capture_output=True,
                text=True,
                timeout=CHILD_TIMEOUT_S,
                preexec_fn=_limit_memory,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"qmdlab {' '.join(args[:3])} … ran past {CHILD_TIMEOUT_S} s")
        seconds = time.monotonic() - start
        assert hwm_file.is_file(), f"the child wrote no memory figure: {proc.stderr[-500:]}"
        peak_kib = int(hwm_file.read_text())
    assert peak_kib > 10_000, peak_kib  # a Python that imported qmdlab holds more than 10 MB: the figure is real
    return proc, seconds, peak_kib / 1024


@pytest.fixture
def env(tmp_path):
    return cli_env(tmp_path / "home")


def _notes(root: Path, bad: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "good.md").write_text("# Good\n\nan ordinary note about herons\n", encoding="utf-8")
    for name, text in bad.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_alias_bomb_note_is_skipped_with_a_reason_in_bounded_time_and_memory(tmp_path, env):
    bomb = alias_bomb()
    assert len(bomb.encode()) < 520
    root = _notes(tmp_path / "kb", {"bomb.md": bomb})
    index = tmp_path / "idx"
    proc, seconds, rss = _run_child(["--index", str(index), "collection", "add", str(root), "--name", "kb"], env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert seconds < 30 and rss < CHILD_MAX_RSS_MB, (seconds, rss)
    assert "skipped (frontmatter: front matter over the limit: more than" in proc.stdout, proc.stdout
    assert "kb/bomb.md" in proc.stdout and "1 new" in proc.stdout
    with Index.open(str(index)) as idx:
        assert set(idx.documents()["docno"]) == {"kb/good.md"}


def test_forty_thousand_tags_are_linear_and_capped(tmp_path, env):
    tags = [f"tag{i:05d}" for i in range(40_000)]
    start = time.monotonic()
    assert len(normalize_tags(tags + tags)) == 40_000  # the quadratic step: 13 s before, milliseconds now
    assert time.monotonic() - start < 2
    note = "---\ntags: [" + ", ".join(tags) + "]\n---\n# Tagged\n"
    assert 300_000 < len(note) < 420_000
    start = time.monotonic()
    fm = parse_front_matter(note)
    assert time.monotonic() - start < 2 and fm.problem is not None and fm.metadata == {}
    # under the size cap but over the tag cap: skipped too, saying why
    many = " ".join(f"t{i}" for i in range(limits.MAX_TAGS + 1))
    assert len(many) < limits.MAX_FRONT_MATTER_BYTES
    root = _notes(tmp_path / "kb", {"tags.md": note, "many.md": f"---\ntags: {many}\n---\n# Many\n"})
    with Index(tmp_path / "idx") as idx:
        idx.add_collection("kb", root)
        start = time.monotonic()
        rep = idx.update()
        assert time.monotonic() - start < 10
        assert rep.new == 1 and rep.skip_counts() == {"frontmatter": 2}
        details = dict(rep.skip_details)
        assert (
            details["kb/many.md"]
            == f"front matter over the limit: {limits.MAX_TAGS + 1} tags (at most {limits.MAX_TAGS})"
        )
        assert "bytes" in details["kb/tags.md"]
    # exactly at the cap: indexed
    ok = parse_front_matter("---\ntags: " + " ".join(f"t{i}" for i in range(limits.MAX_TAGS)) + "\n---\nx")
    assert ok.problem is None and len(ok.metadata["tags"]) == limits.MAX_TAGS


def test_front_matter_that_yaml_cannot_build_is_text_not_a_failed_update(tmp_path):
    """``date: 2024-13-45`` (a date PyYAML resolves and cannot build), an integer of 5,000 digits and
    deep nesting raised out of ``update`` (ValueError, RecursionError): one note stopped every other."""
    bad = {
        "date.md": "---\ndate: 2024-13-45\n---\n# Date\n",
        "stamp.md": "---\ntitle: !!timestamp nope\n---\n# Stamp\n",  # AttributeError inside PyYAML
        "digits.md": "---\nn: " + "1" * 5000 + "\n---\n# Digits\n",
        "deep.md": "---\nx: " + "[" * 3000 + "]" * 3000 + "\n---\n# Deep\n",
        "recursive.md": "---\nx: &a [*a]\n---\n# Recursive\n",
    }
    root = _notes(tmp_path / "kb", bad)
    with Index(tmp_path / "idx") as idx:
        idx.add_collection("kb", root)
        rep = idx.update()
        docs = set(idx.documents()["docno"])
        assert {"kb/good.md", "kb/date.md", "kb/stamp.md", "kb/digits.md"} <= docs  # malformed YAML: indexed as text
        assert rep.skip_counts() == {"frontmatter": 2}  # nested past the limit, a recursive alias
        assert {p for p, r in rep.skipped_paths} == {"kb/deep.md", "kb/recursive.md"}


def test_brace_bomb_index_yml_is_refused_in_bounded_time(tmp_path, env):
    notes = _notes(tmp_path / "kb", {})
    pattern = "**/*" + "{a,b,c}" * 14  # 3 ** 14 = 4.8 million globs
    other = "{" * 40 + "x" + "}" * 40
    yml = tmp_path / "index.yml"
    yml.write_text(
        f"collections:\n  bomb:\n    path: {notes}\n    pattern: '{pattern}'\n"
        f"  deep:\n    path: {notes}\n    pattern: '{other}'\n",
        encoding="utf-8",
    )
    assert len(yml.read_bytes()) - 2 * len(str(notes)) < 300  # two collections of about 130 bytes besides the paths
    proc, seconds, rss = _run_child(["--index", str(tmp_path / "idx"), "collection", "import-qmd", str(yml)], env)
    assert seconds < 30 and rss < CHILD_MAX_RSS_MB, (seconds, rss)
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "bomb: pattern expands to more than 256 globs" in out, out
    assert "deep: pattern nests braces more than 32 deep" in out, out


def test_a_config_alias_bomb_is_one_line(tmp_path, env):
    index = tmp_path / "idx"
    index.mkdir()
    body = alias_bomb(levels=9).split("---\n")[1]
    (index / "collections.yaml").write_text(body + "collections: []\n", encoding="utf-8")
    (index / "index.sqlite").touch()
    proc, seconds, rss = _run_child(["--index", str(index), "collection", "list"], env)
    assert seconds < 30 and rss < CHILD_MAX_RSS_MB, (seconds, rss)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    assert "collections.yaml: more than 100000 YAML nodes" in proc.stderr


GLOB_BOMBS = [
    "**/" * 12 + "x.md",  # 51 s against a 25-folder path before
    "*a" * 6 + "*b",  # 2 minutes against a 120-character name before
    "**a" * 8 + "b",
]


@pytest.mark.parametrize("pattern", GLOB_BOMBS, ids=["dstar-chain", "star-chain", "double-star-chain"])
def test_glob_matching_cannot_backtrack_without_bound(tmp_path, pattern):
    """The masks of ``update`` and the patterns of ``multi-get`` (an MCP agent's) are globs: they are
    matched in bounded time against any path."""
    from qmdlab.store.scan import glob_match

    for path in ("a/" * 25 + "y.md", "a" * 120, "a" * 2000 + "/c"):
        start = time.monotonic()
        glob_match(path, pattern)
        assert time.monotonic() - start < 0.5, (pattern, len(path))
    root = tmp_path / ("a/" * 20)
    root.mkdir(parents=True)
    (root / ("a" * 120 + ".md")).write_text("# deep\n", encoding="utf-8")
    with Index(tmp_path / "idx") as idx:
        idx.add_collection("kb", tmp_path / "a")
        idx.update()
        start = time.monotonic()
        res = CliRunner().invoke(cli, ["--index", str(tmp_path / "idx"), "multi-get", pattern])
        assert time.monotonic() - start < 5 and "Traceback" not in res.output


def test_a_glob_that_would_backtrack_is_refused_with_one_line(tmp_path):
    root = _notes(tmp_path / "kb", {})
    with Index(tmp_path / "idx") as idx:
        with pytest.raises(ConfigError, match="wildcards whose matches could backtrack"):
            idx.add_collection("kb", root, mask="**/a*b**/c*d**/e*.md")
        with pytest.raises(ConfigError, match="over 1024"):
            idx.add_collection("kb", root, mask="x" * 2000)
        assert idx.collections() == []
