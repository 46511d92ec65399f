"""What a config that came with a checkout may do without approval.

- An update command is shown exactly: every control or non-printing character escaped, so a
  carriage return cannot make ``qmdlab trust`` display ``git pull --ff-only`` while ``update``
  runs the rest; a command holding a raw CR, NUL or terminal escape is never approved nor run;
  what is approved is the exact text (one changed byte, visible or not, asks again).
- A project's ``.qmdlab/collections.yaml`` cannot index folders outside the project, and a linked
  ``.qmdlab/index.sqlite`` (or ``.qmdlab`` itself, or its ``-wal``) cannot make qmdlab write into
  another database or create a file anywhere — until the user approves exactly that path with
  ``qmdlab trust``; the refusal says how.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from qmdlab.cli import cli


def _folder(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def _set_command(config: Path, name: str, command: str) -> None:
    """Edit collections.yaml as a checkout would bring it (yaml writes control characters as escapes)."""
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    for c in data["collections"]:
        if c["name"] == name:
            c["update"] = command
    config.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")


@pytest.fixture
def repo(tmp_path, qmdlab_home, cli_run):
    """An index with one collection 'a' whose config is then edited as by a checkout."""
    a = _folder(tmp_path / "a", {"x.md": "# X\n\nheron\n"})
    cli_run("collection", "add", str(a), "--name", "a")
    return a, Path(cli_run.index_dir) / "collections.yaml"


# ------------------------------------------------------------------------------------- update commands
HIDDEN = [
    ("carriage return", "touch pwned\rgit pull --ff-only", "touch pwned\\rgit pull --ff-only"),
    ("NUL", "git pull --ff-only\0touch pwned", "git pull --ff-only\\0touch pwned"),
    ("terminal escape", "touch pwned; echo \x1b[2K\x1b[1Ggit pull --ff-only", "\\x1b[2K\\x1b[1Ggit pull"),
    ("C1 escape", "touch pwned \x9b2K git pull", "touch pwned \\x9b2K git pull"),
    ("backspace", "touch pwned\b\b\b\b\b\b\b\b\b\b\bgit pull", "touch pwned\\x08\\x08"),
]


@pytest.mark.parametrize("what,command,escaped", HIDDEN, ids=[h[0] for h in HIDDEN])
def test_a_command_with_a_raw_control_character_is_shown_escaped_and_never_run(
    repo, cli_run, monkeypatch, what, command, escaped
):
    a, config = repo
    _set_command(config, "a", command)
    res = cli_run("trust", "--yes", ok=False)
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    shown = res.output
    assert escaped in shown and "never approved nor run" in shown and "write the character out" in shown
    assert "`qmdlab trust -c a`" in shown
    assert not any(ch in shown for ch in "\r\0\x1b\x9b\b"), repr(shown)  # nothing raw reaches the terminal
    assert "approved:" not in shown
    for env in ({}, {"QMDLAB_TRUST_UPDATE_HOOKS": "1"}):  # not even the CI switch runs it
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        res = cli_run("update", "--no-progress")
        assert not (a / "pwned").exists(), res.output
        assert "never approved nor run" in res.output and not any(ch in res.output for ch in "\r\0\x1b\x9b\b")
    assert "never run" in cli_run("collection", "show", "a").output


def test_an_approval_recorded_before_the_fix_does_not_run_a_disguised_command(repo, cli_run):
    from qmdlab.store import trust
    from qmdlab.store.config import load

    a, config = repo
    _set_command(config, "a", "touch pwned\rgit pull --ff-only")
    coll = load(config).collections[0]
    trust._save(  # the approval an older qmdlab recorded after showing "git pull --ff-only"
        [trust.Approval(trust.command_key(config, "a", coll.update_cmd), str(config), "a", coll.update_cmd, "")]
    )
    res = cli_run("update", "--no-progress")
    assert not (a / "pwned").exists() and "never approved nor run" in res.output


@pytest.mark.parametrize(
    "command,escaped",
    [
        ("echo ok > ran\u202e", "echo ok > ran\\u202e"),  # a bidi override
        ("echo ok > ran\u2028", "echo ok > ran\\u2028"),  # a line separator
        ("echo ok\t> ran # \u200b", "echo ok\\t> ran # \\u200b"),  # a tab, a zero-width space
        ("printf 'a\\\\n' > ran\u00a0", "printf 'a\\\\\\\\n' > ran\\xa0"),  # backslashes doubled once escaping
    ],
)
def test_non_printing_characters_are_shown_escaped_and_the_exact_text_is_approved(repo, cli_run, command, escaped):
    a, config = repo
    _set_command(config, "a", command)
    res = cli_run("trust", "--yes")
    assert f"a (runs in {a}): {escaped}\n" in res.output, res.output
    assert "shown escaped" in res.output and "sha256 " in res.output
    assert not any(ch in res.output for ch in "\u202e\u2028\u200b\t\u00a0"), repr(res.output)
    assert f"approved: a: {escaped}" in res.output
    assert escaped in cli_run("trust", "list").output
    cli_run("update", "--no-progress")
    assert any(p.name.startswith("ran") for p in a.iterdir())  # the approved command ran
    # one more invisible character is another command: not approved, shown escaped
    _set_command(config, "a", command + "\u200b")
    res = cli_run("update", "--no-progress")
    assert "is not approved" in res.output and "\\u200b'" in res.output and "\u200b" not in res.output


def test_the_prompt_shows_the_hash_of_exactly_what_is_approved(repo, cli_run):
    from qmdlab.store.trust import digest

    _, config = repo
    _set_command(config, "a", "git pull --ff-only")
    res = cli_run("trust", ok=False)  # no terminal, no --yes: listed, nothing approved
    assert "a (runs in " in res.output and f"sha256 {digest('git pull --ff-only')[:16]}" in res.output
    assert "shown escaped" not in res.output  # a printable command is shown as it is


def test_a_collection_name_cannot_disguise_a_command_either(repo, cli_run):
    a, config = repo
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["collections"][0].update(name="a\r  docs (runs in /srv/docs): git pull --ff-only\n  b", update="touch pwned")
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    res = cli_run("trust", ok=False)
    assert "\r" not in res.output and "a\\r  docs (runs in /srv/docs): git pull --ff-only\\n  b (runs in" in res.output
    assert ": touch pwned\n" in res.output


def test_update_cmd_refuses_a_typed_raw_control_character(repo, cli_run):
    res = cli_run("collection", "update-cmd", "a", "touch pwned\rgit pull", ok=False)
    assert res.exit_code == 1 and "carriage return" in res.output and "nothing was set" in res.output
    assert "\r" not in res.output and "update:     (none)" in cli_run("collection", "show", "a").output


# ------------------------------------------------------------------------------------- project paths
@pytest.fixture
def project(tmp_path, qmdlab_home, monkeypatch):
    """A project with a committed .qmdlab/ (collection 'proj' = the project), checked out and
    entered; a folder beside it holds a secret."""
    proj = _folder(tmp_path / "proj", {"notes/n.md": "# N\n\nheron in project\n"})
    _folder(tmp_path / "secret", {".ssh/id_rsa": "PRIVATE KEY zanzibar\n", "plan.md": "# Plan\n\nzanzibar\n"})
    monkeypatch.chdir(proj)
    res = CliRunner().invoke(cli, ["init", "--name", "proj"])
    assert res.exit_code == 0, res.output
    return proj


def _run(*args: str):
    return CliRunner().invoke(cli, list(args))


def _add_collection(proj: Path, entry: dict) -> None:
    config = proj / ".qmdlab" / "collections.yaml"
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["collections"].append(entry)
    config.write_text(yaml.safe_dump(data), encoding="utf-8")


@pytest.mark.parametrize("root", ["../secret", "ABS", "docs"], ids=["relative", "absolute", "link-in-project"])
def test_a_checked_in_root_outside_the_project_needs_approval(project, tmp_path, root):
    if root == "ABS":
        root = str(tmp_path / "secret")
    if root == "docs":  # a folder of the project that is a link out of it
        (project / "docs").symlink_to(tmp_path / "secret", target_is_directory=True)
    _add_collection(project, {"name": "s", "root": root, "mask": "**/*"})
    res = _run("update", "--no-progress")
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    msg = res.stderr.strip()
    assert msg.count("\n") == 0 and f"its root {(tmp_path / 'secret').resolve()} is outside the project" in msg
    assert "nothing was indexed or changed" in msg and "`qmdlab trust -c s`" in msg
    assert "zanzibar" not in _run("search", "zanzibar", "--files").output
    assert "s/.ssh/id_rsa" not in _run("ls", "--all").output
    # approved after being shown: now it is indexed
    listed = _run("trust")
    assert listed.exit_code == 1 and "collection roots outside the project" in listed.output
    assert str((tmp_path / "secret").resolve()) in listed.output and "(mask **/*)" in listed.output
    ok = _run("trust", "-c", "s", "--yes")
    assert ok.exit_code == 0 and "approved: s: root " in ok.output, ok.output
    assert _run("update", "--no-progress").exit_code == 0
    assert "s/.ssh/id_rsa" in _run("ls", "--all").output


def test_a_changed_root_asks_again_and_a_typed_one_is_approved(project, tmp_path):
    _folder(tmp_path / "other", {"o.md": "# O\n\nzanzibar other\n"})
    _add_collection(project, {"name": "s", "root": "../secret"})
    assert _run("trust", "--yes").exit_code == 0
    assert _run("update", "--no-progress").exit_code == 0
    config = project / ".qmdlab" / "collections.yaml"
    config.write_text(config.read_text().replace("../secret", "../other"))
    res = _run("update", "--no-progress")
    assert res.exit_code == 1 and "is outside the project" in res.output  # another folder: approve again
    assert _run("trust", "revoke").exit_code == 0
    # a root the user types with `collection add` is approved for this index
    res = _run("collection", "add", str(tmp_path / "other"), "--name", "typed", "--no-update")
    assert res.exit_code == 0 and "approved for this index" in res.output
    assert _run("update", "--no-progress", "-c", "typed").exit_code == 0


def test_roots_inside_the_project_and_home_indexes_need_no_approval(project, tmp_path, cli_run):
    _folder(project / "docs", {"d.md": "# D\n\nheron docs\n"})
    _add_collection(project, {"name": "docs", "root": "docs"})
    assert _run("update", "--no-progress").exit_code == 0
    cli_run("collection", "add", str(tmp_path / "secret"), "--name", "s")  # an index of one's own: no question
    assert "s/plan.md" in cli_run("ls", "--all").output


def _database(path: Path) -> str:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE accounts (name TEXT)")
    conn.execute("INSERT INTO accounts VALUES ('ann')")
    conn.commit()
    conn.close()
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_linked_index_file_is_not_opened_until_approved(project, tmp_path):
    other = tmp_path / "other.sqlite"
    before = _database(other)
    db = project / ".qmdlab" / "index.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    db.symlink_to(other)
    for args in (("update", "--no-progress"), ("status",), ("search", "heron"), ("context", "add", "/", "x")):
        res = _run(*args)
        assert res.exit_code == 1 and res.stderr.count("\n") == 1, (args, res.output)
        assert f"is a symbolic link to {other}" in res.stderr and "`qmdlab trust`" in res.stderr
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before
    assert not Path(f"{other}-wal").exists() and not Path(f"{other}-shm").exists()
    assert "x" not in (project / ".qmdlab" / "collections.yaml").read_text().split("contexts:")[1]
    listed = _run("trust")
    assert "linked index files in" in listed.output and f".qmdlab/index.sqlite -> {other}" in listed.output
    assert _run("trust", "--yes").exit_code == 0
    assert _run("update", "--no-progress").exit_code == 0  # approved: the user's own link is used
    assert "accounts" in {r[0] for r in sqlite3.connect(other).execute("SELECT name FROM sqlite_master")}
    # the link pointing elsewhere is another approval
    db.unlink()
    elsewhere = tmp_path / "elsewhere.sqlite"
    db.symlink_to(elsewhere)
    assert _run("status").exit_code == 1 and not elsewhere.exists()


@pytest.mark.parametrize("which", ["dangling", "wal", "folder"])
def test_a_link_cannot_create_a_file_anywhere(project, tmp_path, which):
    target = tmp_path / "anywhere" / "created"
    target.parent.mkdir()
    qdir = project / ".qmdlab"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{qdir / 'index.sqlite'}{suffix}").unlink(missing_ok=True)
    if which == "dangling":
        (qdir / "index.sqlite").symlink_to(target)
    elif which == "wal":
        (qdir / "index.sqlite-wal").symlink_to(target)
    else:  # .qmdlab itself leads elsewhere
        moved = tmp_path / "anywhere" / "idx"
        qdir.rename(moved)
        qdir.symlink_to(moved, target_is_directory=True)
        target = moved / "index.sqlite"
    res = _run("update", "--no-progress")
    assert res.exit_code == 1 and "is a symbolic link to" in res.output and "Traceback" not in res.output
    assert not target.exists(), res.output
    assert _run("trust", "--yes").exit_code == 0
    if which != "wal":  # (SQLite itself will not open a linked WAL)
        assert _run("update", "--no-progress").exit_code == 0


def test_a_special_file_in_the_index_folder_is_refused_outright(project):
    qdir = project / ".qmdlab"
    (qdir / "index.sqlite").unlink()
    os.mkfifo(qdir / "index.sqlite")
    res = _run("status")
    assert res.exit_code == 1 and "is not a regular file" in res.stderr
    res = _run("trust", "--yes")
    assert res.exit_code == 1 and "refused: " in res.output and "approved:" not in res.output


def test_config_writes_never_follow_a_checked_in_temp_link(project, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (project / ".qmdlab" / "collections.yaml.tmp").symlink_to(victim)
    assert _run("context", "add", "/", "everything").exit_code == 0
    assert victim.read_text() == "precious\n"
    assert "everything" in (project / ".qmdlab" / "collections.yaml").read_text()


def test_init_does_not_write_its_gitignore_through_a_link(tmp_path, qmdlab_home, monkeypatch):
    proj = tmp_path / "p2"
    (proj / ".qmdlab").mkdir(parents=True)
    outside = tmp_path / "outside-file"
    (proj / ".qmdlab" / ".gitignore").symlink_to(outside)
    monkeypatch.chdir(proj)
    assert _run("init").exit_code == 0
    assert not outside.exists()


# ------------------------------------------------------------------------------------- moved roots
def test_an_approved_update_command_does_not_follow_a_moved_root(project, tmp_path):
    """The approval of an update command is keyed to its collection's root: a commit that moves
    the root (out of the project, or to another folder of it) asks again before the command runs."""
    _folder(project / "docs", {"d.md": "# D\n\nheron docs\n"})
    _add_collection(project, {"name": "docs", "root": "docs", "update": "touch ran"})
    assert _run("trust", "--yes").exit_code == 0
    assert _run("update", "--no-progress").exit_code == 0 and (project / "docs" / "ran").exists()
    config = project / ".qmdlab" / "collections.yaml"
    for moved, where in (("../secret", tmp_path / "secret"), ("notes", project / "notes")):
        config.write_text(config.read_text().replace("root: docs", f"root: {moved}"))
        res = _run("update", "--no-progress")
        assert not (where / "ran").exists(), res.output
        assert f"'touch ran' (in {where.resolve()}) is not approved" in res.output, res.output
        config.write_text(config.read_text().replace(f"root: {moved}", "root: docs"))
    config.write_text(config.read_text().replace("root: docs", "root: notes"))
    listed = _run("trust", "--yes")
    assert f"docs (runs in {(project / 'notes').resolve()}): touch ran" in listed.output, listed.output
    assert _run("update", "--no-progress").exit_code == 0 and (project / "notes" / "ran").exists()
    assert f"touch ran (in {(project / 'notes').resolve()})" in _run("trust", "list").output


# ------------------------------------------------------------------------------------- served models
@pytest.fixture
def model_server():
    """A loopback OpenAI-compatible embedding server that records every request:
    ``(reference naming it, [(path, Authorization header)])``."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[str, str | None]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            seen.append((self.path, self.headers.get("Authorization")))
            texts = body.get("input") or []
            out = json.dumps({"data": [{"index": i, "embedding": [1.0, i % 3, 0.5]} for i in range(len(texts))]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out.encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1#collector", seen
    server.shutdown()
    server.server_close()


@pytest.fixture
def model_env(monkeypatch):
    monkeypatch.setenv("QMDLAB_MODEL_API_KEY", "sk-secret")
    for var in ("QMDLAB_EMBED_MODEL", "QMD_EMBED_MODEL", "QMDLAB_PRESET", "QMDLAB_EDITOR_URI", "QMD_EDITOR_URI"):
        monkeypatch.delenv(var, raising=False)


def _set_key(config: Path, key: str, value) -> None:
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    data[key] = value
    config.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")


def test_a_checked_in_served_model_gets_no_request_until_approved(project, model_server, model_env):
    ref, seen = model_server
    config = project / ".qmdlab" / "collections.yaml"
    _set_key(config, "models", {"embed": ref})
    for args in (("embed", "--no-progress"), ("vsearch", "heron")):
        res = _run(*args)
        assert res.exit_code == 1 and "Traceback" not in res.output, (args, res.output)
        msg = res.stderr.strip()
        assert msg.count("\n") == 0 and str(config) in msg and f"models.embed is {ref}" in msg, msg
        assert "nothing was sent" in msg and "`qmdlab trust`" in msg
    assert "not approved: `qmdlab trust`" in _run("models").output
    assert seen == []  # not one request: no chunk, no query, no key
    listed = _run("trust")
    assert (
        listed.exit_code == 1 and "models served over HTTP" in listed.output and f"models.embed: {ref}" in listed.output
    )
    ok = _run("trust", "--yes")
    assert ok.exit_code == 0 and f"approved: models.embed: {ref}" in ok.output, ok.output
    assert f"model\tembed\t{ref}\t{config.resolve()}" in _run("trust", "list").output
    res = _run("embed", "--no-progress")
    assert res.exit_code == 0, res.output
    assert seen and all(auth == "Bearer sk-secret" for _, auth in seen)
    # another reference (a byte changed) asks again; a revoked one too
    sent = len(seen)
    _set_key(config, "models", {"embed": ref + "2"})
    assert _run("embed", "--no-progress", "-f").exit_code == 1 and len(seen) == sent
    _set_key(config, "models", {"embed": ref})
    assert _run("trust", "revoke").exit_code == 0
    assert _run("embed", "--no-progress", "-f").exit_code == 1 and len(seen) == sent


def test_a_served_model_reference_is_shown_escaped(project, model_env):
    config = project / ".qmdlab" / "collections.yaml"
    _set_key(config, "models", {"embed": "http://127.0.0.1:9/v1#e\x1b]0;pwned\x07\u202e"})
    for args in (("embed", "--no-progress"), ("trust",), ("models",)):
        res = _run(*args)
        assert "\\x1b]0;pwned\\x07\\u202e" in res.output, (args, res.output)
        assert not any(ch in res.output for ch in "\x1b\x07\u202e"), (args, repr(res.output))


def test_an_index_of_ones_own_needs_no_approval_for_its_models(tmp_path, qmdlab_home, cli_run, model_server, model_env):
    from qmdlab.store import Index

    ref, seen = model_server
    a = _folder(tmp_path / "a", {"x.md": "# X\n\nheron\n"})
    cli_run("collection", "add", str(a), "--name", "a")
    with Index.open(cli_run.index_dir) as idx:
        idx.set_models({"embed": ref})
    assert "not approved" not in cli_run("models").output
    cli_run("embed", "--no-progress")
    assert seen


def test_packaged_and_local_models_of_a_checked_in_config_need_no_approval(project, model_env):
    config = project / ".qmdlab" / "collections.yaml"
    _set_key(config, "models", {"embed": "fake:keyword", "expand": "none", "rerank": "/models/r.gguf"})
    assert _run("embed", "--no-progress").exit_code == 0
    assert "nothing to approve" in _run("trust").output


# ------------------------------------------------------------------------------------- editor links
def _on_a_terminal(monkeypatch) -> None:
    """Result output as on a terminal (CliRunner's stdout is not one): editor links are made."""
    import functools

    from qmdlab.commands import result_options

    monkeypatch.setattr(result_options, "editor_links", functools.partial(result_options.editor_links, tty=True))


ESCAPING_TEMPLATES = [
    "vscode://file/{path}\x1b\\\x1b]52;c;cHduZWQ=\x07",  # ends the hyperlink, then OSC 52 (set the clipboard)
    "x://{path}\x07",
    "x://{path}\x1b]0;pwned\x1b\\",
    "x://{path}\x9d52;c;cHduZWQ=\x9c",  # C1 OSC and ST
    "x://{path}\u202e",
]


@pytest.mark.parametrize("template", ESCAPING_TEMPLATES)
def test_an_editor_uri_cannot_carry_a_terminal_escape(project, model_env, monkeypatch, template):
    _on_a_terminal(monkeypatch)
    config = project / ".qmdlab" / "collections.yaml"
    _set_key(config, "editor_uri", template)
    for args in (("search", "heron"), ("trust", "--yes")):
        res = _run(*args)
        assert res.exit_code == 1 and "Traceback" not in res.output, res.output
        msg = res.stderr.strip()
        assert msg.count("\n") == 0 and str(config) in msg and "editor_uri" in msg, msg
        assert not any(ch in res.output for ch in "\x1b\x07\x9c\x9d\u202e"), repr(res.output)
    assert "heron" not in _run("search", "heron").stdout


def test_a_checked_in_editor_uri_makes_links_only_once_approved(project, model_env, monkeypatch):
    _on_a_terminal(monkeypatch)
    config = project / ".qmdlab" / "collections.yaml"
    _set_key(config, "editor_uri", "vscode://file/{path}:{line}")
    res = _run("search", "heron")
    assert res.exit_code == 0 and "notes/n.md" in res.stdout and "\x1b" not in res.stdout, repr(res.output)
    assert "editor_uri vscode://file/{path}:{line} is not approved" in res.stderr and "`qmdlab trust`" in res.stderr
    listed = _run("trust", "--yes")
    assert "editor_uri: vscode://file/{path}:{line}" in listed.output and "approved: editor_uri" in listed.output
    res = _run("search", "heron")
    assert f"\x1b]8;;vscode://file/{(project / 'notes' / 'n.md').resolve()}:" in res.stdout, repr(res.output)
    _set_key(config, "editor_uri", "vscode://file/{path}")  # another template asks again
    assert "\x1b" not in _run("search", "heron").stdout


# ------------------------------------------------------------------------------------- notes on a terminal
EVIL = "\x1b]0;pwned\x07"


def test_outline_chunks_and_models_print_no_raw_escape(tmp_path, qmdlab_home, cli_run, monkeypatch):
    import json

    from qmdlab.store import Index

    monkeypatch.delenv("QMDLAB_EMBED_MODEL", raising=False)
    a = _folder(
        tmp_path / "a",
        {"x.md": f"# Title {EVIL}\n\nheron {EVIL} text\n\n## Part {EVIL}\n\nmore heron\tand {EVIL}\n"},
    )
    cli_run("collection", "add", str(a), "--name", "a")
    with Index.open(cli_run.index_dir) as idx:
        idx.set_models({"embed": f"/models/e{EVIL}.gguf", "rerank": f"hf:org/r{EVIL}/m.gguf"})
    first = json.loads(cli_run("chunks", "a/x.md", "--json").output)[0]["chunk_id"]
    for args in (
        ("get", "a/x.md", "--outline"),
        ("chunks", "a/x.md"),
        ("chunks", "a/x.md", "--full"),
        ("chunks", "a/x.md", "--id", str(first), "--parent", "document"),
        ("models",),
    ):
        out = cli_run(*args).output
        assert "\x1b" not in out and "\x07" not in out, (args, repr(out))
        assert "\\x1b]0;pwned\\x07" in out, (args, out)


# ------------------------------------------------------------------------------------- the daemon's log
def test_the_daemon_log_is_not_opened_through_a_link(tmp_path, qmdlab_home):
    from qmdlab.errors import QmdlabError
    from qmdlab.mcp_server import daemon

    qmdlab_home.mkdir(parents=True, exist_ok=True)
    target = tmp_path / "victim.txt"
    target.write_text("precious\n", encoding="utf-8")
    daemon.log_file(None).symlink_to(target)
    with pytest.raises(QmdlabError) as err:
        daemon.start([], host="127.0.0.1", port=9, index=None, timeout=2)
    msg = str(err.value)
    assert "\n" not in msg and "is a symbolic link" in msg and "remove the link" in msg
    assert target.read_text(encoding="utf-8") == "precious\n"
    assert daemon._log_tail(None) == ""  # not read through the link either
