"""Scaling out with Ray (the optional ``qmdlab[scale]`` extra).

- :mod:`qmdlab.scale.cluster` — connecting to (or starting) a Ray instance, the install hint,
  the per-actor resources (:class:`~qmdlab.scale.cluster.RayOptions`);
- :mod:`qmdlab.scale.ray_embed` — ``qmdlab embed --ray``: Ray Data ``map_batches`` with one
  embedder per actor, a single batched writer in the driver;
- :mod:`qmdlab.scale.ray_queries` — ``qmdlab eval SUITE --ray``: pipeline traces computed by
  Ray actors, each with its models loaded once, handed back to :func:`qmdlab.eval.record.record`.

Nothing here imports Ray at module import time: without the extra, qmdlab works as before and
``--ray`` fails with :data:`~qmdlab.scale.cluster.INSTALL_HINT`.
"""
