"""qmd's collection verbs: include/exclude, show, ignore, update-cmd with the trust gate, init,
import-qmd (qmd's index.yml, read only) and editor links."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.store import Index
from qmdlab.store.qmdimport import QMD_BUILTIN_IGNORES


def _folder(root, files):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def two(tmp_path, cli_run, qmdlab_home):
    """Two indexed collections, both holding the word 'heron'."""
    a = _folder(tmp_path / "a", {"x.md": "# X\n\nheron in a\n", "drafts/d.md": "# D\n\nheron draft\n"})
    b = _folder(tmp_path / "b", {"y.md": "# Y\n\nheron in b\n"})
    cli_run("collection", "add", str(a), "--name", "a")
    cli_run("collection", "add", str(b), "--name", "b")
    return a, b


def _files(res):
    return sorted(line.split(",")[2].removeprefix("qmd://") for line in res.output.splitlines() if line.startswith("#"))


def test_exclude_leaves_a_collection_out_of_unscoped_searches_only(two, cli_run):
    assert _files(cli_run("search", "heron", "--files")) == ["a/drafts/d.md", "a/x.md", "b/y.md"]
    res = cli_run("collection", "exclude", "b")
    assert "excluded from queries" in res.output and "they search: a" in res.output
    assert _files(cli_run("search", "heron", "--files")) == ["a/drafts/d.md", "a/x.md"]
    assert _files(cli_run("search", "heron", "--files", "-c", "b")) == ["b/y.md"]  # named: still searched
    assert _files(cli_run("query", "heron", "--files", "--preset", "fake", "--no-expand", "--no-rerank")) == [
        "a/drafts/d.md",
        "a/x.md",
    ]
    assert "include:    no" in cli_run("collection", "show", "b").output
    cli_run("collection", "include", "b")
    assert _files(cli_run("search", "heron", "--files")) == ["a/drafts/d.md", "a/x.md", "b/y.md"]
    assert "include:    yes" in cli_run("collection", "show", "b").output


def test_vector_search_honours_exclusion(two, cli_run):
    from qmdlab.models import load_models
    from qmdlab.search.vector import allowed_docnos
    from qmdlab.store import Index

    cli_run("collection", "exclude", "a")
    with Index.open(cli_run.index_dir) as idx:
        assert allowed_docnos(idx, None, None) == {"b/y.md"}
        assert allowed_docnos(idx, ["a"], None) == {"a/x.md", "a/drafts/d.md"}
        assert idx.documents().height == 3  # listing and embedding still see every collection
        assert idx.chunks_needing_vectors(load_models("fake").embedder.fingerprint).height == 3


def test_show_and_ignore_globs(two, cli_run):
    a, _ = two
    cli_run("context", "add", "a/drafts", "Unfinished notes")
    cli_run("context", "add", "b", "Other collection")
    cli_run("context", "add", "/", "Everything")
    out = cli_run("collection", "show", "a").output
    assert "Other collection" not in out and "Everything" not in out
    assert f"path:       {a.resolve()}" in out and "mask:       **/*.md" in out
    assert "ignore:     (none)" in out and "a/drafts\tUnfinished notes" in out and "update:     (none)" in out
    assert "documents:  2" in out
    res = cli_run("collection", "ignore", "a", "drafts/**")
    assert "ignore drafts/**" in res.output
    cli_run("update", "--no-progress")
    assert _files(cli_run("search", "heron", "--files")) == ["a/x.md", "b/y.md"]
    assert "ignore:     drafts/**" in cli_run("collection", "show", "a").output
    assert cli_run("collection", "ignore", "a").output.strip() == "drafts/**"
    cli_run("collection", "ignore", "a", "--clear")
    cli_run("update", "--no-progress")
    assert "a/drafts/d.md" in _files(cli_run("search", "heron", "--files"))
    bad = cli_run("collection", "show", "nope", ok=False)
    assert bad.exit_code == 1 and "unknown collection 'nope'" in bad.output


def test_update_cmd_set_by_the_user_runs_before_update(two, cli_run):
    a, _ = two
    res = cli_run("collection", "update-cmd", "a", "printf", "'# New\\n\\nheron new\\n'", ">", "new.md")
    assert "first runs: printf" in res.output
    assert "[approved]" in cli_run("collection", "show", "a").output
    res = cli_run("update", "--no-progress")
    assert "a: running update command" in res.output
    assert (a / "new.md").read_text() == "# New\n\nheron new\n"
    assert "a/new.md" in _files(cli_run("search", "heron", "--files"))  # indexed by the same update
    assert "update command cleared" in cli_run("collection", "update-cmd", "a").output
    assert "update:     (none)" in cli_run("collection", "show", "a").output


def _checked_in(index_dir, name, command):
    """Write an update command straight into collections.yaml, as a config from a checkout would."""
    path = os.path.join(index_dir, "collections.yaml")
    data = yaml.safe_load(open(path, encoding="utf-8"))
    for c in data["collections"]:
        if c["name"] == name:
            c["update"] = command
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(data, fh)


def test_update_command_from_a_config_file_runs_only_after_trust(two, cli_run, monkeypatch):
    a, _ = two
    _checked_in(cli_run.index_dir, "a", "touch ran-1")
    res = cli_run("update", "--no-progress")
    assert "is not approved, so it did not run; approve it with `qmdlab trust -c a`" in res.output
    assert not (a / "ran-1").exists()
    assert "not approved (run `qmdlab trust -c a`)" in cli_run("collection", "show", "a").output
    # no terminal to ask on and no --yes: refused, with the way to approve
    res = cli_run("trust", ok=False)
    assert res.exit_code == 1 and "touch ran-1" in res.output and "`qmdlab trust --yes`" in res.output
    res = cli_run("trust", "--yes")
    assert "approved: a: touch ran-1" in res.output
    cli_run("update", "--no-progress")
    assert (a / "ran-1").exists()
    assert "touch ran-1" in cli_run("trust", "list").output
    # an edited command asks again
    _checked_in(cli_run.index_dir, "a", "touch ran-2")
    assert "not approved" in cli_run("update", "--no-progress").output and not (a / "ran-2").exists()
    cli_run("trust", "-c", "a", "--yes")
    res = cli_run("trust", "revoke", "-c", "a")
    assert "revoked 2 approval(s)" in res.output
    assert "not approved" in cli_run("update", "--no-progress").output
    monkeypatch.setenv("QMDLAB_TRUST_UPDATE_HOOKS", "1")
    cli_run("update", "--no-progress")
    assert (a / "ran-2").exists()


def test_a_failing_update_command_stops_the_update(two, cli_run):
    a, _ = two
    cli_run("collection", "update-cmd", "a", "echo broken; exit 3")
    (a / "late.md").write_text("# Late\n\nheron late\n", encoding="utf-8")
    res = cli_run("update", "--no-progress", ok=False)
    assert res.exit_code == 1 and "update command failed (exit status 3); last output: broken" in res.output
    assert "`qmdlab collection update-cmd a`" in res.output and "Traceback" not in res.output
    assert "a/late.md" not in _files(cli_run("search", "heron", "--files"))  # nothing was re-indexed


def test_update_pull_runs_git_in_checkouts_only(two, cli_run, require):
    import shutil
    import subprocess

    require(shutil.which("git") is not None, "git is not installed")
    a, b = two
    upstream = a.parent / "upstream"
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "init", "-q", str(upstream)], check=True, env=env)
    (upstream / "pulled.md").write_text("# Pulled\n\nheron from upstream\n", encoding="utf-8")
    subprocess.run(["git", "-C", str(upstream), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(upstream), "commit", "-qm", "one"], check=True, env=env)
    clone = a.parent / "clone"
    subprocess.run(["git", "clone", "-q", str(upstream), str(clone)], check=True, env=env)
    cli_run("collection", "add", str(clone), "--name", "c")
    (upstream / "second.md").write_text("# Second\n\nheron second\n", encoding="utf-8")
    subprocess.run(["git", "-C", str(upstream), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(upstream), "commit", "-qm", "two"], check=True, env=env)
    res = cli_run("update", "--pull", "--no-progress")
    assert "a: not a git checkout; nothing to pull" in res.output and "c: git pull --ff-only" in res.output
    assert "c/second.md" in _files(cli_run("search", "heron", "--files"))


QMD_YML = """
global_context: Everything I write
editor_uri: "zed://file/{path}:{line}"
models:
  embed: hf:org/repo/embed.gguf
  generate: hf:org/repo/expand.gguf
  teleport: x
collections:
  notes:
    path: NOTES
    pattern: "**/*.{md,markdown}"
    ignore: ["drafts/**"]
    context:
      /: Personal notes
      /work: Work notes
  archive:
    path: ARCHIVE
    includeByDefault: false
    update: git pull --ff-only
  "bad name":
    path: NOTES
  gone:
    path: /no/such/folder/anywhere
  odd:
    path: NOTES
    colour: blue
remote_embedding: {provider: x}
"""


def _qmd_setup(tmp_path):
    notes = _folder(
        tmp_path / "vault",
        {
            "a.md": "# A\n\nheron\n",
            "work/b.markdown": "# B\n\nheron at work\n",
            "drafts/c.md": "# C\n\nheron draft\n",
            "node_modules/pkg/readme.md": "# Pkg\n\nheron vendored\n",
        },
    )
    archive = _folder(tmp_path / "old", {"z.md": "# Z\n\nheron archived\n"})
    text = QMD_YML.replace("NOTES", str(notes)).replace("ARCHIVE", str(archive))
    return notes, archive, text


def test_import_qmd_maps_collections_contexts_models_and_editor(tmp_path, cli_run, qmdlab_home, monkeypatch):
    from qmdlab.store import Index

    notes, archive, text = _qmd_setup(tmp_path)
    conf_dir = tmp_path / "xdg" / "qmd"
    conf_dir.mkdir(parents=True)
    (conf_dir / "index.yml").write_text(text, encoding="utf-8")
    before = (conf_dir / "index.yml").stat()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("QMD_CONFIG_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    res = cli_run("collection", "import-qmd")
    out = res.output
    assert f"imported from {conf_dir / 'index.yml'}" in out
    assert f"collection notes: {notes.resolve()} (mask **/*.md,**/*.markdown; ignore drafts/**)" in out
    assert "collection archive:" in out and "excluded from unscoped queries" in out
    assert "`qmdlab trust -c archive`" in out
    for line in (
        "collection bad name: not a name qmdlab accepts",
        "collection gone: folder /no/such/folder/anywhere",
        "collection odd: colour: not a setting qmdlab has",
        "remote_embedding: not a setting qmdlab has",
        "models.teleport: not a model role",
    ):
        assert line in out, line
    after = (conf_dir / "index.yml").stat()
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)  # qmd's file: read only
    assert (conf_dir / "index.yml").read_text(encoding="utf-8") == text
    with Index.open(cli_run.index_dir) as idx:
        colls = {c.name: c for c in idx.collections()}
        assert sorted(colls) == ["archive", "notes", "odd"]
        assert colls["notes"].mask == "**/*.md,**/*.markdown"
        assert colls["notes"].ignore == ("drafts/**", *QMD_BUILTIN_IGNORES)  # qmd's built-in exclusions, explicit
        assert (colls["archive"].include, colls["archive"].update_cmd) == (False, "git pull --ff-only")
        assert {(c.target, c.text) for c in idx.contexts()} == {
            ("notes", "Personal notes"),
            ("notes/work", "Work notes"),
            ("/", "Everything I write"),
        }
        # qmd shows the longest prefix; qmdlab every applicable context, broadest first, so qmd's is last
        assert idx.contexts_for("notes/work/b.markdown") == ["Everything I write", "Personal notes", "Work notes"]
        assert idx.editor_uri() == "zed://file/{path}:{line}"
        # qmd's models are this index's own, not every index's
        assert idx.models() == {"embed": "hf:org/repo/embed.gguf", "expand": "hf:org/repo/expand.gguf"}
    assert not (qmdlab_home / "models.yaml").exists()
    own = yaml.safe_load((Path(cli_run.index_dir) / "collections.yaml").read_text(encoding="utf-8"))["models"]
    assert own == {"embed": "hf:org/repo/embed.gguf", "expand": "hf:org/repo/expand.gguf"}
    # indexed: the .markdown file by the expanded mask, drafts ignored, archive excluded from unscoped search
    assert _files(cli_run("search", "heron", "--files")) == [
        "notes/a.md",
        "notes/work/b.markdown",
        "odd/a.md",
        "odd/drafts/c.md",
    ]
    # the archive's command arrived in a config: it does not run until approved
    assert "not approved" in cli_run("update", "--no-progress", "-c", "archive").output
    again = cli_run("collection", "import-qmd", "--no-update")
    assert "[updated]" in again.output


def test_import_qmd_finds_named_and_project_local_configs(tmp_path, cli_run, qmdlab_home, monkeypatch):
    from qmdlab.store import Index

    notes, _, text = _qmd_setup(tmp_path)
    qdir = tmp_path / "qmdconf"
    qdir.mkdir()
    (qdir / "work.yml").write_text("collections:\n  w:\n    path: " + str(notes) + "\n", encoding="utf-8")
    monkeypatch.setenv("QMD_CONFIG_DIR", str(qdir))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "elsewhere"))
    monkeypatch.chdir(tmp_path)
    res = cli_run("collection", "import-qmd", "--qmd-index", "work", "--dry-run")
    assert f"would import from {qdir / 'work.yml'}" in res.output and "collection w:" in res.output
    with Index.open(cli_run.index_dir) as idx:
        assert idx.collections() == []  # --dry-run registers nothing
    missing = cli_run("collection", "import-qmd", ok=False)
    assert (
        missing.exit_code == 1 and "no qmd config found" in missing.output and str(qdir / "index.yml") in missing.output
    )
    # a project's .qmd/index.yml wins when run inside the project; relative paths are the project's
    proj = tmp_path / "proj"
    _folder(proj / "docs", {"p.md": "# P\n\nheron in project\n"})
    (proj / ".qmd").mkdir()
    (proj / ".qmd" / "index.yml").write_text(
        "collections:\n  docs:\n    path: ./docs\n    update: make notes\n", encoding="utf-8"
    )
    monkeypatch.chdir(proj / "docs")
    res = cli_run("collection", "import-qmd", "--no-models")
    assert f"imported from {proj / '.qmd' / 'index.yml'}" in res.output
    assert f"collection docs: {(proj / 'docs').resolve()}" in res.output
    assert "not approved" in res.output


def test_import_qmd_reads_index_yaml_first_and_the_editor_aliases(tmp_path, cli_run, qmdlab_home, monkeypatch):
    """qmd's findLocalConfigPath: ``.qmd/index.yaml`` before ``.qmd/index.yml``; its editor template
    under any of ``editor_uri``, ``editor_uri_template``, ``editorUri``, ``editor-uri``."""
    from qmdlab.store import Index

    proj = tmp_path / "proj"
    _folder(proj / "docs", {"p.md": "# P\n\nheron\n"})
    (proj / ".qmd").mkdir()
    (proj / ".qmd" / "index.yml").write_text("collections:\n  old:\n    path: ./docs\n", encoding="utf-8")
    (proj / ".qmd" / "index.yaml").write_text(
        "editorUri: 'cursor://file/{path}:{line}'\ncollections:\n  docs:\n    path: ./docs\n", encoding="utf-8"
    )
    (proj / ".qmd" / "index.sqlite").write_bytes(b"")
    monkeypatch.chdir(proj)
    monkeypatch.delenv("INDEX_PATH", raising=False)
    res = cli_run("collection", "import-qmd", "--no-update")
    assert f"imported from {proj / '.qmd' / 'index.yaml'}" in res.output and "collection docs:" in res.output
    assert "editorUri: not a setting" not in res.output
    assert f"qmd's database {proj / '.qmd' / 'index.sqlite'}: vectors not read (--no-update)" in res.output
    with Index.open(cli_run.index_dir) as idx:
        assert [c.name for c in idx.collections()] == ["docs"] and idx.editor_uri() == "cursor://file/{path}:{line}"
    for key in ("editor-uri", "editor_uri_template"):
        conf = tmp_path / f"{key}.yml"
        conf.write_text(f"{key}: 'zed://{{path}}'\ncollections: {{}}\n", encoding="utf-8")
        assert "editor_uri: zed://{path}" in cli_run("collection", "import-qmd", str(conf), "--dry-run").output, key


def test_import_qmd_finds_the_config_beside_index_path(tmp_path, cli_run, qmdlab_home, monkeypatch):
    """``$INDEX_PATH`` naming a project's ``.qmd/index.sqlite``: the config beside it, from any folder."""
    proj = tmp_path / "proj"
    _folder(proj / "docs", {"p.md": "# P\n\nheron\n"})
    (proj / ".qmd").mkdir()
    (proj / ".qmd" / "index.yaml").write_text("collections:\n  docs:\n    path: ./docs\n", encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("QMD_CONFIG_DIR", str(tmp_path / "none"))
    monkeypatch.setenv("INDEX_PATH", str(proj / ".qmd" / "index.sqlite"))
    res = cli_run("collection", "import-qmd", "--dry-run")
    assert f"would import from {proj / '.qmd' / 'index.yaml'}" in res.output
    monkeypatch.setenv("INDEX_PATH", str(tmp_path / "db" / "qmd.sqlite"))  # no config beside it: keep looking
    res = cli_run("collection", "import-qmd", ok=False)
    assert res.exit_code == 1 and "beside $INDEX_PATH" in res.output


def test_an_index_s_own_models_are_read_over_models_yaml(tmp_path, cli_run, qmdlab_home):
    """``models:`` in an index's ``collections.yaml`` (where import-qmd puts qmd's) win over
    ``$QMDLAB_HOME/models.yaml`` for commands on that index, and only for that index."""
    qmdlab_home.mkdir(parents=True, exist_ok=True)
    (qmdlab_home / "models.yaml").write_text("preset: fake\nrerank: fake:overlap\n", encoding="utf-8")
    with Index.open(str(tmp_path / "own")) as idx:
        idx.set_models({"rerank": "none", "expand": "none"})
        assert idx.models() == {"rerank": "none", "expand": "none"}
    runner = CliRunner()
    own = runner.invoke(cli, ["--index", str(tmp_path / "own"), "models"])
    other = runner.invoke(cli, ["--index", str(tmp_path / "other"), "models"])
    assert own.exit_code == 0 and other.exit_code == 0, own.output + other.output
    assert "fake:overlap" not in own.output and "fake:overlap" in other.output
    from qmdlab.models.registry import resolve_refs

    assert resolve_refs(environ={})[1]["rerank"] == "fake:overlap"  # outside a command: models.yaml alone


@pytest.mark.parametrize(
    "text, needle",
    [
        ("collections: [1, 2", "malformed YAML"),
        ("- a\n- b\n", "expected a mapping"),
        ("collections: 3\n", "'collections' must be a mapping"),
    ],
)
def test_import_qmd_bad_configs_are_one_line_errors(tmp_path, cli_run, qmdlab_home, text, needle):
    bad = tmp_path / "index.yml"
    bad.write_text(text, encoding="utf-8")
    res = cli_run("collection", "import-qmd", str(bad), ok=False)
    assert res.exit_code == 1 and needle in res.output and str(bad) in res.output
    assert "Traceback" not in res.output


def test_editor_links_on_a_terminal_only(two, cli_run, monkeypatch):
    from qmdlab.commands.result_options import editor_links
    from qmdlab.output import format_results
    from qmdlab.pipeline.results import ResultRow
    from qmdlab.store import Index

    a, _ = two
    rows = [ResultRow("a/x.md", "abc123", 0.5, 3, "X", None, "heron in a")]
    monkeypatch.delenv("QMDLAB_EDITOR_URI", raising=False)
    monkeypatch.delenv("QMD_EDITOR_URI", raising=False)
    with Index.open(cli_run.index_dir) as idx:
        assert editor_links(idx, rows, tty=True) is None  # no template: plain paths
        idx.set_editor_uri("vscode://file/{path}:{line}:{col}")
        links = editor_links(idx, rows, tty=True)
        assert links == [f"vscode://file/{(a.resolve() / 'x.md')}:3:1"]
        assert editor_links(idx, rows, tty=False) is None  # piped: plain paths
        monkeypatch.setenv("QMD_EDITOR_URI", "subl://open?url=file://{path}&line={line}")
        assert editor_links(idx, rows, tty=True) == [f"subl://open?url=file://{a.resolve() / 'x.md'}&line=3"]
    text = format_results(rows, "cli", links=links)
    assert text.splitlines()[0].startswith(f"\x1b]8;;{links[0]}\x1b\\a/x.md:3\x1b]8;;\x1b\\  #abc123")
    assert "\x1b" not in cli_run("search", "heron").output  # CliRunner's stdout is not a terminal


def test_init_makes_a_project_index_used_without_index(tmp_path, qmdlab_home, monkeypatch):
    proj = _folder(tmp_path / "proj", {"notes/n.md": "# N\n\nheron in project\n"})
    runner = CliRunner()
    monkeypatch.chdir(proj)
    res = runner.invoke(cli, ["init", "--name", "proj"])
    assert res.exit_code == 0, res.output
    assert "created project index" in res.output and (proj / ".qmdlab" / ".gitignore").is_file()
    assert "index.sqlite*" in (proj / ".qmdlab" / ".gitignore").read_text()
    stored = yaml.safe_load((proj / ".qmdlab" / "collections.yaml").read_text())
    assert stored["collections"][0]["root"] == "."  # relative: the file can be committed
    monkeypatch.chdir(proj / "notes")
    res = runner.invoke(cli, ["search", "heron", "--files"])
    assert res.exit_code == 0 and "proj/notes/n.md" in res.output
    assert str(proj / ".qmdlab") in runner.invoke(cli, ["status"]).output
    again = runner.invoke(cli, ["init", str(proj)])
    assert again.exit_code == 0 and "project index exists" in again.output
    assert yaml.safe_load((proj / ".qmdlab" / "collections.yaml").read_text()) == stored  # never overwritten
    # the same project checked out elsewhere: the root follows the checkout, an update command waits for trust
    import shutil

    copy = tmp_path / "checkout"
    shutil.copytree(proj, copy, ignore=shutil.ignore_patterns("index.sqlite*"))
    data = yaml.safe_load((copy / ".qmdlab" / "collections.yaml").read_text())
    data["collections"][0]["update"] = "touch pulled"
    (copy / ".qmdlab" / "collections.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.chdir(copy)
    res = runner.invoke(cli, ["update", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "not approved" in res.output and not (copy / "pulled").exists()
    assert "checkout/notes/n.md" not in res.output
    assert "proj/notes/n.md" in runner.invoke(cli, ["search", "heron", "--files"]).output
    assert str(copy.resolve()) in runner.invoke(cli, ["collection", "show", "proj"]).output


def test_qmd_verb_names_and_get_options(two, cli_run):
    a, _ = two
    (a / "long.md").write_text("# Long\n\n" + "\n".join(f"row {i}" for i in range(3, 21)) + "\n", encoding="utf-8")
    cli_run("update", "--no-progress")
    assert "collection: a" in cli_run("collection", "info", "a").output  # qmd's alias of show
    cli_run("collection", "set-update", "a", "true")
    assert "update:     true  [approved]" in cli_run("collection", "show", "a").output
    cli_run("collection", "mv", "a", "a2")
    cli_run("context", "add", "a2", "moved")
    cli_run("context", "remove", "a2")
    assert "No contexts." in cli_run("context", "list").output
    assert cli_run("get", "a2/long.md", "--from", "5", "-l", "2", "--no-header").output == "row 5\nrow 6\n"
    assert cli_run("get", "a2/long.md:5:9", "-l", "1", "--line-numbers", "--no-header").output == "    5: row 5\n"
    assert cli_run("get", "a2/long.md:19", "--no-line-numbers", "--no-header").output == "row 19\nrow 20\n"
    cli_run("collection", "rm", "a2")
    assert "a2" not in cli_run("collection", "list").output
    listed = [
        line.split()[0]
        for line in cli_run("collection", "--help").output.split("Commands:")[1].splitlines()
        if line.startswith("  ") and not line.startswith("    ")
    ]
    assert "remove" in listed and "show" in listed and not {"rm", "mv", "info", "set-update"} & set(listed)


def test_unwritable_places_are_one_line_errors(tmp_path, qmdlab_home, monkeypatch):
    """A file where init or skill install needs a folder: one error line, nothing overwritten."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / ".qmdlab").write_text("a file of the user's\n")
    (proj / ".agents").write_text("another\n")
    monkeypatch.chdir(proj)
    runner = CliRunner()
    for args, needle in (
        (["init"], "cannot create the project index"),
        (["skill", "install"], "cannot install the skill"),
    ):
        res = runner.invoke(cli, args)
        assert res.exit_code == 1 and needle in res.output and "Traceback" not in res.output, (args, res.output)
    assert (proj / ".qmdlab").read_text() == "a file of the user's\n" and (proj / ".agents").read_text() == "another\n"


def test_list_and_status_mark_excluded_collections(two, cli_run):
    cli_run("collection", "exclude", "b")
    lines = cli_run("collection", "list").output.splitlines()
    assert lines[0].startswith("a\t") and not lines[0].endswith("excluded") and lines[1].endswith("\texcluded")
    out = cli_run("status").output
    assert "  b: 1 docs" in out and "excluded from unscoped queries" in out.split("  b: ")[1].splitlines()[0]
    assert "excluded" not in out.split("  a: ")[1].splitlines()[0]


def test_import_qmd_shows_qmd_values_escaped_and_holds_what_points_elsewhere(
    tmp_path, cli_run, qmdlab_home, monkeypatch
):
    """A project's ``.qmd/index.yml`` may have come with a checkout: its values are printed escaped,
    and its served model, editor template and roots outside the project are registered but wait
    for ``qmdlab trust``, which lists them."""
    for var in ("QMDLAB_EMBED_MODEL", "QMD_EMBED_MODEL", "QMDLAB_PRESET", "QMDLAB_EDITOR_URI", "QMD_EDITOR_URI"):
        monkeypatch.delenv(var, raising=False)
    evil, osc52 = "\x1b]0;pwned\x07", "\x1b]52;c;cHduZWQ=\x07"
    proj = tmp_path / "proj"
    _folder(proj / "docs", {"p.md": "# P\n\nheron in project\n"})
    secret = _folder(tmp_path / "secret", {"s.md": "# S\n\nzanzibar\n"})
    served = "http://127.0.0.1:9/v1#collector"
    (proj / ".qmd").mkdir()
    (proj / ".qmd" / "index.yml").write_text(
        yaml.safe_dump(
            {
                "global_context": f"everything {evil} \u202egnp.md",
                "models": {"embed": served},
                "editor_uri": "vscode://file/{path}:{line}",
                "collections": {
                    "docs": {"path": "./docs", "context": {"/": f"docs {osc52}"}, "update": "make notes\u202e"},
                    "s": {"path": str(secret)},
                    f"x{evil}": {"path": "./docs"},
                },
                f"key{osc52}": 1,
            },
            allow_unicode=True,
        ),
        encoding="utf-8",
    )
    monkeypatch.chdir(proj)
    for dry in (True, False):
        res = cli_run("collection", "import-qmd", *(["--dry-run"] if dry else []))
        out = res.output
        assert not any(ch in out for ch in "\x1b\x07\u202e"), repr(out)
        assert "\\x1b]0;pwned\\x07" in out and "\\x1b]52;c;cHduZWQ=\\x07" in out and "\\u202egnp.md" in out, out
        assert ("would wait" if dry else "waiting") + " for approval" in out
        assert f"models.embed = {served}: a model served over HTTP" in out
        assert "editor_uri vscode://file/{path}:{line}: result paths are not links" in out
        assert f"collection s: root {secret.resolve()} is outside the project {proj.resolve()}" in out, out
    # registered, but the outside root is not indexed and the served model gets nothing
    assert "s/s.md" not in cli_run("ls", "--all").output and "docs/p.md" in cli_run("ls", "--all").output
    refused = cli_run("update", "--no-progress", "-c", "s", ok=False)
    assert refused.exit_code == 1 and "is outside the project" in refused.output
    res = cli_run("vsearch", "heron", ok=False)
    assert res.exit_code == 1 and f"models.embed is {served}" in res.output and "`qmdlab trust`" in res.output
    listed = cli_run("trust", ok=False)
    for needle in (
        "collection roots outside the project of the qmd config",
        f"s: {secret.resolve()}",
        f"models.embed: {served}",
        "editor_uri: vscode://file/{path}:{line}",
        "make notes\\u202e",
    ):
        assert needle in listed.output, (needle, listed.output)
    assert cli_run("trust", "--yes").exit_code == 0
    assert "nothing to approve" in cli_run("trust").output
    cli_run("update", "--no-progress", "-c", "s")
    assert "s/s.md" in cli_run("ls", "--all").output
    assert "not approved" not in cli_run("models").output


def test_import_qmd_leaves_out_an_editor_uri_holding_a_control_character(tmp_path, cli_run, qmdlab_home):
    conf = tmp_path / "index.yml"
    conf.write_text(yaml.safe_dump({"editor_uri": "x://{path}\x1b\\\x1b]52;c;cHduZWQ=\x07", "collections": {}}))
    res = cli_run("collection", "import-qmd", str(conf))
    assert "editor_uri: holds a control or format character (\\x1b) at character 11" in res.output, res.output
    assert "\x1b" not in res.output and "\x07" not in res.output
    with Index.open(cli_run.index_dir) as idx:
        assert idx.editor_uri() is None
