"""``qmdlab train …``: prepare data, SFT, GRPO, export to GGUF, evaluate, synthesise.

Each verb takes ``--config FILE.yaml`` (keys = fields of the step's config dataclass in
``training/``), a few common flags, and ``--set KEY=VALUE`` (repeatable, YAML-typed) for any
other field. Each writes a run directory (``config.yaml``, ``metrics.jsonl``, ``README.md``)
and resumes: a finished step returns its stored result; a training step restarts from its
newest checkpoint. Training needs the ``train`` extra (``pip install 'qmdlab[train]'``).

Registered with ``qmdlab/cli.py`` through the ``qmdlab.commands`` entry point ``train`` in
``pyproject.toml`` (the core never imports :mod:`training`).
"""

from __future__ import annotations

import json

import click
import yaml

from qmdlab.errors import ConfigError


def _sets(values: tuple[str, ...]) -> dict:
    out = {}
    for item in values:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE (e.g. --set learning_rate=1e-4)")
        key, value = item.split("=", 1)
        out[key.strip().replace("-", "_")] = yaml.safe_load(value)
    return out


def _config(cls, config, sets, **flags):
    from qmdlab.training.config import load_config

    return load_config(cls, config, **{**flags, **_sets(sets)})


def _echo(result: dict) -> None:
    click.echo(json.dumps(result, indent=1, ensure_ascii=False, default=str))


#: A flag whose parameter name is not its config field's.
_FIELD = {"fmt": "format", "index_dir": "index"}


def _step_config(cls, **extra):
    """The running command's step config: ``--config``, then its flags by name (``_FIELD`` where a
    name differs from the field's), ``extra``, and ``--set`` over all."""
    params = dict(click.get_current_context().params)
    config, sets = params.pop("config"), params.pop("sets")
    flags = {_FIELD.get(k, k): v for k, v in params.items()}
    return _config(cls, config, sets, **{**flags, **extra})


def _run_logged(run, cls, keys: tuple[str, ...]) -> None:
    """Run a step that logs its progress: ``run`` on its :func:`_step_config` with the log on
    stderr, then print the ``keys`` of its result."""
    res = run(_step_config(cls), log=lambda m: click.echo(m, err=True))
    _echo({k: res.get(k) for k in keys})


_config_opt = click.option(
    "--config",
    "config",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="YAML file with the step's config fields.",
)
_set_opt = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override any config field.")
# flags of config fields that several steps share
_format_opt = click.option("--format", "fmt", default=None, help="Suite format when --suite is a directory.")
_output_dir_opt = click.option("--output-dir", default=None)
_threads_opt = click.option("--threads", "n_threads", type=int, default=None, help="Torch CPU threads.")


def register(group: click.Group) -> None:
    @group.group("train")
    def train() -> None:
        """Fine-tune a query expander (prepare → sft → grpo → export → evaluate, synth), a reranker,
        a doc2query generator, the embedder or a query adapter."""

    @train.command("prepare")
    @click.option(
        "--data",
        "data",
        default="data/training/seed.jsonl",
        show_default=True,
        type=click.Path(dir_okay=False),
        help="Examples (JSONL schema).",
    )
    @click.option("--output-dir", "--out", "out", default="runs/data", show_default=True, help="Output directory.")
    @click.option("--eval-fraction", default=0.1, show_default=True, type=float)
    @click.option("--seed", default=0, show_default=True, type=int)
    def prepare_cmd(data, out, eval_fraction, seed) -> None:
        """Validate, dedupe and split the examples; write train/eval files."""
        from qmdlab.training import rundir
        from qmdlab.training.data import prepare

        res = prepare(data, out, eval_fraction=eval_fraction, seed=seed)
        rundir.append_metrics(out, {"stage": "prepare", **res})
        _echo(res)

    @train.command("sft")
    @_config_opt
    @click.option("--base", default=None, help="HF model id or local directory.")
    @click.option("--train-file", default=None)
    @click.option("--eval-file", default=None)
    @_output_dir_opt
    @click.option("--max-steps", type=int, default=None)
    @_set_opt
    def sft_cmd(config, base, train_file, eval_file, output_dir, max_steps, sets) -> None:
        """Supervised fine-tuning with LoRA (TRL SFTTrainer)."""
        from qmdlab.training.sft import SFTRunConfig, run_sft

        _echo(run_sft(_step_config(SFTRunConfig)))

    @train.command("grpo")
    @_config_opt
    @click.option("--base", default=None, help="Merged SFT model directory.")
    @click.option("--prompts-file", default=None)
    @click.option("--suite", default=None, help="Labelled suite dir for the retrieval reward (e.g. data).")
    @click.option("--index", "index_dir", default=None, help="Index for the retrieval reward.")
    @_output_dir_opt
    @click.option("--max-steps", type=int, default=None)
    @_set_opt
    def grpo_cmd(config, base, prompts_file, suite, index_dir, output_dir, max_steps, sets) -> None:
        """GRPO with the rule + retrieval reward (TRL GRPOTrainer)."""
        from qmdlab.training.grpo import GRPORunConfig, run_grpo

        _echo(run_grpo(_step_config(GRPORunConfig)))

    @train.command("export")
    @_config_opt
    @click.option("--model", default=None, help="Merged model dir (or a LoRA adapter dir).")
    @_output_dir_opt
    @click.option("--quant", "quants", multiple=True, help="Quantisation (repeatable; default Q4_K_M and Q8_0).")
    @_set_opt
    def export_cmd(config, model, output_dir, quants, sets) -> None:
        """Merge, convert to GGUF, quantise; the GGUF is then usable as the engine's expander."""
        from qmdlab.training.export import ExportConfig, run_export

        _echo(run_export(_step_config(ExportConfig, quants=list(quants) or None)))

    @train.command("evaluate")
    @_config_opt
    @click.option("--expander", default=None, help="Trained GGUF.")
    @click.option("--base-expander", default=None, help="Comparison expander (GGUF path or model ref).")
    @click.option("--suite", default=None, help="Labelled suite directory (default: data).")
    @click.option("--index", "index_dir", default=None, help="Index directory for the suite.")
    @click.option("--examples-file", default=None, help="Held-out examples for the rule score.")
    @click.option("--max-queries", type=int, default=None)
    @_output_dir_opt
    @_set_opt
    def evaluate_cmd(
        config, expander, base_expander, suite, index_dir, examples_file, max_queries, output_dir, sets
    ) -> None:
        """nDCG@10 with each expander vs no expansion, and the rule score."""
        from qmdlab.training.evaluate import EvaluateConfig, run_evaluate

        _echo(run_evaluate(_step_config(EvaluateConfig)))

    @train.command("reranker")
    @_config_opt
    @click.option("--suite", default=None, help="Labelled suite: name (default, cisi) or directory.")
    @_format_opt
    @click.option("--output-dir", "--out", "out", default=None, help="Run directory (default runs/reranker).")
    @click.option(
        "--base", default=None, help="Encoder to start from: pkg:all-minilm-l6-v2 (default), an HF dir, hf:org/name."
    )
    @click.option("--folds", type=int, default=None, help="K-fold held-out evaluation (0: none; default 5).")
    @click.option("--seed", type=int, default=None)
    @click.option("--loss", default=None, help="lambda (default) | listnet | ranknet | bce.")
    @_threads_opt
    @click.option(
        "--synthetic",
        default=None,
        help="Train on the filtered generated queries of this doc2query run directory instead of labels; "
        "judged on its held-out split.",
    )
    @_set_opt
    def reranker_cmd(config, suite, fmt, out, base, folds, seed, loss, n_threads, synthetic, sets) -> None:
        """Train a cross-encoder reranker on a suite's labelled queries (held-out folds), or on a
        doc2query generator's filtered queries with --synthetic (its held-out split)."""
        from qmdlab.training.reranker import RerankerRunConfig, run_reranker

        _run_logged(
            run_reranker, RerankerRunConfig, ("suite", "queries", "pairs", "model", "auc", "heldout", "seconds")
        )

    @train.command("doc2query")
    @_config_opt
    @click.option("--suite", default=None, help="Suite whose collection (and train queries) to learn from.")
    @_format_opt
    @click.option("--output-dir", "--out", "out", default=None, help="Run directory (default runs/doc2query).")
    @click.option("--base", default=None, help="pkg:smollm2-135m-instruct (default), a GGUF file or an HF dir.")
    @click.option("--max-steps", type=int, default=None, help="Stop after this many optimizer steps.")
    @_threads_opt
    @_set_opt
    def doc2query_cmd(config, suite, fmt, out, base, max_steps, n_threads, sets) -> None:
        """Train a document → query generator for `qmdlab expand-docs` (LoRA SFT on train-split queries)."""
        from qmdlab.training.doc2query import Doc2QueryRunConfig, run_doc2query

        _run_logged(
            run_doc2query,
            Doc2QueryRunConfig,
            ("suite", "pairs", "heldout_queries", "steps", "train_loss", "gguf", "seconds"),
        )

    @train.command("embedder")
    @_config_opt
    @click.option("--suite", default=None, help="Suite whose index holds the kept generated queries.")
    @_format_opt
    @click.option(
        "--synthetic",
        default=None,
        help="The doc2query generator's run directory (its splits.json names the held-out queries) or that file; "
        "or an untrained generator (pkg:NAME), which read no query: every judged query is held out.",
    )
    @click.option(
        "--labelled",
        is_flag=True,
        default=None,
        help="Train on the suite's own training queries (its official train/test split, e.g. scifact) "
        "instead of --synthetic generated ones; report on its test queries.",
    )
    @click.option("--output-dir", "--out", "out", default=None, help="Run directory (default runs/embedder).")
    @click.option(
        "--base",
        default=None,
        help="pkg:all-minilm-l6-v2 (default), pkg:embeddinggemma-300m (the default embedder's checkpoint; "
        "--set outtype=q8_0 for its GGUF at Q8_0) or a sentence-transformers dir.",
    )
    @click.option("--hard-negatives", type=int, default=None, help="Mined negative chunks per pair (default 1).")
    @click.option("--max-steps", type=int, default=None, help="Stop after this many optimizer steps.")
    @click.option("--seed", type=int, default=None)
    @_threads_opt
    @_set_opt
    def embedder_cmd(
        config, suite, fmt, synthetic, labelled, out, base, hard_negatives, max_steps, seed, n_threads, sets
    ) -> None:
        """Fine-tune an embedder (MiniLM, or EmbeddingGemma with --base) on filtered generated queries (or,
        with --labelled, on the suite's training queries); report it on the held-out split."""
        from qmdlab.training.embedder import EmbedderRunConfig, run_embedder

        _run_logged(
            run_embedder, EmbedderRunConfig, ("suite", "pairs", "steps", "train_loss", "model", "heldout", "seconds")
        )

    @train.command("adapter")
    @_config_opt
    @click.option(
        "--suite",
        default=None,
        help="Labelled suite (scifact, default, cisi … or a directory); "
        "without it, the index of the command (`qmdlab --index NAME train adapter --synthetic`).",
    )
    @_format_opt
    @click.option(
        "--synthetic",
        is_flag=True,
        default=None,
        help="Fit on the generated queries the index stores for its chunks (`qmdlab expand-docs`), each with its "
        "own chunk, instead of labelled queries.",
    )
    @click.option(
        "--generator", default=None, help="With --synthetic: the generator fingerprint (default: the active one)."
    )
    @click.option(
        "--split",
        default=None,
        help="With --synthetic in a suite: a splits.json (or a doc2query run) whose held-out side is kept out.",
    )
    @click.option("--output-dir", "--out", "out", default=None, help="Run directory (default runs/adapter).")
    @click.option("--preset", default=None, help="Model preset whose embedder is the base.")
    @click.option("--embed-model", default=None, metavar="REF", help="The base embedder (default: the preset's).")
    @click.option("--rank", type=int, default=None, help="0: a full d x d map (default); r: I + U V^T of rank r.")
    @click.option("--folds", type=int, default=None, help="Folds for a suite without an official split (default 5).")
    @click.option("--epochs", type=int, default=None, help="At most this many epochs (default 40).")
    @click.option("--seed", type=int, default=None)
    @_threads_opt
    @_set_opt
    @click.pass_context
    def adapter_cmd(
        ctx,
        config,
        suite,
        fmt,
        synthetic,
        generator,
        split,
        out,
        preset,
        embed_model,
        rank,
        folds,
        epochs,
        seed,
        n_threads,
        sets,
    ) -> None:
        """Fit a query-side adapter (a linear map of query vectors) against the index's stored vectors:
        no re-embedding; use it as --embed-model BASE+adapter:DIR."""
        from qmdlab.training.adapter import AdapterRunConfig, run_adapter

        index = (ctx.obj or {}).get("index")  # used without a suite
        res = run_adapter(_step_config(AdapterRunConfig, index=index), log=lambda m: click.echo(m, err=True))
        _echo(
            {
                k: res.get(k)
                for k in (
                    "suite",
                    "index",
                    "mode",
                    "pairs",
                    "best_epoch",
                    "heldback",
                    "heldout",
                    "adapter",
                    "digest",
                    "use",
                )
            }
        )

    @train.command("synth")
    @_config_opt
    @click.option("--collection", default=None, help="Collection of the index to sample passages from.")
    @click.option("--teacher", default=None, help="Teacher model: GGUF ref (pkg:/hf:/path) or HF directory.")
    @click.option("-n", "--n-passages", type=int, default=None)
    @click.option("--output", default=None, help="Output JSONL (appended to; re-runs continue).")
    @_set_opt
    @click.pass_context
    def synth_cmd(ctx, config, collection, teacher, n_passages, output, sets) -> None:
        """Synthesise (query → expansion) examples for your own collection with a teacher model."""
        from qmdlab.training.synth import SynthConfig, run_synth

        index = (ctx.obj or {}).get("index")
        _echo(run_synth(_step_config(SynthConfig, index=index)))
