"""The tune notebook's BM25 controls: a change re-runs the recorded BM25 lists
(qmdlab.eval.lexical.LexicalStudy) and the numbers shown are that study's, with no model call."""

from __future__ import annotations

import pytest

from ..conftest import require

require.extra("notebooks")  # marimo (and matplotlib): without the extra this module skips, under CI it fails

import marimo as mo  # noqa: E402

from .conftest import NOTEBOOKS, RECORD_ARGS, run_notebook  # noqa: E402


@pytest.mark.slow
def test_tune_bm25_controls_rescore_through_lexical_study(nb_env, monkeypatch):
    from qmdlab.eval.lexical import LexicalStudy
    from qmdlab.models import fakes

    run_notebook(NOTEBOOKS / "tune.py", *RECORD_ARGS, monkeypatch=monkeypatch)  # records the traces (cached)

    def boom(self, *a, **k):
        raise AssertionError("a model was called while changing a BM25 knob")

    monkeypatch.setattr(fakes.KeywordEmbedder, "embed_query", boom)
    lexical = mo.ui.dictionary(
        {
            "bm25_weight_title": mo.ui.slider(0.0, 10.0, value=0.0),
            "bm25_weight_filepath": mo.ui.slider(0.0, 4.0, value=0.0),
            "bm25_prefix": mo.ui.switch(value=False),
        }
    )
    _, defs = run_notebook(NOTEBOOKS / "tune.py", *RECORD_ARGS, monkeypatch=monkeypatch, defs={"knobs": lexical})
    config, study = defs["config"], defs["study"]
    assert config == defs["defaults"].replace(bm25_weight_title=0.0, bm25_weight_filepath=0.0, bm25_prefix=False)
    assert isinstance(defs["lexical_study"], LexicalStudy)
    again = LexicalStudy(study, defs["lexical_study"].index).evaluate(config)
    assert defs["evaluation"].metrics == again.metrics
    assert defs["evaluation"].final.equals(again.final)
    # the BM25 lists really were re-run: they differ from the recorded ones
    assert not defs["lexical_study"].for_config(config).trace.lists.equals(study.trace.lists)
