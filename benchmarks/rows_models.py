"""Benchmark rows: the model stages (embed, LLM rerank, expansion, the cross-encoder) against raw llama.cpp / torch."""

from __future__ import annotations

import os

# On a machine whose cores are already busy, OpenBLAS's (and llama.cpp's OpenMP) worker threads
# spin-wait for each other: a 2-thread matvec or decode then runs several times slower, and
# erratically. One BLAS thread and passive OpenMP waiting keep the timings stable; the stage and
# its raw baseline always run under the same setting. Export the variables to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402

from benchmarks.harness import (
    ROOT,
    THREADS,
    Row,
    Work,
    add,
    fmt,
    paired,
    ratio_row,
    skip,
    timed,
)


def bench_embed(w: Work, sz: dict, models_ok: tuple) -> None:
    ok, reason, paths = models_ok
    if not ok:
        skip("embed", "embedding throughput vs raw llama-cpp-python", reason)
        return
    from qmdlab.models._llama import import_llama_cpp

    llama_cpp = import_llama_cpp()  # loads llama.cpp's CPU backend (run-time dispatch)

    from qmdlab.models.registry import MINILM, build_model

    docs = [(t, x[: sz["text_chars"]]) for t, x in w.corpus.documents(sz["embed_texts"])]
    emb = build_model("embed", MINILM, n_threads=THREADS, idle_timeout=None, batch_size=32)
    emb1 = build_model("embed", MINILM, n_threads=THREADS, idle_timeout=None, batch_size=1)
    texts = [emb.template.document(t, x) for t, x in docs]
    raw_llm = llama_cpp.Llama(
        model_path=str(paths["embed"]),
        embedding=True,
        n_ctx=512,
        n_batch=512,
        n_ubatch=512,
        n_threads=THREADS,
        n_threads_batch=THREADS,
        verbose=False,
    )
    ntok = sum(len(raw_llm.tokenize(t.encode())) for t in texts)
    reps = max(3, sz["repeats"] // 2)
    s, b = paired(lambda: emb.embed_documents(docs), lambda: raw_llm.embed(texts, truncate=True), reps)
    a = np.asarray(emb.embed_documents(docs))
    r = np.asarray(raw_llm.embed(texts, truncate=True), dtype=np.float32)
    r /= np.linalg.norm(r, axis=1, keepdims=True)
    diff = float(np.abs(a - r).max())
    n = len(docs)
    add(
        Row(
            "embed",
            "embed_documents vs raw Llama.embed (same texts, model)",
            f"{n} chunks, {ntok / n:.0f} tok/chunk",
            n / s,
            n / b,
            "/s",
            (n / s) / (n / b),
            "qmdlab/raw",
            "≥ 0.8×",
            "meets" if b / s >= 0.8 else "misses",
            f"all-MiniLM-L6-v2 f16, {THREADS} threads; max |Δvec| {diff:.1e}",
            {"max_abs_diff": diff},
        )
    )
    u, bb = paired(lambda: emb1.embed_documents(docs), lambda: emb.embed_documents(docs), reps, warmup=0)
    add(
        Row(
            "embed",
            "batched (32/call) vs unbatched (1/call)",
            f"{n} chunks",
            n / bb,
            n / u,
            "/s",
            u / bb,
            "batched/unbatched",
            "≥ 1.5×",
            "meets" if u / bb >= 1.5 else "misses",
            "LlamaEmbedder batch_size 32 vs 1; both go through Llama.embed, which packs several sequences "
            "into each llama_decode (up to n_batch tokens): the batching is there, the gain is not",
        )
    )
    # the same on query-length texts, where a decode's fixed cost is a larger share
    short = [("", q) for q in w.corpus.queries(sz["embed_short"], seed=5)]
    u2, b2 = paired(lambda: emb1.embed_documents(short), lambda: emb.embed_documents(short), reps, warmup=1)
    d2 = float(np.abs(np.asarray(emb1.embed_documents(short)) - np.asarray(emb.embed_documents(short))).max())
    m = len(short)
    add(
        Row(
            "embed",
            "batched (32/call) vs unbatched (1/call), query-length texts",
            f"{m} texts of 2–4 words",
            m / b2,
            m / u2,
            "/s",
            u2 / b2,
            "batched/unbatched",
            "≥ 1.5×",
            "meets" if u2 / b2 >= 1.5 else "misses",
            f"max |Δvec| batched vs unbatched {d2:.1e}",
            {"max_abs_diff": d2},
        )
    )
    for e in (emb, emb1):
        e.release()
    raw_llm.close()


def bench_rerank(w: Work, sz: dict, models_ok: tuple) -> None:
    ok, reason, paths = models_ok
    if not ok:
        skip("rerank", "rerank s/pair vs raw llama.cpp eval", reason)
        return
    from qmdlab.models._llama import import_llama_cpp

    llama_cpp = import_llama_cpp()  # loads llama.cpp's CPU backend (run-time dispatch)

    from qmdlab.models.cached import CachedReranker
    from qmdlab.models.registry import QWEN_CODER, build_model
    from qmdlab.models.scoring import p_yes
    from qmdlab.models.templates import rerank_prompt_parts

    rr = build_model("rerank", QWEN_CODER, n_threads=THREADS, idle_timeout=None)
    query = w.corpus.queries(1, seed=3)[0]
    texts = [x[: sz["text_chars"]] for _, x in w.corpus.documents(sz["rerank_texts"])]
    rr.score(query, texts[:1])  # load + answer ids
    raw_llm = llama_cpp.Llama(
        model_path=str(paths["rerank"]), n_ctx=rr.n_ctx, n_threads=THREADS, n_threads_batch=THREADS, verbose=False
    )
    prefix, suffix = rerank_prompt_parts(rr.family, query, rr.instruct)
    head = raw_llm.tokenize(prefix.encode(), add_bos=True, special=True)
    tail = raw_llm.tokenize(suffix.encode(), add_bos=False, special=True)
    prompts = [head + raw_llm.tokenize(t.encode(), add_bos=False, special=False) + tail for t in texts]
    n_vocab = raw_llm.n_vocab()

    def raw():  # the whole prompt of every pair, evaluated from scratch
        out = []
        for toks in prompts:
            raw_llm.reset()
            raw_llm.eval(toks)
            z = np.ctypeslib.as_array(raw_llm._ctx.get_logits(), shape=(n_vocab,)).copy()
            out.append(p_yes(z, rr.yes_ids, rr.no_ids))
        return out

    raw_llm.eval(head)  # first-use page faults out of the timing
    raw_llm.reset()
    got: dict[str, list] = {}
    reps = 1 if sz["repeats"] <= 5 else 3
    s, b = paired(
        lambda: got.__setitem__("ours", rr.score(query, texts)), lambda: got.__setitem__("raw", raw()), reps, warmup=0
    )
    diff = float(np.abs(np.array(got["ours"]) - np.array(got["raw"])).max())
    n = len(texts)
    ntok = sum(len(p) for p in prompts) / n
    ratio_row(
        "rerank",
        "LlamaReranker.score vs raw eval of the same prompt",
        f"{n} pairs, {ntok:.0f} tok/prompt",
        s / n,
        b / n,
        1.25,
        note=f"s/pair; Qwen2.5-Coder-0.5B Q4_K_M, {THREADS} threads; query prefix KV reused; max |ΔP(yes)| {diff:.1e}",
        max_abs_diff=diff,
    )
    raw_llm.close()
    bench_cross_encoder(w, sz, llm_s_per_pair=s / n)
    # a repeated query through the LLM cache: zero model calls
    from qmdlab.store import Index

    idx = Index(w.dir / "rerank-cache")
    cr = CachedReranker(rr, idx.cache)
    cr.score(query, texts)
    before = cr.calls
    t = timed(lambda: cr.score(query, texts), sz["repeats"], warmup=0)
    calls = cr.calls - before
    add(
        Row(
            "rerank",
            "repeated query: reranker model calls",
            f"{n} pairs",
            float(calls),
            None,
            "calls",
            None,
            "",
            "0 calls",
            "meets" if calls == 0 else "misses",
            f"cached lookup {fmt(t, 's')} for {n} pairs",
        )
    )
    idx.close()
    rr.release()


def bench_expand(w: Work, sz: dict, models_ok: tuple) -> None:
    """LlamaExpander.expand vs a raw ``llama_cpp.Llama.create_completion`` with the same grammar,
    prompt tokens and sampling (greedy): wall time, prompt and generation tokens/s, same text."""
    ok, reason, paths = models_ok
    if not ok:
        skip("expand", "expansion vs raw llama-cpp-python generation", reason)
        return
    from qmdlab.models._llama import import_llama_cpp

    llama_cpp = import_llama_cpp()  # loads llama.cpp's CPU backend (run-time dispatch)

    from qmdlab.models.registry import QWEN_CODER, build_model

    exp = build_model("expand", QWEN_CODER, n_threads=THREADS, idle_timeout=None)
    queries = w.corpus.queries(sz["expand_queries"], seed=11)
    raw_llm = llama_cpp.Llama(
        model_path=str(paths["rerank"]), n_ctx=2048, n_threads=THREADS, n_threads_batch=THREADS, verbose=False
    )  # the offline expander is the same GGUF
    grammar = llama_cpp.LlamaGrammar.from_string(exp.grammar_text, verbose=False)
    sm = exp.sampling
    perf: dict[str, list] = {"ours": [], "raw": []}
    texts: dict[str, list] = {"ours": [], "raw": []}

    def perf_of(llm) -> tuple[float, int, float, int]:
        d = llama_cpp.llama_perf_context(llm._ctx.ctx)
        return d.t_p_eval_ms / 1e3, d.n_p_eval, d.t_eval_ms / 1e3, d.n_eval

    def ours():
        for q in queries:
            with exp.llama.use() as llm:
                llm.reset()  # no KV reuse from the previous call: every call evaluates its prompt
                llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
            texts["ours"].append(exp.expand(q).raw)
            with exp.llama.use() as llm:
                perf["ours"].append(perf_of(llm))

    def raw():
        for q in queries:
            raw_llm.reset()
            llama_cpp.llama_perf_context_reset(raw_llm._ctx.ctx)
            toks = raw_llm.tokenize(exp.prompt(q).encode("utf-8"), add_bos=True, special=True)
            out = raw_llm.create_completion(
                toks,
                max_tokens=sm.max_tokens,
                temperature=sm.temperature,
                top_k=sm.top_k,
                top_p=sm.top_p,
                min_p=0.0,
                repeat_penalty=1.0,
                grammar=grammar,
            )
            texts["raw"].append(out["choices"][0]["text"])
            perf["raw"].append(perf_of(raw_llm))

    s, b = paired(ours, raw, max(1, sz["repeats"] // 3), warmup=0)
    same = texts["ours"] == texts["raw"]

    def rates(key: str) -> tuple[float, float, float]:
        tp, npe, te, ne = (sum(x[i] for x in perf[key]) for i in range(4))
        return npe / tp if tp else 0.0, ne / te if te else 0.0, ne / len(perf[key])

    po, go, ntok = rates("ours")
    pr, gr, _ = rates("raw")
    nq = len(queries)
    ratio_row(
        "expand",
        "LlamaExpander.expand vs raw create_completion (same grammar, prompt, greedy)",
        f"{nq} queries, {ntok:.0f} generated tok/query",
        s / nq,
        b / nq,
        1.1,
        note=f"s/query; prompt {po:.0f} vs {pr:.0f} tok/s, generation {go:.1f} vs {gr:.1f} tok/s "
        f"(qmdlab vs raw, llama.cpp perf counters); same text {same}; stops at the grammar's end "
        f"(≤ 6 lines) or {sm.max_tokens} tokens",
        same_text=same,
        prompt_tps=po,
        gen_tps=go,
        raw_prompt_tps=pr,
        raw_gen_tps=gr,
    )
    exp.release()
    raw_llm.close()


def bench_cross_encoder(w: Work, sz: dict, llm_s_per_pair: float | None = None) -> None:
    """Pairs/s of the cross-encoder reranker at 256 tokens per pair, 2 threads, against
    the LLM reranker's pairs/s measured in the same run. The trained model of `make
    train-reranker` (runs/reranker/model) when it exists, else the same architecture (MiniLM-L6
    + a fresh head, from the packaged weights): the speed depends on the architecture only."""
    try:
        from qmdlab.training.base_models import resolve_encoder_base
        from qmdlab.training.reranker_fit import new_model
    except ImportError as err:
        skip("rerank", "cross-encoder pairs/s at 256 tokens", f"train extra missing ({err})")
        return
    from qmdlab.models.cross_encoder import CrossEncoderReranker

    trained = ROOT / "runs" / "reranker" / "model"
    if (trained / "config.json").is_file():
        path, which = trained, "trained (runs/reranker/model)"
    else:
        try:
            base = resolve_encoder_base("pkg:all-minilm-l6-v2")
        except Exception as err:
            skip("rerank", "cross-encoder pairs/s at 256 tokens", str(err))
            return
        path, which = w.dir / "cross-encoder", "untrained, same architecture"
        if not path.exists():
            new_model(base, 256, 0).save_pretrained(str(path))
    rr = CrossEncoderReranker(path, max_length=256, batch_size=32, n_threads=THREADS)
    n = 8 if sz["repeats"] <= 3 else 64
    docs = [x for _, x in w.corpus.documents(n)]
    texts = [(d + " ") * (1 + 2000 // max(1, len(d))) for d in docs]  # every pair truncated at 256 tokens
    query = w.corpus.queries(1, seed=3)[0]
    ntok = float(
        np.mean([len(rr._load()[0](query, t, truncation="longest_first", max_length=256)["input_ids"]) for t in texts])
    )
    t = timed(lambda: rr.score(query, texts), max(1, min(3, sz["repeats"])), warmup=1)
    rate = n / t
    llm_rate = 1.0 / llm_s_per_pair if llm_s_per_pair else None
    add(
        Row(
            "rerank",
            "cross-encoder reranker pairs/s at 256 tokens vs LLM reranker",
            f"{n} pairs, {ntok:.0f} tok/pair",
            rate,
            llm_rate,
            "/s",
            rate / llm_rate if llm_rate else None,
            "speed-up",
            "≥ 200/s",
            "meets" if rate >= 200 else "misses",
            f"{which}; torch CPU fp32, {THREADS} threads, batch 32; LLM = Qwen2.5-Coder-0.5B P(yes), same run",
        )
    )
    rr.release()
