"""Presets, per-role override precedence, lazy construction, one-line errors."""

import sys

import pytest

from qmdlab.errors import ConfigError, ModelError
from qmdlab.models import ModelSet, load_models, resolve_refs
from qmdlab.models.fakes import KeywordEmbedder
from qmdlab.models.llama_embed import LlamaEmbedder
from qmdlab.models.llama_expand import DETERMINISTIC, LlamaExpander
from qmdlab.models.llama_rerank import LlamaReranker
from qmdlab.models.registry import (
    EMBEDDINGGEMMA_Q8,
    MINILM,
    PRESETS,
    QMD_EMBED,
    QMD_EXPAND,
    QMD_RERANK,
    QWEN_CODER,
    resolve_path,
)

CLEAN = {}  # an empty environment


def test_presets_exact():
    assert PRESETS["qmd"] == {"embed": QMD_EMBED, "expand": QMD_EXPAND, "rerank": QMD_RERANK}
    assert QMD_EMBED == "hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf"
    # the default embeds with qmd's own embedder and file; MiniLM is one flag away
    assert PRESETS["offline"] == {"embed": EMBEDDINGGEMMA_Q8, "expand": QWEN_CODER, "rerank": QWEN_CODER}
    assert PRESETS["offline-mini"] == {"embed": MINILM, "expand": QWEN_CODER, "rerank": QWEN_CODER}
    assert resolve_refs(None, None, config={}, environ=CLEAN)[0] == "offline"


def test_precedence_flag_over_env_over_config_over_preset(tmp_path):
    cfg = tmp_path / "models.yaml"
    cfg.write_text("models:\n  preset: tiny\n  embed: /cfg/e.gguf\n  expand: /cfg/x.gguf\n  rerank: /cfg/r.gguf\n")
    env = {"QMDLAB_EXPAND_MODEL": "/env/x.gguf", "QMDLAB_RERANK_MODEL": "/env/r.gguf"}
    name, refs = resolve_refs(None, {"rerank": "/flag/r.gguf"}, config=cfg, environ=env)
    assert name == "tiny"
    assert refs == {"embed": "/cfg/e.gguf", "expand": "/env/x.gguf", "rerank": "/flag/r.gguf"}
    assert resolve_refs("qmd", None, config=cfg, environ={"QMDLAB_PRESET": "fake"})[0] == "qmd"
    assert resolve_refs(None, None, config=cfg, environ={"QMDLAB_PRESET": "fake"})[0] == "fake"


def test_default_config_file_under_qmdlab_home(qmdlab_home, monkeypatch):
    for var in ("QMDLAB_PRESET", "QMDLAB_EMBED_MODEL", "QMDLAB_EXPAND_MODEL", "QMDLAB_RERANK_MODEL"):
        monkeypatch.delenv(var, raising=False)
    qmdlab_home.mkdir(parents=True)
    (qmdlab_home / "models.yaml").write_text("preset: fake\nrerank: none\n")
    m = load_models()
    assert isinstance(m.embedder, KeywordEmbedder) and m.reranker is None


def test_bad_config_and_preset():
    with pytest.raises(ConfigError, match="unknown model preset 'big'"):
        resolve_refs("big", None, config={}, environ=CLEAN)
    with pytest.raises(ConfigError, match="unknown model config key"):
        resolve_refs(None, None, config={"embedder": "x"}, environ=CLEAN)


def test_load_models_is_lazy_and_typed(monkeypatch, tmp_path):
    monkeypatch.setenv("QMDLAB_CACHE", str(tmp_path / "empty-cache"))  # nothing downloaded, nothing touched
    m = load_models("qmd", sampling=DETERMINISTIC, n_threads=2)
    assert isinstance(m, ModelSet)
    assert isinstance(m.embedder, LlamaEmbedder) and isinstance(m.expander, LlamaExpander)
    assert isinstance(m.reranker, LlamaReranker)
    assert m.embedder.dim == 768 and m.embedder.template.name == "gemma"
    assert m.expander.family == "qwen3" and m.reranker.family == "qwen3-reranker"
    assert m.expander.llama.n_threads == 2 and not m.expander.llama.loaded
    assert not (tmp_path / "empty-cache").exists()


def test_embedding_fingerprint_tracks_template_and_chunking():
    a = load_models("offline-mini", expand="none", rerank="none").embedder
    b = load_models("offline-mini", expand="none", rerank="none", chunking={"chunk_size_chars": 900}).embedder
    c = load_models("offline-mini", embed=QMD_EMBED, expand="none", rerank="none").embedder
    assert len({a.fingerprint, b.fingerprint, c.fingerprint}) == 3
    assert a.fingerprint.startswith("pkg:all-minilm-l6-v2#")
    assert a.fingerprint == load_models("offline-mini", rerank="none").embedder.fingerprint


def test_embedding_fingerprint_tracks_truncation_length():
    a = LlamaEmbedder(lambda: None, "m.gguf", n_ctx=256, chunking={})
    b = LlamaEmbedder(lambda: None, "m.gguf", n_ctx=512, chunking={})
    assert a.fingerprint != b.fingerprint
    assert load_models("offline-mini", expand="none", rerank="none").embedder.llama.params["n_ctx"] == 256


def test_generic_expanders_are_bounded_qmd_one_is_not():
    from qmdlab.models.expansion import GRAMMAR, grammar_for

    off = load_models("offline", embed="none", rerank="none").expander
    assert off.grammar_text == grammar_for(6, 160, open_end=True)
    assert (off.sampling.temperature, off.sampling.max_tokens) == (0.0, 200)
    qmd = load_models("qmd", embed="none", rerank="none").expander
    assert qmd.grammar_text == GRAMMAR and qmd.sampling.max_tokens == 600 and qmd.sampling.temperature == 0.7


def test_expander_fingerprint_tracks_sampling():
    a = load_models("offline", embed="none", rerank="none").expander
    b = load_models("offline", embed="none", rerank="none", sampling=DETERMINISTIC).expander
    assert a.fingerprint != b.fingerprint


def test_object_override_passes_through():
    e = KeywordEmbedder(["x"])
    assert load_models("fake", embed=e).embedder is e


def test_missing_local_file_is_one_line_with_fix(tmp_path):
    with pytest.raises(ModelError, match="does not exist; fix the path.*QMDLAB_EMBED_MODEL") as err:
        resolve_path(str(tmp_path / "nope.gguf"))
    assert "\n" not in str(err.value)
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"PK\x03\x04")
    with pytest.raises(ModelError, match="not a GGUF file"):
        resolve_path(str(bad))


def test_missing_llama_cpp_names_install(monkeypatch, tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp` raise ImportError
    emb = load_models("fake", embed=str(gguf)).embedder
    with pytest.raises(ModelError, match=r"pip install 'qmdlab\[llama\]'"):
        emb.embed_query("x")


def _trained_expander_file(folder, sidecar: dict | str | None):
    import json

    gguf = folder / "expander-chatml-Q4_K_M.gguf"
    gguf.write_bytes(b"GGUF not loaded by this test")
    if sidecar is not None:
        text = sidecar if isinstance(sidecar, str) else json.dumps(sidecar)
        (folder / "expander-chatml-Q4_K_M.gguf.prompt.json").write_text(text)
    return gguf


def test_a_trained_expander_by_path_is_prompted_and_decoded_as_trained(tmp_path, monkeypatch):
    from qmdlab.models.expansion import GRAMMAR
    from qmdlab.models.registry import generic_instruct_grammar

    grammar = generic_instruct_grammar()
    gguf = _trained_expander_file(
        tmp_path, {"prefix": "<sys><u>", "suffix": "</u><a>", "family": "chatml", "grammar": grammar}
    )
    monkeypatch.setenv("QMDLAB_EXPAND_MODEL", str(gguf))
    exp = load_models("offline", embed="none", rerank="none").expander
    assert (
        exp.prompt(" git rebase ", "undo")
        == "<sys><u>/no_think Expand this search query: git rebase\nIntent: undo</u><a>"
    )
    assert exp.grammar_text == grammar and exp.family == "chatml"
    assert exp.sampling == DETERMINISTIC  # as `qmdlab train evaluate` scored it
    # the same file without its sidecar: the untrained family prompt and qmd's unbounded grammar
    (tmp_path / "bare").mkdir()
    bare = _trained_expander_file(tmp_path / "bare", None)
    plain = load_models("offline", embed="none", rerank="none", expand=str(bare)).expander
    assert plain.grammar_text == GRAMMAR and "<sys>" not in plain.prompt("x")


def test_a_trained_expanders_fingerprint_tracks_its_prompt_and_its_weights(tmp_path):
    import json

    side = {"prefix": "<p>", "suffix": "<s>", "family": "chatml"}
    gguf = _trained_expander_file(tmp_path, side)
    first = load_models("fake", expand=str(gguf)).expander.fingerprint
    assert load_models("fake", expand=str(gguf)).expander.fingerprint == first
    (tmp_path / "expander-chatml-Q4_K_M.gguf.prompt.json").write_text(json.dumps({**side, "prefix": "<other>"}))
    second = load_models("fake", expand=str(gguf)).expander.fingerprint
    gguf.write_bytes(b"GGUF retrained, written to the same path")
    third = load_models("fake", expand=str(gguf)).expander.fingerprint
    assert len({first, second, third}) == 3


def test_a_broken_sidecar_names_its_file_and_the_fix(tmp_path):
    gguf = _trained_expander_file(tmp_path, '{"prefix": "<p>"')
    with pytest.raises(
        ModelError, match=r"expander-chatml-Q4_K_M\.gguf\.prompt\.json: not a prompt sidecar.*train export"
    ):
        load_models("fake", expand=str(gguf))
    _trained_expander_file(tmp_path, {"prefix": "<p>", "suffix": "<s>", "family": "llama9"})
    with pytest.raises(ModelError, match="unknown chat family 'llama9'"):
        load_models("fake", expand=str(gguf))
