"""``qmdlab doctor``: versions, CPU vs. llama.cpp build, model files, and each model run in a child.

All logic lives in :mod:`qmdlab.doctor`; this verb only prints. Exit status 1 when a check fails
(a child died by a signal, a model is missing, the build uses a feature the CPU lacks).
"""

from __future__ import annotations

import json

import click

from qmdlab.role_options import preset_option


def register(group: click.Group) -> None:
    """Add ``doctor`` to the ``qmdlab`` group."""

    @group.command("doctor")
    @click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON.")
    @click.option(
        "--smoke",
        is_flag=True,
        help="Only the child-process checks, without speed measurements (fast; `make setup` runs it).",
    )
    @preset_option()
    @click.option("--timeout", default=300.0, show_default=True, help="Seconds allowed per child process.")
    @click.pass_context
    def doctor(ctx: click.Context, as_json: bool, smoke: bool, preset: str | None, timeout: float) -> None:
        """Check that this machine runs the models: versions, CPU features against the llama.cpp
        build, model files, and each model loaded and run in its own child process (with chunks/s,
        tokens/s and pairs/s unless --smoke)."""
        from qmdlab import doctor as dr

        if smoke and not as_json:
            click.echo("smoke check: each model of the preset runs in its own child process")
            checks = dr.run_checks(
                preset, smoke=True, timeout=timeout, progress=lambda c: click.echo("  " + dr.format_check(c))
            )
            failed = [c for c in checks if not c.ok]
            for c in failed:
                click.echo(c.error, err=True)
            if not checks:
                click.echo("  no llama.cpp model in this preset: nothing to run")
            elif not failed:
                click.echo("smoke check passed")
            ctx.exit(1 if failed else 0)
        if smoke:
            checks = dr.run_checks(preset, smoke=True, timeout=timeout)
            click.echo(
                json.dumps(
                    {"ok": all(c.ok for c in checks), "checks": [c._asdict() for c in checks]}, indent=2, default=str
                )
            )
            ctx.exit(0 if all(c.ok for c in checks) else 1)
        progress = None if as_json else (lambda c: click.echo("  " + dr.format_check(c), err=True))
        if not as_json:
            click.echo("running each model in a child process (about a minute on 2 cores)…", err=True)
        rep = dr.diagnose(preset, smoke=False, timeout=timeout, progress=progress)
        click.echo(dr.to_json(rep) if as_json else dr.format_report(rep))
        ctx.exit(0 if rep.ok else 1)
