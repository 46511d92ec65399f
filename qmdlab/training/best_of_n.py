"""SFT examples by rejection sampling on the retrieval gain: each training query's best sampled expansion.

GRPO on the gain moves a small policy little per step on 2 cores (one query and 4 completions a step, and
most groups have no spread to learn from; ``docs/results/expander.md``). Rejection-sampling fine-tuning
(expert iteration) spends the same sampling once, up front: the engine's own expander answers every
*train-split* judged query ``samples`` times at a sampling temperature, under the grammar and prompt the
engine decodes it with; each answer is scored by the GRPO gain reward
(:class:`qmdlab.training.reward.GainReward`: ΔnDCG@10 against the same query without expansion, on the
pipeline the GRPO stage configures); the best answer of a query becomes an SFT example when its gain is
at least ``min_gain`` above zero and above the greedy answer's. Queries where no sample gains give no
example, so SFT moves the model only where expansion measurably helped, in the model's own words.

Every sample and its Δ is written to ``<out>/samples.jsonl`` as it is scored, so an interrupted run
resumes at the next unanswered query. Labels of held-out queries are never read: the rows come from
:func:`qmdlab.training.grpo.split_rows` (a held-out query among them raises
:class:`~qmdlab.training.leakage.LeakError`), and GRPO's held-back slice is left out as well.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from qmdlab.training.data import Example


def pick_best(samples: list[dict], *, min_gain: float = 0.0) -> dict | None:
    """The sample to train on: the largest Δ among the sampled answers, when it exceeds both zero and
    the greedy answer's Δ by more than ``min_gain`` (ties: the first drawn). ``samples`` are
    ``{"seed", "raw", "delta"}`` records, the greedy one with ``seed`` None; a malformed answer's Δ is None.

    >>> s = [{"seed": None, "raw": "g", "delta": 0.1}, {"seed": 0, "raw": "a", "delta": 0.3},
    ...      {"seed": 1, "raw": "b", "delta": 0.3}, {"seed": 2, "raw": "c", "delta": None}]
    >>> pick_best(s)["raw"], pick_best(s, min_gain=0.25)
    ('a', None)
    >>> pick_best([{"seed": None, "raw": "g", "delta": -0.2}, {"seed": 0, "raw": "a", "delta": 0.0}])
    """
    greedy = max((s["delta"] for s in samples if s["seed"] is None and s["delta"] is not None), default=0.0)
    drawn = [s for s in samples if s["seed"] is not None and s["delta"] is not None]
    if not drawn:
        return None
    best = max(drawn, key=lambda s: s["delta"])  # max keeps the first of equal values
    return best if best["delta"] > max(0.0, greedy) + min_gain else None


def _done(path: Path) -> dict[str, list[dict]]:
    """The samples already scored, by qid (a resumed run skips their queries)."""
    found: dict[str, list[dict]] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rec = json.loads(line)
                found.setdefault(rec["qid"], []).append(rec)
    return found


def sample_and_score(
    rows: Iterable[dict],
    expander: Any,
    gain: Any,
    *,
    samples: int,
    sampling: Any,
    out_file: Path,
    progress: bool = True,
) -> dict[str, list[dict]]:
    """Answer each row's query greedily once and ``samples`` times with ``sampling`` (seed ``i`` for the
    ``i``-th), score every answer with ``gain`` and append the records to ``out_file``; returns every
    query's records, those of an earlier run included."""
    from tqdm import tqdm

    from qmdlab.models.llama_expand import DETERMINISTIC

    found = _done(out_file)
    todo = [r for r in rows if r["qid"] not in found]
    base_sampling = expander.sampling
    try:
        with (
            out_file.open("a", encoding="utf-8") as f,
            tqdm(total=len(todo), desc="best-of-n", unit="query", disable=not progress) as pb,
        ):
            for row in todo:
                recs = []
                for seed in [None, *range(samples)]:
                    expander.sampling = (
                        replace(DETERMINISTIC, max_tokens=sampling.max_tokens)
                        if seed is None
                        else replace(sampling, seed=seed)
                    )
                    raw = expander.expand(row["query"], intent=row.get("intent")).raw
                    score = gain.score(row["query"], row["qid"], raw)
                    recs.append(
                        {"qid": row["qid"], "query": row["query"], "seed": seed, "raw": raw, "delta": score.delta}
                    )
                for rec in recs:  # one query's records together: a stop mid-query redoes that query
                    f.write(json.dumps(rec) + "\n")
                f.flush()
                found[row["qid"]] = recs
                pb.update(1)
    finally:  # the caller's expander keeps its own sampling, a stopped run included
        expander.sampling = base_sampling
    return found


def examples_from(found: dict[str, list[dict]], *, min_gain: float = 0.0) -> list[Example]:
    """One :class:`~qmdlab.training.data.Example` per query whose best sample :func:`pick_best` keeps;
    its lines in the order the model wrote them (``extra``: the sample's Δ and the greedy Δ)."""
    from qmdlab.training.reward import parse_completion

    out = []
    for qid in sorted(found):
        recs = found[qid]
        best = pick_best(recs, min_gain=min_gain)
        if best is None:
            continue
        greedy = next((r["delta"] for r in recs if r["seed"] is None), None)
        lines = tuple((str(t), str(x)) for t, x in parse_completion(best["raw"]).lines)
        out.append(Example(best["query"], lines, extra={"qid": qid, "delta": best["delta"], "greedy_delta": greedy}))
    return out


def best_of_n_examples(
    gcfg: Any,
    out_dir: str | Path,
    *,
    samples: int = 8,
    min_gain: float = 0.0,
    exclude_qids: Iterable[str] = (),
    expander: str | None = None,
    progress: bool = True,
) -> tuple[list[Example], dict]:
    """The best-of-``samples`` SFT examples of ``gcfg``'s train-split queries (a
    :class:`~qmdlab.training.grpo.GRPORunConfig` with ``reward: gain``: its suites, split, pipeline,
    reward, models preset and sampling — temperature, top-k, top-p, ``max_completion_length`` tokens),
    less ``exclude_qids``; and a summary (queries, kept, mean Δ of greedy,
    of all samples and of the kept ones). ``expander`` (a model reference, say an earlier round's
    exported GGUF, prompted from its sidecar) is sampled instead of the preset's: expert iteration."""
    from qmdlab.models import load_models
    from qmdlab.models.llama_expand import SamplingConfig
    from qmdlab.training.grpo import gain_reward, split_rows, suite_retrieval

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    skip = set(exclude_qids)
    rows = [r for r in split_rows(gcfg) if r["qid"] not in skip]
    gain = gain_reward(gcfg, suite_retrieval(gcfg))
    models = load_models(gcfg.models_preset, embed="none", expand=expander, rerank="none", n_threads=2)
    sampler = models.expander
    if sampler is None:
        from qmdlab.errors import ConfigError

        raise ConfigError(f"models preset {gcfg.models_preset!r} has no expander to sample from")
    sampling = SamplingConfig(
        temperature=gcfg.temperature, top_k=gcfg.top_k, top_p=gcfg.top_p, max_tokens=gcfg.max_completion_length
    )
    try:
        found = sample_and_score(
            rows, sampler, gain, samples=samples, sampling=sampling, out_file=out / "samples.jsonl", progress=progress
        )
    finally:
        models.close()
    found = {r["qid"]: found[r["qid"]] for r in rows}
    examples = examples_from(found, min_gain=min_gain)

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    every = [r["delta"] for recs in found.values() for r in recs if r["seed"] is not None and r["delta"] is not None]
    summary = {
        "queries": len(found),
        "samples": samples,
        "kept": len(examples),
        "greedy_delta": mean(
            [r["delta"] for recs in found.values() for r in recs if r["seed"] is None and r["delta"] is not None]
        ),
        "sample_delta": mean(every),
        "sample_harmful": mean([float(d < 0) for d in every]),
        "kept_delta": mean([ex.extra["delta"] for ex in examples]),
        "expander": sampler.fingerprint,
        "sampling": sampling.key(),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return examples, summary


__all__ = ["best_of_n_examples", "examples_from", "pick_best", "sample_and_score"]
