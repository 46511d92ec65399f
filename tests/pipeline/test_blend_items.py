"""The blend tuples' flat vocabulary (``blend_weight_1..3``, ``blend_band_1..2``) lives in
``PipelineConfig`` (:data:`BLEND_ITEMS`, ``flat``, ``replace_flat``); the tuner uses it.

Differential: ``replace_flat`` against the tuner's former ``apply_params`` (copied below as it was
before the vocabulary moved), on random knob sets.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qmdlab.errors import ConfigError
from qmdlab.eval.optimise import BLEND_SPACE, FUSION_SPACE, apply_params, params_of
from qmdlab.pipeline.config import BLEND_ITEMS, PipelineConfig


def _old_apply_params(config: PipelineConfig, params: dict) -> PipelineConfig:
    plain = {k: v for k, v in params.items() if not k.startswith(("blend_weight_", "blend_band_"))}
    weights, bands = list(config.blend_weights), list(config.blend_bands)
    for k, v in params.items():
        if k.startswith("blend_weight_"):
            weights[int(k[-1]) - 1] = float(v)
        elif k.startswith("blend_band_"):
            bands[int(k[-1]) - 1] = int(v)
    bands[1] = max(bands)
    return config.replace(**plain, blend_weights=tuple(weights), blend_bands=tuple(bands))


def _knobs():
    space = FUSION_SPACE + BLEND_SPACE
    return st.lists(st.sampled_from(space), unique=True, max_size=len(space)).flatmap(
        lambda ps: st.fixed_dictionaries(
            {
                p.name: (
                    st.integers(int(p.low), int(p.high))
                    if p.kind == "int"
                    else st.floats(p.low, p.high, allow_nan=False)
                )
                for p in ps
            }
        )
    )


@settings(max_examples=200, deadline=None)
@given(_knobs())
def test_replace_flat_matches_the_former_apply_params(params):
    base = PipelineConfig()
    new = base.replace_flat(**params)
    assert new == _old_apply_params(base, params) == apply_params(base, params)
    assert new.to_dict() == _old_apply_params(base, params).to_dict()  # the trace-cache key too
    assert params_of(new, [p for p in FUSION_SPACE + BLEND_SPACE if p.name in params]) == {
        k: new.flat(k) for k in params
    }


def test_flat_names_read_the_tuple_items():
    c = PipelineConfig(blend_weights=(0.9, 0.5, 0.1), blend_bands=(2, 7))
    assert [c.flat(f"blend_weight_{i}") for i in (1, 2, 3)] == [0.9, 0.5, 0.1]
    assert [c.flat(f"blend_band_{i}") for i in (1, 2)] == [2, 7]
    assert set(BLEND_ITEMS.values()) == {"blend_weights", "blend_bands"}
    assert {p.name for p in BLEND_SPACE} == {
        f"{k}_{i + 1}" for k, f in BLEND_ITEMS.items() for i in range(len(getattr(c, f)))
    }


def test_default_config_and_its_key_are_unchanged():
    c = PipelineConfig()
    assert c.replace_flat() == c and c.replace_flat().to_dict() == c.to_dict()
    assert not any(k.startswith(tuple(BLEND_ITEMS)) and k not in BLEND_ITEMS.values() for k in c.to_dict())


@pytest.mark.parametrize("name", ["blend_weight_4", "blend_band_0", "no_such_option"])
def test_unknown_flat_names_are_config_errors(name):
    with pytest.raises(ConfigError, match=name):
        PipelineConfig().flat(name)
