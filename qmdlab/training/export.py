"""Export a trained expander: merged HF weights → GGUF → quantised GGUFs → engine expander.

Steps (each skipped when its output exists, so a re-run resumes):

1. **merge** — when given a LoRA adapter directory, ``merge_and_unload`` it into its base and
   save HF weights (SFT/GRPO runs already write ``merged/``);
2. **convert** — llama.cpp's ``convert_hf_to_gguf.py`` (the ``convert-hf-to-gguf`` package,
   installed into ``<venv>/convert-hf-to-gguf``; run as a subprocess by
   :func:`qmdlab.models.packaged.convert_hf`) writes an f16 GGUF;
3. **quantise** — ``llama_cpp.llama_model_quantize`` in-process (no external binary),
   Q4_K_M and Q8_0 by default (tensors whose rows are not a multiple of 256 fall back to a
   legacy type inside llama.cpp, which only matters for toy models);
4. **prompt sidecar** — ``<gguf>.prompt.json`` holds the exact prompt prefix/suffix the
   training chat template renders around the user turn (``enable_thinking=False``), so
   :func:`load_expander` feeds the GGUF exactly what it was trained on, whatever the base
   family; for Qwen3 it equals :func:`qmdlab.models.templates.expand_prompt` ``("qwen3", …)``.

The GGUF file names carry the chat family (``expander-qwen3-Q4_K_M.gguf``), so the models
registry's name-based family guess picks the right template when the file is used as
``--expand-model``/``QMDLAB_EXPAND_MODEL``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from qmdlab.errors import ConfigError, ModelError
from qmdlab.models.expander_sidecar import sidecar_path
from qmdlab.training import hardware, rundir
from qmdlab.training.render import prompt_messages

QUANT_TYPES = ("Q4_K_M", "Q8_0", "Q4_0", "Q5_K_M", "Q6_K", "F16")
_MARK = "\x00USER\x00"


@dataclass
class ExportConfig:
    """Configuration of one export (YAML keys = field names)."""

    model: str = field(default="runs/grpo/merged", metadata={"help": "Merged HF model dir, or a LoRA adapter dir."})
    output_dir: str = "runs/export"
    quants: list[str] = field(default_factory=lambda: ["Q4_K_M", "Q8_0"])
    outtype: str = field(default="f16", metadata={"help": "Converter output type: f16|bf16|f32|q8_0."})
    name: str = field(default="expander", metadata={"help": "File name stem."})
    family: str | None = field(default=None, metadata={"help": "Chat family in the file name (default: guessed)."})
    generic_instruct: bool = field(
        default=False,
        metadata={
            "help": "The model was trained as the engine runs an untrained instruct expander (GRPO's "
            "generic_instruct): the prompt sidecar gets that system turn and grammar."
        },
    )


def merge_adapter(adapter_dir: str | Path, out_dir: str | Path) -> Path:
    """Merge a PEFT LoRA adapter into its base model and save HF weights + tokenizer."""
    from peft import AutoPeftModelForCausalLM

    out = Path(out_dir)
    if (out / "config.json").exists():
        return out
    model = AutoPeftModelForCausalLM.from_pretrained(str(adapter_dir))
    model.merge_and_unload().save_pretrained(str(out))
    hardware.load_tokenizer(adapter_dir).save_pretrained(str(out))
    return out


def guess_family(model_dir: str | Path) -> str:
    """``qwen3`` for Qwen3 architectures / templates with ``enable_thinking``, else ``chatml``
    for ChatML templates, else ``chat``."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    archs = " ".join(cfg.get("architectures") or []).lower()
    template = ""
    for name in ("chat_template.jinja",):
        p = Path(model_dir) / name
        if p.exists():
            template = p.read_text(encoding="utf-8")
    if not template:
        tc = Path(model_dir) / "tokenizer_config.json"
        if tc.exists():
            template = str(json.loads(tc.read_text()).get("chat_template") or "")
    if "qwen3" in archs or "enable_thinking" in template:
        return "qwen3"
    if "<|im_start|>" in template:
        return "chatml"
    return "chat"


def prompt_parts(tokenizer, *, generic: bool = False) -> dict:
    """The rendered prompt around the user turn: ``{"prefix", "suffix"}``.

    ``prefix + user_message(query, intent) + suffix`` is exactly what
    :func:`qmdlab.training.render.render_prompt` gives for that query (with ``generic``, the prompt
    of ``prompt_messages(..., generic=True)``, its system turn in the prefix).
    """
    msgs = prompt_messages("q", generic=generic)
    msgs[-1]["content"] = _MARK
    text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    if text.count(_MARK) != 1:
        raise ModelError("the chat template does not render the user turn verbatim; cannot export its prompt")
    prefix, suffix = text.split(_MARK)
    bos = getattr(tokenizer, "bos_token", None)
    return {"prefix": prefix, "suffix": suffix, "bos_in_template": bool(bos and prefix.startswith(bos))}


def convert_to_gguf(model_dir: str | Path, out_file: str | Path, outtype: str = "f16") -> Path:
    """Run llama.cpp's converter on an HF model directory."""
    from qmdlab.models.packaged import convert_hf

    out = Path(out_file)
    if not out.exists():
        convert_hf(Path(model_dir), out, ("--outtype", outtype))
    return out


def quantize(src: str | Path, dst: str | Path, qtype: str = "Q4_K_M", *, nthread: int = 2) -> Path:
    """Quantise a GGUF in-process with ``llama_cpp.llama_model_quantize``.

    Raises
    ------
    ConfigError
        For an unknown ``qtype``.
    ModelError
        When llama.cpp reports a failure.
    """
    from qmdlab.models._llama import import_llama_cpp

    dst = Path(dst)
    if dst.exists():
        return dst
    llama_cpp = import_llama_cpp()
    const = f"LLAMA_FTYPE_MOSTLY_{qtype.upper()}" if qtype.upper() != "F16" else "LLAMA_FTYPE_MOSTLY_F16"
    if not hasattr(llama_cpp, const):
        raise ConfigError(f"unknown quantisation {qtype!r}; choose one of {', '.join(QUANT_TYPES)}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, const)
    params.nthread = nthread
    tmp = dst.with_name(dst.name + ".tmp")
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
    if rc != 0 or not tmp.exists():
        tmp.unlink(missing_ok=True)
        raise ModelError(f"quantising {src} to {qtype} failed (llama.cpp returned {rc})")
    tmp.replace(dst)
    return dst


@rundir.resumable("output_dir")
def run_export(cfg: ExportConfig) -> dict:
    """Merge (if needed), convert, quantise and write the prompt sidecars.

    Returns
    -------
    dict
        ``gguf`` (the f16 file), ``quants`` (type → path), ``family``, sizes in bytes.
    """
    out = Path(cfg.output_dir)
    src = Path(cfg.model)
    if not src.is_dir():
        raise ConfigError(f"{src} is not a model directory (pass a merged/ or adapter/ folder of a run)")
    rundir.save_config(cfg, out)
    if (src / "adapter_config.json").exists() and not (src / "config.json").exists():
        src = merge_adapter(src, out / "merged")
    family = cfg.family or guess_family(src)
    tok = hardware.load_tokenizer(src)
    parts = prompt_parts(tok, generic=cfg.generic_instruct)
    if cfg.generic_instruct:
        from qmdlab.models.registry import generic_instruct_grammar

        parts["grammar"] = generic_instruct_grammar()
    f16 = convert_to_gguf(src, out / f"{cfg.name}-{family}-{cfg.outtype.upper()}.gguf", cfg.outtype)
    files = {cfg.outtype.upper(): f16}
    for q in cfg.quants:
        if q.upper() == cfg.outtype.upper():
            continue
        files[q.upper()] = quantize(f16, out / f"{cfg.name}-{family}-{q.upper()}.gguf", q)
    for path in files.values():
        sidecar_path(path).write_text(json.dumps({**parts, "family": family}, indent=1))
    res = {
        "gguf": str(f16),
        "quants": {k: str(v) for k, v in files.items()},
        "family": family,
        "sizes": {k: Path(v).stat().st_size for k, v in files.items()},
        "source": str(src),
    }
    rundir.append_metrics(out, {"stage": "export", **res})
    rundir.write_model_card(
        out,
        "qmdlab query expander — GGUF",
        f"""
Source: `{src}` (chat family `{family}`). Files: {", ".join(f"`{Path(v).name}`" for v in files.values())}.
Use it as the engine's expander: `QMDLAB_EXPAND_MODEL={files.get("Q4_K_M", f16)} qmdlab query "…"`, or
`qmdlab.training.export.load_expander(path)`; both prompt it exactly as in training, from the
`.prompt.json` sidecar beside the file (keep the two together). Evaluate:
`qmdlab train evaluate --expander {files.get("Q4_K_M", f16)}`.
""",
    )
    rundir.mark_done(out, res)
    return res


def load_expander(gguf: str | Path, *, sampling=None, n_threads: int | None = 2, n_ctx: int = 1024):
    """An engine expander (:class:`qmdlab.models.llama_expand.LlamaExpander`) over an exported
    GGUF, prompted exactly as in training (from the ``.prompt.json`` sidecar when present,
    else the Qwen3 family prompt) and decoded under the sidecar's grammar when it names one
    (:meth:`~qmdlab.models.llama_expand.LlamaExpander.from_trained`, as the engine loads it by path)."""
    from qmdlab.models.llama_expand import LlamaExpander
    from qmdlab.models.packaged import sha256_file

    path = Path(gguf)
    if not path.is_file():
        raise ModelError(f"{path} does not exist (run `qmdlab train export` first)")
    # The weights' hash is part of the fingerprint: a retrained model written to the same path must
    # not be served stale expansions from the LLM cache or the evaluation's trace cache.
    return LlamaExpander.from_trained(
        path, sampling=sampling, weights=sha256_file(path), n_threads=n_threads, n_ctx=n_ctx
    )


def main(argv: list[str] | None = None) -> dict:
    """``python -m qmdlab.training.export [--config export.yaml] [--field value ...]``."""
    from qmdlab.training.config import parse_args

    return run_export(parse_args(ExportConfig, argv))


if __name__ == "__main__":
    main(sys.argv[1:])
