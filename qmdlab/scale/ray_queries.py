"""``qmdlab eval SUITE --ray``: pipeline traces computed by Ray actors.

:class:`RayQueries` is the ``remote`` of :func:`qmdlab.eval.record.record`: given the judged queries
that are not in the trace cache and the driver's :class:`qmdlab.Lab`, it starts a pool of
:class:`QueryActor` s — each opens the same index directory (which therefore must be on a
filesystem every node sees, at the same path), loads its models **once** from explicit
references resolved in the driver, and runs :meth:`qmdlab.Lab.query` with the driver's config —
and yields ``(qid, trace)`` as each query finishes. The driver stores every trace in the same
trace cache as a local run, so run files and metrics are computed by the same code from the
same traces.

The actors only read the index, except for the LLM-output cache (expansions, rerank scores),
which they share with local runs exactly as a local :class:`~qmdlab.Lab` does.
Models are checked before any query runs: an actor whose model fingerprints differ from the
driver's (another model file or qmdlab version on a node) stops the run, because its traces
would be cached under a key that does not describe them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from qmdlab.errors import ModelError
from qmdlab.scale.cluster import RayOptions, connect, forwarded_env

ROLES = ("embed", "expand", "rerank")


class ModelSpec(NamedTuple):
    """The models an actor loads: one explicit reference per role (``None``: role disabled).

    Attributes
    ----------
    refs : tuple of (str or None)
        ``(embed, expand, rerank)`` references, resolved in the driver.
    n_threads : int or None
        llama.cpp threads per actor.
    """

    refs: tuple
    n_threads: int | None = None

    @classmethod
    def resolve(cls, preset: str | None = None, *, n_threads: int | None = None, **roles: Any) -> ModelSpec:
        """The references :func:`qmdlab.models.load_models` would use for ``preset`` and ``roles``
        here (argument, environment, ``models.yaml``, preset), made explicit for the actors."""
        from qmdlab.models.registry import resolve_refs

        _, refs = resolve_refs(preset, roles)
        for role, ref in refs.items():
            if ref is not None and not isinstance(ref, str):
                raise ModelError(f"--ray needs model references, not a {type(ref).__name__} object, for {role}")
        return cls(tuple(refs[r] for r in ROLES), n_threads)

    def build(self) -> Any:
        """The :class:`~qmdlab.models.ModelSet` (lazy: llama.cpp weights load on first use)."""
        from qmdlab.models import load_models

        embed, expand, rerank = ("none" if ref is None else ref for ref in self.refs)  # in ROLES order
        return load_models(embed=embed, expand=expand, rerank=rerank, n_threads=self.n_threads)


def fingerprints(models: Any) -> list[str | None]:
    """``fingerprint`` of each role's model (``None`` for a disabled role)."""
    return [
        None if m is None else str(getattr(m, "fingerprint", None) or getattr(m, "model_id", ""))
        for m in (models if models is not None else (None, None, None))
    ]


class QueryActor:
    """One Ray actor: the index opened read-mostly, the models loaded once, a Lab."""

    def __init__(self, index_dir: str, spec: ModelSpec, config: Any, env: dict[str, str]):
        os.environ.update(env)
        from qmdlab.pipeline.lab import Lab
        from qmdlab.store import Index

        self.models = spec.build()
        self.lab = Lab(Index(Path(index_dir)), self.models, config)

    def fingerprints(self) -> list[str | None]:
        return fingerprints(self.models)

    def run(self, row: dict, env: dict[str, str]) -> tuple[str, Any]:
        os.environ.update(env)  # the driver's query budget (lifted for an evaluation)
        qid = str(row["qid"])
        return qid, self.lab.query(row["query"], intent=row.get("intent") or None, qid=qid)


class RayQueries:
    """``remote`` for :func:`qmdlab.eval.record.record`: traces of query rows from a pool of actors.

    Parameters
    ----------
    spec : ModelSpec
        What each actor loads.
    options : RayOptions
        Address, actors, per-actor CPUs/GPUs.
    models : ModelSet, optional
        The driver's models: their fingerprints must equal every actor's.
    progress : bool
        A tqdm bar of queries done.
    """

    def __init__(
        self, spec: ModelSpec, options: RayOptions = RayOptions(), *, models: Any = None, progress: bool = True
    ):
        self.spec, self.options, self.progress = spec, options.check(), progress
        self.expected = fingerprints(models) if models is not None else None
        self.actors_used = 0

    def __call__(self, rows: Sequence[dict], lab: Any) -> Iterator[tuple[str, Any]]:
        from tqdm import tqdm

        rows = list(rows)
        if not rows:
            return
        spec = self.spec
        if spec.n_threads is None and self.options.num_cpus >= 1:
            spec = spec._replace(n_threads=int(self.options.num_cpus))
        with connect(self.options.address) as ray:
            from ray.util import ActorPool

            n = min(self.options.actor_count(ray), len(rows))
            cls = ray.remote(num_cpus=self.options.num_cpus, num_gpus=self.options.num_gpus)(QueryActor)
            env = forwarded_env()
            actors = [cls.remote(str(Path(lab.index.dir).resolve()), spec, lab.config, env) for _ in range(n)]
            self.actors_used = n
            try:
                if self.expected is not None:
                    for got in ray.get([a.fingerprints.remote() for a in actors]):
                        if got != self.expected:
                            raise ModelError(
                                f"a Ray actor loaded models {got} but this run records under {self.expected}: "
                                "every node needs the same model files and qmdlab version "
                                "(run `qmdlab pull` there)"
                            )
                pool = ActorPool(actors)
                with tqdm(
                    total=len(rows), unit="q", desc=f"queries (ray, {n} actors)", disable=not self.progress
                ) as bar:
                    for qid, trace in pool.map_unordered(lambda a, r: a.run.remote(r, env), rows):
                        bar.update(1)
                        yield qid, trace
            finally:
                for a in actors:
                    ray.kill(a)
