"""One lever at a time on qmdlab's llama.cpp embedding: CISI abstracts in EmbeddingGemma's document
format through llama-cpp-python, one process per run, texts per second printed.

    python experiments/embedding_speed/levers.py MODE [--texts 40] [--model GGUF]

Modes:

- ``2t``: one context on two threads (qmdlab's embedder before it ran two contexts);
- ``2t-fa``: the same with flash attention;
- ``2x1``: two one-thread contexts, each embedding half of the texts in its own thread (what
  :class:`qmdlab.models.llama_embed.LlamaEmbedder` does by default now).

Which CPU variant llama.cpp loads is the installed wheel's choice (``qmdlab doctor`` names it); to
compare variants, run the same mode with another llama-cpp-python install first on ``PYTHONPATH``.
``OMP_WAIT_POLICY`` is read from the environment. Alternate the modes in one quiet minute.
"""

from __future__ import annotations

import argparse
import threading
import time

from qmdlab.eval.loaders import load
from qmdlab.eval.suites import collection_dir
from qmdlab.models._llama import import_llama_cpp
from qmdlab.models.packaged import get, packaged_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("2t", "2t-fa", "2x1"))
    ap.add_argument("--texts", type=int, default=40)
    ap.add_argument("--model", default=str(packaged_dir() / get("embeddinggemma-300m-q8_0").filename))
    args = ap.parse_args()
    llama_cpp = import_llama_cpp()
    data = load(collection_dir("cisi"), "smart")
    texts = [f"title: {t} | text: {x}" for _, t, x in list(data.docs.iter_rows())[: args.texts]]

    def context(threads: int, flash: bool = False):
        return llama_cpp.Llama(
            args.model,
            embedding=True,
            n_ctx=2048,
            n_batch=2048,
            n_ubatch=2048,
            n_threads=threads,
            n_threads_batch=threads,
            flash_attn=flash,
            verbose=False,
        )

    if args.mode == "2x1":
        models = [context(1), context(1)]  # loaded one after the other (the load redirects stdout)
        for m in models:
            m.embed([texts[0]])
        t0 = time.perf_counter()
        workers = [
            threading.Thread(target=lambda m, part: [m.embed([t], truncate=True) for t in part], args=(m, texts[i::2]))
            for i, m in enumerate(models)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    else:
        m = context(2, flash=args.mode == "2t-fa")
        m.embed([texts[0]])
        t0 = time.perf_counter()
        for t in texts:
            m.embed([t], truncate=True)
    print(f"{args.mode} {len(texts) / (time.perf_counter() - t0):.2f} texts/s")


if __name__ == "__main__":
    main()
