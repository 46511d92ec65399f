"""Collection verbs as qmd has them, and the verbs around them: ``collection include|exclude|show|
ignore|update-cmd|import-qmd``, ``trust`` (approve update commands) and ``init`` (a project-local
index).

Registered by :mod:`qmdlab.commands.store` (the ``collection`` group lives there); the logic is
in :mod:`qmdlab.store.catalog`, :mod:`qmdlab.store.trust` and :mod:`qmdlab.store.qmdimport`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import click

from qmdlab.commands.common import open_index, print_report
from qmdlab.display import printable
from qmdlab.errors import ConfigError


def _open(ctx):
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
        click.echo(f"{trust.shown(coll.name)}: running update command: {trust.shown(coll.update_cmd)}", err=True)
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
        click.echo(f"path:       {printable(str(c.root))}")
        click.echo(f"mask:       {printable(c.mask)}")
        click.echo(f"ignore:     {printable(', '.join(c.ignore)) if c.ignore else '(none)'}")
        click.echo(f"include:    {'yes' if c.include else 'no (only searched with -c ' + name + ')'}")
        if c.update_cmd:
            state = (
                "approved" if trust.is_approved(idx.config_path, c) else f"not approved (run `qmdlab trust -c {name}`)"
            )
            if trust.never_run(c) is not None:
                state = "never run: it holds a raw control character (`qmdlab trust` says which)"
            click.echo(f"update:     {trust.shown(c.update_cmd)}  [{state}]")
        else:
            click.echo("update:     (none)")
        click.echo(f"documents:  {docs}")
        ctxs = [x for x in idx.contexts() if x.target.strip("/").split("/")[0] == name]
        click.echo("contexts:" + ("" if ctxs else "   (none)"))
        for x in ctxs:
            click.echo(f"  {printable(x.target)}\t{printable(x.text)}")

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

        text = " ".join(command).strip() or None
        bad = trust.unsafe_character(text or "")
        if bad is not None:
            raise ConfigError(
                f"the command holds a raw {bad[1]} at character {bad[0] + 1}: {trust.shown(text or '')} — "
                "such a command is never run; write the character out (in bash $'\\r', or printf '\\r'); "
                "nothing was set"
            )
        idx = _open(ctx)
        c = idx.update_collection(name, update_cmd=text)
        if text is None:
            trust.revoke(idx.config_path, [name])
            click.echo(f"collection {name}: update command cleared")
            return
        trust.approve(idx.config_path, [c])
        click.echo(f"collection {name}: `qmdlab update` first runs: {trust.shown(text)}")

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
        help="Copy qmd's models.embed/rerank/generate into this index's own models (its collections.yaml).",
    )
    @click.option("--no-update", is_flag=True, help="Register only; index later with `qmdlab update`.")
    @click.option(
        "--vectors/--no-vectors",
        default=True,
        show_default=True,
        help="Reuse the vectors of qmd's database for the chunks qmd embedded with qmdlab's embed model file "
        "from the same text; the rest is left for `qmdlab embed`.",
    )
    @click.pass_context
    def collection_import_qmd(
        ctx, config: Path | None, qmd_index: str | None, dry_run: bool, models: bool, no_update: bool, vectors: bool
    ) -> None:
        """Register the collections, contexts, model overrides and editor link of a qmd config
        (CONFIG; default: the index.yaml beside $INDEX_PATH's database, else a project-local
        .qmd/index.yaml or .qmd/index.yml, else index.yml in $QMD_CONFIG_DIR, $XDG_CONFIG_HOME/qmd
        or ~/.config/qmd), index them, and take over the vectors of qmd's database where qmdlab
        embeds with the same model file: a note qmd embedded as one chunk (no front matter) is not
        embedded again; `qmdlab embed` embeds the rest. qmd's files are only read."""
        from qmdlab.store.qmdimport import apply_import, find_qmd_config, plan_import, qmd_index_path
        from qmdlab.store.trust import shown

        if config is not None and qmd_index is not None:
            raise click.UsageError("give CONFIG or --qmd-index NAME, not both")
        source = find_qmd_config(config, index_name=qmd_index)
        plan = plan_import(source)
        idx = _open(ctx)
        res = apply_import(idx, plan, models=models, dry_run=dry_run)
        # every value of qmd's file is shown escaped: a name, path or text cannot write to the terminal
        click.echo(f"{'would import' if dry_run else 'imported'} from {shown(str(source))}:")
        for line in res.lines or ["(nothing to import)"]:
            click.echo(f"  {shown(line)}")
        if res.skipped:
            click.echo("not imported:")
            for line in res.skipped:
                click.echo(f"  {shown(line)}")
        if res.held:
            click.echo(
                f"{'would wait' if dry_run else 'waiting'} for approval (the imported config may have come with a "
                "checkout; `qmdlab trust` shows each, then approves):"
            )
            for line in res.held:
                click.echo(f"  {shown(line)}")
        if res.pending_commands and not dry_run:
            click.echo("update commands wait for approval: `qmdlab trust` (shows them first)")
        qmd_db = qmd_index_path(source, qmd_index or source.stem)
        todo = [n for n in res.registered if n not in res.held_roots]  # a held root is not read before approval
        if todo and not dry_run and not no_update:
            print_report(idx.update(todo, progress=True))
        if not qmd_db.is_file() or not vectors:
            return
        if dry_run or no_update or not todo:
            why = "--dry-run" if dry_run else "--no-update" if no_update else "no collection indexed"
            click.echo(
                f"qmd's database {shown(str(qmd_db))}: vectors not read ({why}); import again after "
                "`qmdlab update` to reuse them"
            )
            return
        _reuse_vectors(idx, qmd_db, todo)


def _reuse_vectors(idx, qmd_db: Path, collections: list[str]) -> None:
    """``import-qmd``'s last step: qmd's vectors for the chunks of ``collections`` (those it
    registered and indexed) where qmdlab embeds with the same model file
    (:mod:`qmdlab.store.qmdvectors`); why not, in one line, when they cannot be read."""
    from qmdlab.commands.common import default_embedder
    from qmdlab.errors import QmdlabError
    from qmdlab.models.registry import model_file, same_model_file
    from qmdlab.store.qmdvectors import reuse_qmd_vectors
    from qmdlab.store.trust import shown

    try:
        emb = default_embedder()
        ref = str(getattr(emb, "model_id", ""))
        rep = reuse_qmd_vectors(
            idx,
            qmd_db,
            emb,
            same_model=lambda qmd_ref: same_model_file(qmd_ref, ref),
            collections=collections,
            can_check=model_file(ref) is not None,
        )
    except QmdlabError as err:
        click.echo(f"vectors: qmd's database not used: {shown(str(err))}; `qmdlab embed` computes them")
        return
    for line in rep.lines():
        click.echo(shown(line))


def _config_only(ctx):
    """``(index folder, collections.yaml)`` of ``--index`` for ``trust``, which never opens the
    database (a linked one is what it may be asked to approve); a missing index is refused as
    every writer refuses it (:func:`qmdlab.store.index.no_index_message`)."""
    from qmdlab.errors import StoreError
    from qmdlab.paths import resolve_index_dir
    from qmdlab.store import trust
    from qmdlab.store.index import CONFIG_NAME, CONFIGURED, index_exists, no_index_message

    name = (ctx.find_root().obj or {}).get("index")
    directory = resolve_index_dir(name)
    if not index_exists(directory, CONFIGURED) and not trust.index_links(directory):
        raise StoreError(no_index_message(directory, name))
    return directory, directory / CONFIG_NAME


def _config_collections(config_path: Path, names: tuple[str, ...]):
    """The collections of a config file (only ``names`` when given; an unknown one is an error)."""
    from qmdlab.store import config as store_config

    colls = store_config.load(config_path).collections
    if not names:
        return colls
    by_name = {c.name: c for c in colls}
    for n in names:
        if n not in by_name:
            known = ", ".join(by_name) or "none"
            raise ConfigError(f"unknown collection {n!r} (known: {known}); see `qmdlab collection list`")
    return [by_name[n] for n in dict.fromkeys(names)]


def _show_command(c) -> None:
    """One update command as `qmdlab trust` shows it: exactly (escaped where it does not print as
    itself), with the hash that is approved."""
    from qmdlab.store import trust

    text = c.update_cmd or ""
    click.echo(f"  {trust.shown(c.name)} (runs in {trust.shown(str(c.root))}): {trust.shown(text)}")
    hidden = sum(1 for ch in text if not ch.isprintable())
    note = (
        f"shown escaped: it holds {hidden} non-printing character(s), written as \\n, \\t, \\uXXXX …; "
        "a backslash of the command shows as \\\\; "
        if hidden
        else ""
    )
    click.echo(f"      {note}sha256 {trust.digest(text)[:16]}")


def register(group: click.Group) -> None:
    """Add ``trust`` and ``init`` to the ``qmdlab`` group."""

    @group.group("trust", invoke_without_command=True)
    @click.option("-c", "--collection", "names", multiple=True, help="Only these collections (repeatable).")
    @click.option("-y", "--yes", is_flag=True, help="Approve without asking (everything is still printed).")
    @click.pass_context
    def trust_cmd(ctx, names: tuple[str, ...], yes: bool) -> None:
        """Review and approve what a checked-in config asks for: the update commands of this index's
        collections (each runs before `qmdlab update` re-indexes its collection, in its root) and, in a
        project's .qmdlab/ or a config that received `collection import-qmd`, collection roots outside
        the project, linked index files, models served over HTTP and the editor link template. Each is shown exactly
        (non-printing characters escaped) and approved by the hash of exactly that text; any change
        asks again. `trust list` shows approvals, `trust revoke` drops them."""
        if ctx.invoked_subcommand is not None:
            return
        from qmdlab.store import config as store_config
        from qmdlab.store import trust

        directory, config_path = _config_only(ctx)
        colls = _config_collections(config_path, names)
        conf = store_config.load(config_path) if config_path.is_file() else store_config.Config()
        links = [x for x in trust.pending_links(directory) if not names or x.special]
        special = [x for x in links if x.special]
        links = [x for x in links if not x.special]
        roots = trust.pending_roots(directory, config_path, colls)
        cmds = trust.pending(config_path, colls)
        refused = [c for c in cmds if trust.never_run(c) is not None]
        cmds = [c for c in cmds if trust.never_run(c) is None]
        served = [] if names else trust.pending_models(directory, config_path, conf)
        editor = None if names else trust.editor_held(directory, config_path, conf)
        if not (links or special or roots or cmds or refused or served or editor):
            click.echo(
                "nothing to approve: no update command, path, served model or editor link is waiting"
                + (" for " + ", ".join(names) if names else "")
            )
            return
        for x in special:
            click.echo(f"refused: {trust.link_refusal(x)}", err=True)
        for c in refused:
            click.echo(f"refused: {trust.never_run(c)}", err=True)
        if links or roots or cmds or served or editor:
            if links:
                click.echo(f"linked index files in {trust.shown(str(directory))}:")
                for x in links:
                    there = "" if os.path.lexists(x.target) else "  (does not exist: qmdlab would create it)"
                    click.echo(f"  {trust.shown(x.name)} -> {trust.shown(x.target)}{there}")
            if roots:
                local = trust.project_folder(directory) is not None
                click.echo(
                    f"collection roots outside the project {trust.shown(str(directory.parent))}:"
                    if local
                    else "collection roots outside the project of the qmd config they were imported from:"
                )
                for c, real in roots:
                    click.echo(f"  {trust.shown(c.name)}: {trust.shown(real)}  (mask {trust.shown(c.mask)})")
            if served:
                click.echo(
                    f"models served over HTTP named by {trust.shown(str(config_path))} (every chunk and query "
                    "is sent there, with your API key):"
                )
                for role, ref in served:
                    click.echo(f"  models.{role}: {trust.shown(ref)}")
            if editor:
                click.echo(f"editor link template of {trust.shown(str(config_path))} (written into each result link):")
                click.echo(f"  editor_uri: {trust.shown(editor)}")
            if cmds:
                click.echo(f"update commands in {trust.shown(str(config_path))}:")
                for c in cmds:
                    _show_command(c)
            if not yes:
                if not sys.stdin.isatty():
                    raise ConfigError(
                        "not approved: no terminal to ask on; re-run `qmdlab trust --yes` to approve "
                        "what is listed above"
                    )
                if not click.confirm("approve what is listed above?", default=False):
                    click.echo("nothing approved")
                    return
            for a in trust.approve_links(directory, links):
                click.echo(f"approved: {trust.shown(a.collection)} -> {trust.shown(a.command)}")
            for a in trust.approve_roots(config_path, roots):
                click.echo(f"approved: {trust.shown(a.collection)}: root {trust.shown(a.command)}")
            for c in trust.approve(config_path, cmds):
                click.echo(f"approved: {trust.shown(c.name)}: {trust.shown(c.update_cmd or '')}")
            for a in trust.approve_models(config_path, served):
                click.echo(f"approved: models.{a.collection}: {trust.shown(a.command)}")
            if editor:
                trust.approve_editor(config_path, editor)
                click.echo(f"approved: editor_uri: {trust.shown(editor)}")
        if special or refused:
            raise ConfigError(
                f"{len(special) + len(refused)} item(s) refused (listed above with the reason and the fix); "
                "nothing of them was approved"
            )

    @trust_cmd.command("list")
    def trust_list() -> None:
        """Every approval (all indexes): kind, collection (model role, linked file), what was approved
        (a command with the root it runs in), config, date."""
        from qmdlab.store import trust

        rows = trust.approvals()
        if not rows:
            click.echo("no approvals")
        for a in rows:
            what = trust.shown(a.command) + (f" (in {trust.shown(a.root)})" if a.root else "")
            click.echo(f"{a.kind}\t{trust.shown(a.collection)}\t{what}\t{trust.shown(a.config)}\t{a.approved_at}")

    @trust_cmd.command("revoke")
    @click.option("-c", "--collection", "names", multiple=True, help="Only these collections (default: all).")
    @click.pass_context
    def trust_revoke(ctx, names: tuple[str, ...]) -> None:
        """Drop the approvals of this index: its update commands and roots (and its served models,
        editor link template and linked index files when no -c is given)."""
        from qmdlab.store import trust

        directory, config_path = _config_only(ctx)
        gone = trust.revoke(config_path, list(names) or None, index_dir=directory)
        click.echo(
            f"revoked {len(gone)} approval(s)"
            + "".join(f"\n  {trust.shown(a.collection)}: {trust.shown(a.command)}" for a in gone)
        )

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
        from qmdlab.store import trust

        target = root / PROJECT_DIR
        trust.check_index_links(target)  # a linked .qmdlab (from a checkout) is used only once approved
        existed = (target / "collections.yaml").is_file()
        try:
            target.mkdir(exist_ok=True)
            ignore = target / ".gitignore"
            if not os.path.lexists(ignore):  # "x" never writes through a link
                with open(ignore, "x", encoding="utf-8") as fh:
                    fh.write(
                        "# qmdlab's project-local index: the database is rebuilt by `qmdlab update`\n"
                        "index.sqlite*\n*.tmp\n"
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
                    print_report(idx.update([coll.name], progress=True))
        click.echo(
            f"qmdlab now uses it in {root} and below (no --index needed); "
            "add collections with `qmdlab collection add PATH --name NAME`"
        )
