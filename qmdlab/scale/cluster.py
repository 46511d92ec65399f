"""Ray: import with an exact install hint, connect (or start a local instance), actor resources."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, NamedTuple

from qmdlab.errors import ConfigError, QmdlabError

RAY_VERSION = "2.60.0"
INSTALL_HINT = (
    f"--ray needs Ray Data, which is not installed; install the scale extra: "
    f"pip install 'qmdlab[scale]'  (or: pip install 'ray[data]=={RAY_VERSION}')"
)

#: Environment forwarded to every actor (``QMDLAB_HOME`` and friends decide where models and
#: the LLM cache are looked up); on a cluster these paths must exist on every node.
FORWARD_PREFIX = "QMDLAB_"


def import_ray():
    """The ``ray`` module, or a :class:`QmdlabError` carrying :data:`INSTALL_HINT`."""
    try:
        import ray
        import ray.data  # noqa: F401 — the Data library is what ``--ray`` embedding needs
    except ImportError as err:
        raise QmdlabError(f"{INSTALL_HINT} ({err})") from None
    return ray


class RayOptions(NamedTuple):
    """Where to run and what each actor asks of the cluster.

    Attributes
    ----------
    address : str or None
        ``None``/``""``: ``ray.init()`` (``$RAY_ADDRESS`` when set, else a new local instance);
        ``"local"``: always a new local instance; ``"auto"``: the running cluster this node
        belongs to; ``"HOST:6379"`` or ``"ray://HOST:10001"``: that cluster.
    actors : int or None
        Actors to start (default: as many as the cluster's CPUs allow at ``num_cpus`` each).
    num_cpus, num_gpus : float
        Resources of one actor (``num_gpus=1`` puts one embedder per GPU).
    """

    address: str | None = None
    actors: int | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0

    def check(self) -> RayOptions:
        """Reject impossible resource requests with the flag to fix.

        >>> RayOptions(actors=0).check()
        Traceback (most recent call last):
        qmdlab.errors.ConfigError: --ray-actors must be at least 1 (got 0)
        """
        if self.actors is not None and self.actors < 1:
            raise ConfigError(f"--ray-actors must be at least 1 (got {self.actors})")
        if self.num_cpus < 0 or self.num_gpus < 0 or (self.num_cpus == 0 and self.num_gpus == 0):
            raise ConfigError(
                f"--ray-cpus/--ray-gpus: each actor needs some CPU or GPU "
                f"(got {self.num_cpus} CPU, {self.num_gpus} GPU)"
            )
        return self

    def actor_count(self, ray: Any) -> int:
        """:attr:`actors`, else as many as the cluster's free CPUs (or GPUs) fit, at least 1."""
        if self.actors:
            return self.actors
        res = ray.cluster_resources()
        fits = []
        if self.num_cpus:
            fits.append(int(res.get("CPU", 1) // self.num_cpus))
        if self.num_gpus:
            fits.append(int(res.get("GPU", 0) // self.num_gpus))
        return max(1, min(fits))


def forwarded_env() -> dict[str, str]:
    """The driver's ``QMDLAB_*`` variables, set in each actor before it loads anything."""
    return {k: v for k, v in os.environ.items() if k.startswith(FORWARD_PREFIX)}


@contextlib.contextmanager
def connect(address: str | None) -> Iterator[Any]:
    """Yield the ``ray`` module connected to ``address`` (see :class:`RayOptions`).

    A Ray already initialised in this process (a test, a notebook) is used as it is and left
    running; one started here is shut down on exit.
    """
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
    if address == "local":
        kwargs.update(address="local", include_dashboard=False)
    elif address:
        kwargs["address"] = address
    elif not os.environ.get("RAY_ADDRESS"):
        kwargs["include_dashboard"] = False
    try:
        ray.init(**kwargs)
    except ConnectionError as err:
        raise QmdlabError(
            f"--ray {address or ''}: cannot reach a Ray cluster ({err}); start one with "
            "`ray start --head` or pass --ray without an address for a local instance"
        ) from None
    try:
        yield ray
    finally:
        ray.shutdown()
