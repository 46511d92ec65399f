"""The ``--ray [ADDRESS]`` options shared by ``qmdlab embed`` and ``qmdlab eval``. It lives here, not in
``qmdlab.commands``, because ``eval``'s verb module uses it and loading one verb must not load another verb's area."""

from __future__ import annotations

import click

RAY_HELP = (
    "Run on Ray (needs: pip install 'qmdlab[scale]'). Without ADDRESS: $RAY_ADDRESS, else a new local "
    "instance; 'auto': the cluster this node belongs to; HOST:6379 or ray://HOST:10001: that cluster. "
    "Give it after the positional arguments, or as --ray=ADDRESS."
)


def ray_options(fn):
    """``--ray [ADDRESS]``, ``--ray-actors``, ``--ray-cpus``, ``--ray-gpus``."""
    fn = click.option(
        "--ray-gpus", type=float, default=0.0, show_default=True, help="GPUs per Ray actor (e.g. 1: one model per GPU)."
    )(fn)
    fn = click.option("--ray-cpus", type=float, default=1.0, show_default=True, help="CPUs per Ray actor.")(fn)
    fn = click.option(
        "--ray-actors",
        type=int,
        default=None,
        help="Ray actors, each with its models loaded once (default: as many as the CPUs/GPUs fit).",
    )(fn)
    return click.option(
        "--ray", "ray_address", is_flag=False, flag_value="", default=None, metavar="[ADDRESS]", help=RAY_HELP
    )(fn)


def ray_options_from(ray_address, ray_actors, ray_cpus, ray_gpus):
    """The :class:`qmdlab.scale.cluster.RayOptions` of the flags, or ``None`` without ``--ray``."""
    if ray_address is None:
        return None
    from qmdlab.scale.cluster import RayOptions, import_ray

    import_ray()  # the install hint before any work
    return RayOptions(ray_address or None, ray_actors, ray_cpus, ray_gpus).check()
