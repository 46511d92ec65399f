"""Collection verbs as qmd has them, and the verbs around them: ``collection include|exclude|show|
ignore|update-cmd|import-qmd``, ``trust`` (approve update commands) and ``init`` (a project-local
index).

Registered by :mod:`qmdlab.commands.store` (the ``collection`` group lives there); the logic is
in :mod:`qmdlab.store.catalog`, :mod:`qmdlab.store.trust` and :mod:`qmdlab.store.qmdimport`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import click

from qmdlab.errors import ConfigError


def _open(ctx):
    from qmdlab.commands.store import open_index

    return open_index(ctx)


#: qmd's other names for collection verbs.
COLLECTION_ALIASES = {"rm": "remove", "mv": "rename", "info": "show", "set-update": "update-cmd"}


class AliasGroup(click.Group):
    """A group that also answers to other names of its verbs (``aliases``: alias → verb); the
    aliases are not listed in ``--help``."""

    def __init__(self, *args, aliases: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.aliases = dict(aliases or {})

    def get_command(self, ctx, cmd_name):
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))

    def resolve_command(self, ctx, args):
        name, cmd, rest = super().resolve_command(ctx, args)
        return (cmd.name if cmd is not None else name), cmd, rest


def git_pull(idx, names: list[str] | None) -> None:
    """``update --pull``: ``git pull --ff-only`` in each collection's folder that is a git checkout
    (others are skipped with a note); a failed pull stops the update."""
    wanted = None if names is None else set(names)
    for coll in idx.collections():
        if wanted is not None and coll.name not in wanted:
            continue
        from qmdlab.store.config import Collection

        probe = (
            subprocess.run(
                ["git", "-C", str(coll.root), "rev-parse", "--is-inside-work-tree"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
            )
            if shutil.which("git")
            else None
        )
        if probe is None or probe.returncode != 0:
            click.echo(f"{coll.name}: not a git checkout; nothing to pull", err=True)
            continue
        from qmdlab.store import trust

        click.echo(f"{coll.name}: git pull --ff-only", err=True)
        ok, message = trust.run_update_command(Collection(coll.name, coll.root, update_cmd="git pull --ff-only"))
        if not ok:
            raise ConfigError(
                f"{message.replace('update command', 'git pull')}; nothing was re-indexed — fix the "
                "checkout, or update without --pull"
            )
        if message:
            click.echo(message, err=True)


def run_update_commands(idx, names: list[str] | None) -> None:
    """Before ``update``: run the approved update command of each collection to be re-indexed;
    say how to approve each one that is not (nothing is asked, nothing unapproved runs). A command
    that fails stops the update before any collection is re-indexed (qmd aborts the run too)."""
    from qmdlab.store import trust

    wanted = None if names is None else set(names)
    for coll in idx.collections():
        if not coll.update_cmd or (wanted is not None and coll.name not in wanted):
            continue
        if not trust.is_approved(idx.config_path, coll):
            click.echo(f"warning: {trust.refusal(coll)}", err=True)
            continue
        click.echo(f"{coll.name}: running update command: {coll.update_cmd}", err=True)
        ok, message = trust.run_update_command(coll)
        if not ok:
            raise ConfigError(
                f"{message}; nothing was re-indexed — fix the command, or clear it with "
                f"`qmdlab collection update-cmd {coll.name}`"
            )
        if message:
            click.echo(message, err=True)


def register_collection_verbs(collection: click.Group) -> None:
    """Add qmd's collection verbs to the ``collection`` group."""

    def _set_include(ctx, name: str, include: bool) -> None:
        idx = _open(ctx)
        idx.update_collection(name, include=include)
        scope = idx.default_collections()
        click.echo(
            f"collection {name}: {'included in' if include else 'excluded from'} queries that name no "
            f"collection (they search: {'all collections' if scope is None else ', '.join(scope) or 'none'})"
        )

    @collection.command("include")
    @click.argument("name")
    @click.pass_context
    def collection_include(ctx, name: str) -> None:
        """Search NAME again in queries that name no collection (-c)."""
        _set_include(ctx, name, True)

    @collection.command("exclude")
    @click.argument("name")
    @click.pass_context
    def collection_exclude(ctx, name: str) -> None:
        """Leave NAME out of queries that name no collection; `-c NAME` still searches it."""
        _set_include(ctx, name, False)

    @collection.command("show")
    @click.argument("name")
    @click.pass_context
    def collection_show(ctx, name: str) -> None:
        """Path, mask, ignore globs, include status, update command and contexts of NAME."""
        from qmdlab.store import trust

        idx = _open(ctx)
        c = idx.collection(name)
        docs = next((x["documents"] for x in idx.status()["collections"] if x["name"] == name), 0)
        click.echo(f"collection: {c.name}")
        click.echo(f"path:       {c.root}")
        click.echo(f"mask:       {c.mask}")
        click.echo(f"ignore:     {', '.join(c.ignore) if c.ignore else '(none)'}")
        click.echo(f"include:    {'yes' if c.include else 'no (only searched with -c ' + name + ')'}")
        if c.update_cmd:
            state = (
                "approved" if trust.is_approved(idx.config_path, c) else f"not approved (run `qmdlab trust -c {name}`)"
            )
            click.echo(f"update:     {c.update_cmd}  [{state}]")
        else:
            click.echo("update:     (none)")
        click.echo(f"documents:  {docs}")
        ctxs = [x for x in idx.contexts() if x.target.strip("/").split("/")[0] == name]
        click.echo("contexts:" + ("" if ctxs else "   (none)"))
        for x in ctxs:
            click.echo(f"  {x.target}\t{x.text}")

    @collection.command("ignore")
    @click.argument("name")
    @click.argument("globs", nargs=-1)
    @click.option("--clear", is_flag=True, help="Remove every ignore glob of NAME.")
    @click.pass_context
    def collection_ignore(ctx, name: str, globs: tuple[str, ...], clear: bool) -> None:
        """Add ignore GLOBS to NAME (on top of the built-in exclusions); the next `qmdlab update`
        drops the files they match. Without GLOBS, list them."""
        idx = _open(ctx)
        c = idx.collection(name)
        if clear and globs:
            raise click.UsageError("give GLOBS or --clear, not both")
        if not globs and not clear:
            click.echo("\n".join(c.ignore) if c.ignore else f"collection {name}: no ignore globs")
            return
        new = () if clear else tuple(dict.fromkeys((*c.ignore, *globs)))
        idx.update_collection(name, ignore=new)
        click.echo(f"collection {name}: ignore {', '.join(new) if new else '(none)'}; run `qmdlab update -c {name}`")

    @collection.command("update-cmd", context_settings={"ignore_unknown_options": True})
    @click.argument("name")
    @click.argument("command", nargs=-1, type=click.UNPROCESSED)
    @click.pass_context
    def collection_update_cmd(ctx, name: str, command: tuple[str, ...]) -> None:
        """Set the shell COMMAND run in NAME's folder before `qmdlab update` re-indexes it (e.g.
        'git pull --ff-only'); without COMMAND, clear it. A command set here is approved for this
        config; one that arrives in a config file runs only after `qmdlab trust`."""
        from qmdlab.store import trust

        idx = _open(ctx)
        text = " ".join(command).strip() or None
        c = idx.update_collection(name, update_cmd=text)
        if text is None:
            trust.revoke(idx.config_path, [name])
            click.echo(f"collection {name}: update command cleared")
            return
        trust.approve(idx.config_path, [c])
        click.echo(f"collection {name}: `qmdlab update` first runs: {text}")

    @collection.command("import-qmd")
    @click.argument("config", required=False, type=click.Path(path_type=Path))
    @click.option(
        "--qmd-index",
        "qmd_index",
        default=None,
        metavar="NAME",
        help="A named qmd index: read NAME.yml from qmd's config folder.",
    )
    @click.option("--dry-run", is_flag=True, help="Print what would be mapped; register nothing.")
    @click.option(
        "--models/--no-models",
        default=True,
        show_default=True,
        help="Copy qmd's models.embed/rerank/generate into $QMDLAB_HOME/models.yaml.",
    )
    @click.option("--no-update", is_flag=True, help="Register only; index later with `qmdlab update`.")
    @click.pass_context
    def collection_import_qmd(
        ctx, config: Path | None, qmd_index: str | None, dry_run: bool, models: bool, no_update: bool
    ) -> None:
        """Register the collections, contexts, model overrides and editor link of a qmd config
        (CONFIG; default: a project-local .qmd/index.yml, else index.yml in $QMD_CONFIG_DIR,
        $XDG_CONFIG_HOME/qmd or ~/.config/qmd). qmd's files are only read."""
        from qmdlab.store.qmdimport import apply_import, find_qmd_config, plan_import

        if config is not None and qmd_index is not None:
            raise click.UsageError("give CONFIG or --qmd-index NAME, not both")
        source = find_qmd_config(config, index_name=qmd_index)
        plan = plan_import(source)
        idx = _open(ctx)
        res = apply_import(idx, plan, models=models, dry_run=dry_run)
        click.echo(f"{'would import' if dry_run else 'imported'} from {source}:")
        for line in res.lines or ["(nothing to import)"]:
            click.echo(f"  {line}")
        if res.skipped:
            click.echo("not imported:")
            for line in res.skipped:
                click.echo(f"  {line}")
        if res.pending_commands and not dry_run:
            click.echo("update commands wait for approval: `qmdlab trust` (shows them first)")
        if res.registered and not dry_run and not no_update:
            from qmdlab.commands.store import print_report

            print_report(idx.update(res.registered, progress=True))


def register(group: click.Group) -> None:
    """Add ``trust`` and ``init`` to the ``qmdlab`` group."""

    @group.group("trust", invoke_without_command=True)
    @click.option("-c", "--collection", "names", multiple=True, help="Only these collections (repeatable).")
    @click.option("-y", "--yes", is_flag=True, help="Approve without asking (the commands are still printed).")
    @click.pass_context
    def trust_cmd(ctx, names: tuple[str, ...], yes: bool) -> None:
        """Review and approve the update commands of this index's collections (each runs before
        `qmdlab update` re-indexes its collection). `trust list` shows approvals, `trust revoke` drops them."""
        if ctx.invoked_subcommand is not None:
            return
        from qmdlab.store import trust

        idx = _open(ctx)
        colls = [idx.collection(n) for n in names] if names else idx.collections()
        todo = trust.pending(idx.config_path, colls)
        if not todo:
            click.echo(
                "nothing to approve: no update command is waiting" + (" for " + ", ".join(names) if names else "")
            )
            return
        click.echo(f"update commands in {idx.config_path}:")
        for c in todo:
            click.echo(f"  {c.name} (runs in {c.root}): {c.update_cmd}")
        if not yes:
            if not sys.stdin.isatty():
                raise ConfigError(
                    "not approved: no terminal to ask on; re-run `qmdlab trust --yes` to approve "
                    "the commands listed above"
                )
            if not click.confirm("approve these commands?", default=False):
                click.echo("nothing approved")
                return
        for c in trust.approve(idx.config_path, todo):
            click.echo(f"approved: {c.name}: {c.update_cmd}")

    @trust_cmd.command("list")
    def trust_list() -> None:
        """Every approved update command (all indexes)."""
        from qmdlab.store import trust

        rows = trust.approvals()
        if not rows:
            click.echo("no approved update commands")
        for a in rows:
            click.echo(f"{a.collection}\t{a.command}\t{a.config}\t{a.approved_at}")

    @trust_cmd.command("revoke")
    @click.option("-c", "--collection", "names", multiple=True, help="Only these collections (default: all).")
    @click.pass_context
    def trust_revoke(ctx, names: tuple[str, ...]) -> None:
        """Drop the approvals of this index's update commands."""
        from qmdlab.store import trust

        idx = _open(ctx)
        gone = trust.revoke(idx.config_path, list(names) or None)
        click.echo(f"revoked {len(gone)} approval(s)" + "".join(f"\n  {a.collection}: {a.command}" for a in gone))

    @group.command("init")
    @click.argument("folder", required=False, type=click.Path(file_okay=False, path_type=Path))
    @click.option("--name", default=None, help="Also register FOLDER as a collection with this name.")
    @click.option("--mask", default="**/*.md", show_default=True, help="Glob(s) of that collection.")
    @click.option("--no-update", is_flag=True, help="With --name: register only; index later.")
    def init_cmd(folder: Path | None, name: str | None, mask: str, no_update: bool) -> None:
        """Create a project-local index in FOLDER/.qmdlab (default: the current folder). qmdlab
        uses it, without --index, anywhere inside FOLDER; collections.yaml there can be committed
        (roots inside the project are stored relative), the database is git-ignored."""
        from qmdlab.store import Index
        from qmdlab.store.config import PROJECT_DIR

        root = (folder or Path.cwd()).expanduser().resolve()
        if not root.is_dir():
            raise ConfigError(f"{root}: not a folder; pass an existing project folder")
        target = root / PROJECT_DIR
        existed = (target / "collections.yaml").is_file()
        try:
            target.mkdir(exist_ok=True)
            ignore = target / ".gitignore"
            if not ignore.exists():
                ignore.write_text(
                    "# qmdlab's project-local index: the database is rebuilt by `qmdlab update`\n"
                    "index.sqlite*\n*.tmp\n",
                    encoding="utf-8",
                )
        except OSError as err:
            raise ConfigError(
                f"{target}: cannot create the project index ({err.strerror or err}); run "
                "`qmdlab init` in a folder you can write to"
            ) from None
        with Index.open(target) as idx:
            if not (target / "collections.yaml").is_file():
                from qmdlab.store import config as store_config

                store_config.save(idx.config_path, store_config.Config())
            click.echo(f"{'project index exists' if existed else 'created project index'}: {target}")
            if name:
                coll = idx.add_collection(name, root, mask)
                click.echo(f"added collection {coll.name}: {coll.root} ({coll.mask})")
                if not no_update:
                    from qmdlab.commands.store import print_report

                    print_report(idx.update([coll.name], progress=True))
        click.echo(
            f"qmdlab now uses it in {root} and below (no --index needed); "
            "add collections with `qmdlab collection add PATH --name NAME`"
        )
