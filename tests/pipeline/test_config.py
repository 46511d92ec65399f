"""PipelineConfig: docs/design.md, pipeline defaults, loading, errors, diff."""

from __future__ import annotations

import pytest

from qmdlab.errors import ConfigError
from qmdlab.pipeline.config import PipelineConfig


def test_defaults_are_design_constants():
    c = PipelineConfig()
    assert (c.probe_limit, c.strong_signal_min, c.strong_signal_gap) == (20, 0.85, 0.15)
    assert (c.weight_original_fts, c.weight_original_vec, c.weight_lex, c.weight_vec, c.weight_hyde) == (
        2.0,
        2.0,
        1.0,
        1.0,
        1.0,
    )
    assert (c.rrf_k, c.bonus_rank1, c.bonus_rank23, c.fusion) == (60, 0.05, 0.02, "qmd_rrf")
    assert (c.candidate_limit, c.list_limit, c.intent_term_bonus) == (40, 20, 0.5)
    assert (c.blend, c.blend_bands, c.blend_weights) == ("position", (3, 10), (0.75, 0.60, 0.40))
    assert c.expand and c.hyde and c.vector and c.rerank and not c.hyde_as_document
    assert (c.norm_weight_fts, c.norm_weight_vec) == (1.0, 0.9)
    hash(c)  # frozen and hashable: usable as a cache key


def test_frozen():
    with pytest.raises(AttributeError):
        PipelineConfig().rrf_k = 3  # type: ignore[misc]


def test_unknown_key_names_it_and_lists_valid_options():
    with pytest.raises(ConfigError) as err:
        PipelineConfig.from_dict({"candidate_limt": 5})
    msg = str(err.value)
    assert "'candidate_limt'" in msg and "did you mean 'candidate_limit'" in msg and "rrf_k" in msg


def test_wrong_type_names_option():
    with pytest.raises(ConfigError, match="'rrf_k' must be int"):
        PipelineConfig.from_dict({"rrf_k": "sixty"})
    with pytest.raises(ConfigError, match="'rerank' must be bool"):
        PipelineConfig.from_dict({"rerank": 1})


def test_bad_bands_and_methods():
    with pytest.raises(ConfigError, match="blend_bands"):
        PipelineConfig(blend_bands=(10, 3))
    with pytest.raises(ConfigError, match="blend method 'x'.*position"):
        PipelineConfig(blend="x")
    with pytest.raises(ConfigError, match="limit"):
        PipelineConfig(limit=0)


def test_yaml_and_toml_roundtrip(tmp_path):
    y = tmp_path / "p.yaml"
    y.write_text("pipeline:\n  rrf_k: 30\n  blend_weights: [0.5, 0.5, 0.5]\n  fusion: rrf\n")
    c = PipelineConfig.from_yaml(y)
    assert (c.rrf_k, c.blend_weights, c.fusion) == (30, (0.5, 0.5, 0.5), "rrf")
    t = tmp_path / "p.toml"
    t.write_text("weight_lex = 1\nblend = 'score'\n")
    c2 = PipelineConfig.from_file(t)
    assert c2.weight_lex == 1.0 and isinstance(c2.weight_lex, float) and c2.blend == "score"
    assert PipelineConfig.from_dict(c.to_dict()) == c


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(ConfigError, match="nope.yaml: config file not found"):
        PipelineConfig.from_yaml(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rrf_k: [\n")
    with pytest.raises(ConfigError, match="bad.yaml: malformed YAML"):
        PipelineConfig.from_yaml(bad)
    unk = tmp_path / "unk.yaml"
    unk.write_text("colour: red\n")
    with pytest.raises(ConfigError, match="unk.yaml: unknown pipeline option 'colour'"):
        PipelineConfig.from_yaml(unk)


def test_replace_and_diff():
    c = PipelineConfig().replace(weight_lex=0.5, tags=["git"])
    assert c.tags == ("git",)
    assert c.diff() == "weight_lex: 1.0 -> 0.5\ntags: () -> ('git',)"
    assert PipelineConfig().diff() == "(defaults)"
    with pytest.raises(ConfigError, match="unknown pipeline option 'bogus'"):
        PipelineConfig().replace(bogus=1)


def test_list_weight():
    c = PipelineConfig(weight_original_vec=3.0, weight_hyde=0.25)
    assert [
        c.list_weight(s, q)
        for s, q in [("fts", "original"), ("vec", "original"), ("fts", "lex"), ("vec", "vec"), ("vec", "hyde")]
    ] == [2.0, 3.0, 1.0, 1.0, 0.25]


def _key_payload(config: PipelineConfig) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


def test_recorded_configs_keep_their_cache_key():
    """``to_dict()`` of these configs was recorded before the options declared their stages and must
    not move: the trace cache's key hashes its recorded part, and recordings keyed on all of it
    are adopted by that digest (``tests/eval/test_record_retune.py``)."""
    assert _key_payload(PipelineConfig()) == "34c056a43ae878a1"
    assert _key_payload(PipelineConfig(fusion="combmnz", rrf_k=30, expand=False)) == "e69cd06208ff2989"
    later = PipelineConfig(weight_original_like=1.0, chunker="headings", bm25_weight_doc_queries=0.5)
    assert _key_payload(later) == "c03c85d75665ab86"


def test_every_option_declares_its_stage_and_whether_it_changes_a_recording():
    from dataclasses import fields

    from qmdlab.pipeline.config import CONFIG_STAGES, OMITTED_AT_DEFAULT

    for f in fields(PipelineConfig):
        assert f.metadata["stage"] in CONFIG_STAGES, f.name
        assert isinstance(f.metadata["recorded"], bool) and isinstance(f.metadata["keyed_at_default"], bool)
    # what retune re-runs on recorded lists is exactly what needs no new recording
    cheap = {n for s in ("fusion", "blend", "finish") for n in PipelineConfig.stage_fields()[s]} | {"candidate_limit"}
    assert set(PipelineConfig.field_names()) - PipelineConfig.recorded_fields() == cheap
    assert "weight_original_like" in OMITTED_AT_DEFAULT and "rrf_k" not in OMITTED_AT_DEFAULT
