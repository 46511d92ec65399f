"""Why qmd embeds faster than qmdlab with the same GGUF file: the same texts through llama.cpp as
qmd drives it (node-llama-cpp 3.20, its prebuilt binaries) and as qmdlab drives it
(llama-cpp-python 0.3.36, the portable build of the Makefile), each in a process of its own.

    python experiments/embedding_speed/run.py [--texts 30] [--repeats 2] [--out DIR]

Configurations, each on EmbeddingGemma-300M Q8_0 and f16:

- ``node, all CPU variants``: what qmd gets. node-llama-cpp ships llama.cpp with
  ``GGML_BACKEND_DL`` and every x86 CPU variant and loads the best one this CPU supports.
- ``node, AVX2 variant only``: the same install with every variant above AVX2 removed (a hard-linked
  copy whose binaries folder keeps x64 … haswell): the instruction set qmdlab's wheel is built for.
- ``qmdlab, n_ctx 512`` (its setting for this model) and ``qmdlab, n_ctx 2048`` (qmd's context size):
  :class:`qmdlab.models.llama_embed.LlamaEmbedder`, one text per decode, 2 threads.

Each process loads the model, embeds one text untimed, then times the rest one text at a time.
Runs alternate between configurations. Needs qmd installed by ``benchmarks/vs_qmd.py`` (its cache).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import vs_qmd  # noqa: E402

AVX512_VARIANTS = (
    "skylakex",
    "cannonlake",
    "cascadelake",
    "icelake",
    "cooperlake",
    "zen4",
    "sapphirerapids",
    "alderlake",
)

NODE_SCRIPT = """
import { getLlama } from "node-llama-cpp";
import { readFileSync } from "fs";
const texts = JSON.parse(readFileSync(process.argv[3], "utf8"));
const llama = await getLlama({ gpu: false });
const model = await llama.loadModel({ modelPath: process.argv[2] });
const ctx = await model.createEmbeddingContext({ contextSize: 2048, threads: 2 });
await ctx.getEmbeddingFor(texts[0]);
const t0 = performance.now();
for (const t of texts.slice(1)) await ctx.getEmbeddingFor(t);
const s = (performance.now() - t0) / 1000;
console.log(JSON.stringify({ seconds: s, texts: texts.length - 1 }));
"""

PY_SCRIPT = """
import json, sys, time
from pathlib import Path
from qmdlab.models.llama_embed import LlamaEmbedder
path, texts_file, n_ctx = sys.argv[1], sys.argv[2], int(sys.argv[3])
texts = json.load(open(texts_file))
emb = LlamaEmbedder(lambda: Path(path), "embeddinggemma-300m", n_ctx=n_ctx, n_threads=2, idle_timeout=None)
emb._embed(texts[:1])
t0 = time.perf_counter()
for t in texts[1:]:
    emb._embed([t])
print(json.dumps({"seconds": time.perf_counter() - t0, "texts": len(texts) - 1}))
"""


def avx2_copy(app: Path) -> Path:
    """A hard-linked copy of the qmd install whose llama.cpp binaries stop at AVX2."""
    dest = app.with_name(app.name + "-avx2")
    bins = dest / "node_modules" / "@node-llama-cpp" / "linux-x64" / "bins" / "linux-x64"
    if not bins.exists():
        if dest.exists():
            shutil.rmtree(dest)
        subprocess.run(["cp", "-al", str(app), str(dest)], check=True)
        for variant in AVX512_VARIANTS:
            (bins / f"libggml-cpu-{variant}.so").unlink(missing_ok=True)
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "vs-qmd")
    args = ap.parse_args()

    from qmdlab.models.packaged import get, packaged_dir
    from qmdlab.models.templates import EMBEDDING_TEMPLATES

    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "qmdlab" / "bench"
    node, launcher = vs_qmd.install_qmd(cache / "qmd")
    app = launcher.parents[3]
    apps = {"node, all CPU variants": app, "node, AVX2 variant only": avx2_copy(app)}
    work = cache / "embedding_speed"
    work.mkdir(parents=True, exist_ok=True)
    cisi, _ = vs_qmd.write_cisi(work / "cisi", args.texts)
    template = EMBEDDING_TEMPLATES["gemma"]
    texts = []
    for f in sorted(cisi.glob("*.md"), key=lambda p: int(p.stem))[: args.texts]:
        body = f.read_text(encoding="utf-8")
        title = body.splitlines()[0].lstrip("# ").strip() if body.startswith("# ") else ""
        texts.append(template.document(title, body))
    texts_file = work / "texts.json"
    texts_file.write_text(json.dumps(texts))
    for a in apps.values():
        (a / "embed_speed.mjs").write_text(NODE_SCRIPT)

    models = {
        "Q8_0": packaged_dir() / get("embeddinggemma-300m-q8_0").filename,
        "f16": packaged_dir() / get("embeddinggemma-300m").filename,
    }
    env = dict(os.environ, PATH=f"{node.parent}{os.pathsep}{os.environ.get('PATH', '')}", OMP_WAIT_POLICY="PASSIVE")

    def commands(model: Path) -> dict[str, list[str]]:
        cmds = {name: [str(node), str(a / "embed_speed.mjs"), str(model), str(texts_file)] for name, a in apps.items()}
        for n_ctx in (512, 2048):
            cmds[f"qmdlab, n_ctx {n_ctx}"] = [sys.executable, "-c", PY_SCRIPT, str(model), str(texts_file), str(n_ctx)]
        return cmds

    rows = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for label, model in models.items():
        cmds = commands(model)
        rates: dict[str, list[float]] = {name: [] for name in cmds}
        peaks: dict[str, float] = {name: 0.0 for name in cmds}
        names = list(cmds)
        for r in range(args.repeats):
            for name in names if r % 2 == 0 else names[::-1]:
                p = vs_qmd.run_proc(cmds[name], env).check()
                result = json.loads(p.stdout.strip().splitlines()[-1])
                rates[name].append(result["texts"] / result["seconds"])
                peaks[name] = max(peaks[name], p.peak_mb)
                print(f"{label:5} {name:26} {rates[name][-1]:.2f} texts/s", file=sys.stderr, flush=True)
        for name in names:
            rows.append(
                dict(
                    model=label,
                    config=name,
                    texts_per_s=statistics.median(rates[name]),
                    runs=rates[name],
                    peak_mb=peaks[name],
                )
            )
    lines = [
        f"- {started}; {vs_qmd.machine()}; {args.texts - 1} timed CISI abstracts per run (EmbeddingGemma "
        f"document format), {args.repeats} runs per configuration, alternated",
        "",
        "| model | configuration | texts/s (median) | runs | peak memory |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        runs = " / ".join(f"{x:.2f}" for x in row["runs"])
        lines.append(
            f"| {row['model']} | {row['config']} | **{row['texts_per_s']:.2f}** | {runs} | {row['peak_mb']:.0f} MB |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "embedding_speed.json").write_text(
        json.dumps(dict(started=started, machine=vs_qmd.machine(), rows=rows), indent=2) + "\n"
    )
    (args.out / "embedding_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
