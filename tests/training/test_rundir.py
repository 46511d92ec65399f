"""Run directories: a finished step returns its stored result instead of running again."""

from __future__ import annotations

from types import SimpleNamespace

from qmdlab.training import rundir


def test_resumable_returns_the_stored_result_of_a_finished_run(tmp_path):
    calls: list[str] = []

    @rundir.resumable("out")
    def step(cfg, *, note: str = "") -> dict:
        calls.append(note)
        rundir.mark_done(cfg.out, {"note": note})
        return {"note": note, "fresh": True}

    cfg = SimpleNamespace(out=str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    assert step.__name__ == "step"
    assert step(cfg, note="a") == {"note": "a", "fresh": True}
    assert step(cfg, note="b") == {"note": "a"}  # the DONE marker's result; the step did not run
    assert calls == ["a"]
