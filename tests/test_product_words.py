"""The product speaks of itself alone: no tracker numbers, sessions, people or machine paths.

Code, comments, docstrings, CLI help, notebooks, configs, the Makefile, tests and committed data say
what qmdlab is and does. How it was built (an issue number, a work session, who did what) belongs
in the version history, not in the product; a measurement's machine and load belong on its
results page under ``docs/results/`` (and in the benchmark and experiment records that produce
them). Systems qmdlab borrows from are named by what they do, and defined once in
``docs/design.md``'s prior-art table.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: (pattern, why it is not product text)
HISTORY = [
    (r"\b[Ii]ssues? #?\d+|\b[Ii]ssue-\d+", "a tracker number"),
    (r"\b[Ss]ession[ -]\d+|\b(?:this|that|a later|an earlier) session\b", "a work session"),
    (r"\bDESIGN §", "a section of a document that is not in the repository (use docs/design.md)"),
    (r"\bthe lead\b|\bother engineers\b|\bhelpers?-\d\b", "people who built it"),
    (r"/tmp/i20", "a path on one machine"),
]
PRIOR_NAMES = (r"\b(AI Helper|super-pi|KnowDB|KBFold)\b", "a prior system's private name (say what it does)")
LOAD = (
    r"\b1-minute load\b|\bload average\b|\bload ~\d|\bat load [~\d]|\bunder load\b"
    r"|\bload \d+(?:\.\d+)?(?:[–-]\d+(?:\.\d+)?)?(?! ?s\b)(?=[ ,;)]|$)",
    "a load narrative (it belongs on a docs/results page)",
)
TMP_IN_DATA = (r"\"/tmp/", "a machine path in committed data")

TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".json", ".txt", ".cfg", ".sh"}
#: where a machine and its load are part of the record
MEASUREMENT_HOMES = ("docs/results/", "benchmarks/", "experiments/")


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    return [f for f in out.splitlines() if (REPO / f).is_file()]


def _product_files() -> list[str]:
    files = []
    for f in _tracked_files():
        p = Path(f)
        if p.suffix in TEXT_SUFFIXES or p.name in ("Makefile", "run") or f.startswith(".ci/"):
            if f.startswith("data/cisi") or f == "tests/test_product_words.py":
                continue
            files.append(f)
    return files


def _hits(pattern: str, files: list[str]) -> list[str]:
    rx = re.compile(pattern)
    found = []
    for f in files:
        try:
            text = (REPO / f).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for no, line in enumerate(text.splitlines(), 1):
            if rx.search(line):
                found.append(f"{f}:{no}: {line.strip()[:120]}")
    return found


@pytest.mark.parametrize("pattern,why", HISTORY, ids=[w for _, w in HISTORY])
def test_no_development_history(pattern, why):
    bad = _hits(pattern, _product_files())
    assert not bad, f"{why} in product text:\n" + "\n".join(bad[:30])


def test_prior_systems_are_named_by_what_they_do():
    files = [f for f in _product_files() if f != "docs/design.md"]
    bad = _hits(PRIOR_NAMES[0], files)
    assert not bad, f"{PRIOR_NAMES[1]}:\n" + "\n".join(bad[:30])


def test_no_load_narratives_outside_results_pages():
    files = [f for f in _product_files() if not f.startswith(MEASUREMENT_HOMES)]
    bad = _hits(LOAD[0], files)
    assert not bad, f"{LOAD[1]}:\n" + "\n".join(bad[:30])


def test_committed_data_holds_no_machine_paths():
    files = [f for f in _product_files() if f.endswith((".json", ".csv", ".jsonl")) and not f.startswith("tests/")]
    bad = _hits(TMP_IN_DATA[0], files)
    assert not bad, f"{TMP_IN_DATA[1]}:\n" + "\n".join(bad[:30])


@pytest.mark.parametrize(
    "line,pattern",
    [
        ("see issue 16 for why", HISTORY[0][0]),
        ("the pre-issue-16 defaults", HISTORY[0][0]),
        ("not run in this session", HISTORY[1][0]),
        ("Issue #3", HISTORY[0][0]),
        ("in session 4", HISTORY[1][0]),
        ("DESIGN §3 step 2", HISTORY[2][0]),
        ("the lead's CLI", HISTORY[3][0]),
        ("KBFold's leg", PRIOR_NAMES[0]),
        ("at load ~17", LOAD[0]),
        ("nice 19, load 3.6–3.9)", LOAD[0]),
        ("with 2 threads at load 12 on 2", LOAD[0]),
        ('"out": "/tmp/scale-out"', TMP_IN_DATA[0]),
    ],
)
def test_patterns_catch_what_they_name(line, pattern):
    assert re.search(pattern, line)


@pytest.mark.parametrize(
    "line",
    [
        "the issues command",
        "a session cookie",
        "tissue 3",
        "download ~2 GB",
        "load 0.50 s, first call 1.00 s",
        "called at load time only",
    ],
)
def test_patterns_leave_product_words_alone(line):
    assert not any(re.search(p, line) for p, _ in HISTORY + [PRIOR_NAMES, LOAD])
