"""`make demo` ends with where its time went (scripts/demo.py): each tier child writes its
timings to ``$QMDLAB_DEMO_TIMES`` and the parent prints them per tier and stage. Fast: the tier
children are bare interpreters writing a JSON file."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _demo():
    spec = importlib.util.spec_from_file_location("demo_script_times", REPO / "scripts" / "demo.py")
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


def _report(tier: int, cached: int) -> dict:
    return {
        "tier": tier,
        "imports_s": 1.0,
        "suite_s": 9.0,
        "tier_s": 10.6,
        "index_s": 4.0,
        "query_s": 3.0,
        "ablation_s": 1.5,
        "ranx_s": 0.25,
        "report_s": 0.5,
        "queries": 5,
        "queries_cached": cached,
        "stages": {"expand": 1.25, "rerank": 1.5, "fuse": 0.01},
    }


def _flat(text: str) -> list[str]:
    return [" ".join(ln.split()) for ln in text.splitlines()]


def test_summary_adds_up_and_splits_stages_only_without_cached_traces():
    demo = _demo()
    lines = _flat(demo.time_summary({1: 12.0, 2: 11.0}, {1: _report(1, 0), 2: _report(2, 5)}, 0.25, 24.0))
    assert lines[0] == "where the time went (wall seconds):"
    t1, t2 = lines.index("tier 1 12.0 s"), lines.index("tier 2 11.0 s")
    # tier 1: 1.4 s before _tier started + 1 s imports; the stage split, sorted, < 0.05 s (fuse) left out
    assert lines[t1 + 1] == "start-up + imports 2.4 s (process start 1.4, imports 1.0)"
    assert lines[t1 + 2] == "index + embedding 4.0 s"
    assert lines[t1 + 3] == "5 queries 3.0 s (rerank 1.5, expand 1.2, other 0.2)"
    assert lines[t1 + 4] == "ablation 1.5 s"
    assert lines[t1 + 5] == "saving runs + traces 0.2 s"  # run_suite 9 - 4 - 3 - 1.5 - ranx 0.25
    assert lines[t1 + 6] == "ranx check 0.2 s"
    assert lines[t1 + 7] == "tables + score separation 0.5 s"
    assert lines[t1 + 8] == "models + other 0.1 s"  # tier 10.6 - imports 1 - run_suite 9 - tables 0.5
    assert lines[t2 + 3] == "5 queries 3.0 s (5 traces from cache)"  # cached: no stage split
    assert lines[-3:] == ["trained-reranker rows 0.2 s", "parent (other) 0.8 s", "total 24.0 s"]  # 24 - 23 - 0.25


def test_missing_child_report_is_said_not_invented():
    text = _demo().time_summary({1: 5.0}, {1: None}, 0.0, 5.0)
    assert "(no timings written by the child)" in text


def test_main_reads_what_each_tier_child_wrote(monkeypatch, capsys):
    import qmdlab.subproc as sp

    demo = _demo()
    real = sp.run_child
    seen = []

    def fake(argv, **kw):  # each "tier" writes its report where the parent told it to
        tier = int(argv[-1])
        path = kw["env"]["QMDLAB_DEMO_TIMES"]
        seen.append(Path(path).name)
        code = f"import json; open({path!r}, 'w').write(json.dumps({_report(tier, 0)!r}))"
        return real([sys.executable, "-c", code], **kw)

    monkeypatch.setattr(sp, "run_child", fake)
    monkeypatch.setattr(demo, "_reranker_rows", lambda: None)
    assert demo.main(["--llm-queries", "2"]) == 0
    assert seen == ["tier1.json", "tier2.json", "tier3.json"]  # tier 3: the frontier
    out = capsys.readouterr().out
    summary = _flat(out[out.index("where the time went") :])
    assert summary.count("index + embedding 4.0 s") == 2
    assert summary.count("5 queries 3.0 s (rerank 1.5, expand 1.2, other 0.2)") == 2
    assert "(no timings written by the child)" not in summary
    assert any(line.startswith("frontier (tier 3)") for line in summary)
    assert demo.main(["--llm-queries", "2", "--no-frontier"]) == 0 and seen[-1] == "tier2.json"
