"""docs/design.md names each pipeline constant as its PipelineConfig field: every ``field = value``
written in backticks there must be that field's default, and every field named must exist. Its
preset table lists the registry's presets, and its trace table the columns of each trace table; the
files, fusion and blend methods, keyword channels, sampling and ``expand-docs`` defaults it names
are the code's."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

from qmdlab.pipeline.config import PipelineConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "design.md"
ASSIGNMENT = re.compile(r"`([a-z][a-z0-9_]*) = ([^`]+)`")


def _named() -> list[tuple[str, str]]:
    return ASSIGNMENT.findall(DOC.read_text(encoding="utf-8"))


def test_the_design_doc_names_constants():
    assert len(_named()) >= 40, "docs/design.md should name the pipeline's constants as `field = value`"


def test_every_named_constant_is_the_configs_default():
    defaults = PipelineConfig()
    known = {f.name for f in fields(PipelineConfig)}
    wrong = []
    for name, text in _named():
        if name not in known:
            wrong.append(f"{name}: not a PipelineConfig field")
            continue
        want = ast.literal_eval(text)
        got = getattr(defaults, name)
        if isinstance(got, tuple):
            want = tuple(want)
        if got != want:
            wrong.append(f"{name}: docs/design.md says {text}, PipelineConfig() has {got!r}")
    assert not wrong, "\n".join(wrong)


def test_the_check_would_catch_a_wrong_value():
    text = "`rrf_k = 61`"
    name, value = ASSIGNMENT.findall(text)[0]
    assert getattr(PipelineConfig(), name) != ast.literal_eval(value)


def _table(first_header: str) -> list[list[str]]:
    """The rows (cells) of the design doc's table whose header starts with ``| first_header |``."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def test_the_preset_table_is_the_registry():
    from qmdlab.models.registry import PRESETS

    listed = [row[0].strip("`") for row in _table("preset")]
    assert sorted(listed) == sorted(PRESETS), f"docs/design.md's preset table: {listed}; the registry: {list(PRESETS)}"


def test_the_trace_table_columns_are_the_schemas():
    from qmdlab.pipeline.trace import SCHEMAS

    doc = {row[0].strip("`"): [c.strip() for c in row[1].split(" (")[0].split(",")] for row in _table("table")}
    assert list(doc) == list(SCHEMAS), f"docs/design.md's trace tables {list(doc)}, the code's {list(SCHEMAS)}"
    wrong = {t: (cols, list(SCHEMAS[t])) for t, cols in doc.items() if cols != list(SCHEMAS[t])}
    assert not wrong, f"docs/design.md's trace columns differ from qmdlab.pipeline.trace.SCHEMAS: {wrong}"


REPO = DOC.parents[1]


def test_every_path_it_names_exists():
    """A backticked ``area/module.py`` is a file under ``qmdlab/`` (or, spelled from the top, of the repository)."""
    missing = []
    for token in re.findall(r"`([\w./-]+\.py|[\w/]+/)`", DOC.read_text(encoding="utf-8")):
        if not any((base / token).exists() for base in (REPO, REPO / "qmdlab")):
            missing.append(token)
    assert not missing, f"docs/design.md names files that do not exist: {missing}"


def test_the_fusion_and_blend_methods_are_the_configs():
    from qmdlab.pipeline.config import BLEND_METHODS, FUSION_METHODS

    text = DOC.read_text(encoding="utf-8")
    fusion = text.split("4. **Fusion**")[1].split("5. **Chunk selection**")[0]
    listed = set(re.findall(r"^   - `(\w+)`(?:, `(\w+)`)?:", fusion, re.M))
    listed = {m for pair in listed for m in pair if m}
    assert '`fusion = "qmd_rrf"`' in fusion and FUSION_METHODS[0] == "qmd_rrf"
    assert listed == set(FUSION_METHODS[1:]) | {"learned"}, f"docs/design.md's other fusion methods {sorted(listed)}"
    blend = text.split("7. **Blend**")[1].split("8. **Finish**")[0]
    named = re.findall(r'`blend = "(\w+)"`', blend) + [
        m for m in re.findall(r"`([a-z_]+)`", blend) if not m.startswith("blend")
    ]
    assert sorted(named) == sorted(BLEND_METHODS), f"docs/design.md's blend methods {named}, the code's {BLEND_METHODS}"


def test_the_sampling_defaults_are_the_expanders():
    from qmdlab.models.llama_expand import SamplingConfig

    m = re.search(r"temperature ([\d.]+), top_k (\d+), top_p ([\d.]+), at most (\d+)\s+tokens", DOC.read_text("utf-8"))
    assert m, "docs/design.md should state the expander's sampling defaults"
    s = SamplingConfig()
    assert (float(m[1]), int(m[2]), float(m[3]), int(m[4])) == (s.temperature, s.top_k, s.top_p, s.max_tokens)


def test_the_expand_docs_defaults_are_the_commands():
    from qmdlab.pipeline.doc_expand import DEFAULT_PER_CHUNK, DEFAULT_TOP_K

    text = DOC.read_text(encoding="utf-8")
    assert f"`-n {DEFAULT_PER_CHUNK}`" in text and f"`--top-k {DEFAULT_TOP_K}`" in text


def test_the_keyword_channels_are_the_pipelines():
    from qmdlab.pipeline.retrieve import KEYWORD_CHANNELS

    named = re.findall(r"`weight_original_(\w+) = ", DOC.read_text(encoding="utf-8"))
    assert [n for n in named if n not in ("fts", "vec")] == list(KEYWORD_CHANNELS)


def test_the_training_recipes_are_the_run_configs():
    from qmdlab.training.grpo import GRPORunConfig
    from qmdlab.training.sft import SFTRunConfig

    text = DOC.read_text(encoding="utf-8").replace("\n", " ")
    sft = re.search(
        r"SFT: LoRA r (\d+) / α (\d+) .*?; lr ([\de.-]+) (\w+); (\d+) epochs; effective\s+batch (\d+); max length (\d+)",
        text,
    )
    assert sft, "docs/design.md should state the SFT recipe"
    s = SFTRunConfig()
    assert (int(sft[1]), int(sft[2]), float(sft[3]), sft[4], float(sft[5])) == (
        s.lora_r,
        s.lora_alpha,
        s.learning_rate,
        s.lr_scheduler_type,
        s.num_train_epochs,
    )
    assert int(sft[6]) == s.per_device_train_batch_size * s.gradient_accumulation_steps
    assert int(sft[7]) == s.max_length
    grpo = re.search(
        r"GRPO: .*?LoRA \(r (\d+) / α (\d+) on q, v\), (\d+) generations, completions\s+of at most (\d+) tokens, "
        r"β = ([\d.]+), lr ([\de.-]+)\.",
        text,
    )
    assert grpo, "docs/design.md should state the GRPO recipe"
    g = GRPORunConfig()
    assert [float(x) for x in grpo.groups()] == [
        g.lora_r,
        g.lora_alpha,
        g.num_generations,
        g.max_completion_length,
        g.beta,
        g.learning_rate,
    ]
    assert g.lora_targets == ["q_proj", "v_proj"]
