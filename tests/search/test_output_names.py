"""Odd file names in output: --files is CSV (a comma cannot split a name), format characters
cannot make a name display as another, and a path past PATH_MAX is reported, not lost."""

from __future__ import annotations

import csv
import json
import os

from qmdlab.output import format_results
from qmdlab.pipeline.results import ResultRow
from qmdlab.store import Index
from qmdlab.store.scan import display_path

SPOOF = "notes/invoice\u202efdp.md"  # shows as "invoicedm.pdf" once the override applies


def _row(docno: str) -> ResultRow:
    return ResultRow(docno, "abc123", 0.5, 3, "T\u202eitle", None, "x")


def test_files_output_is_csv_so_commas_and_quotes_survive():
    names = ["n/a, b.md", 'n/say "hi".md', "n/plain.md"]
    text = format_results([_row(n) for n in names], "files")
    assert [r[2] for r in csv.reader(text.splitlines())] == names
    assert text.splitlines()[2] == "#abc123,0.5000,n/plain.md,"  # plain names print as before


def test_format_characters_are_escaped_for_people_and_kept_for_machines():
    cli = format_results([_row(SPOOF)], "cli")
    md = format_results([_row(SPOOF)], "md")
    for text in (cli, md):
        assert "\u202e" not in text and "invoice\\u202efdp.md" in text and "T\\u202eitle" in text
    assert json.loads(format_results([_row(SPOOF)], "json"))[0]["file"] == SPOOF
    assert display_path("invoice\u202efdp.md") == "invoice\\u202efdp.md"


def test_a_path_longer_than_path_max_is_reported_as_skipped(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha\n")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:  # 20 folders of 250 characters: 5,000 characters, past Linux's PATH_MAX of 4,096
        for _ in range(20):
            os.mkdir("d" * 250, dir_fd=fd)
            nxt = os.open("d" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        f = os.open("deep.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(f, b"# Deep\n\nbeta\n")
        os.close(f)
    finally:
        os.close(fd)
    with Index.open(str(tmp_path / "idx")) as idx:
        idx.add_collection("notes", root)
        rep = idx.update()
    assert rep.new == 1 and rep.skipped >= 1 and rep.skip_counts().get("unreadable", 0) >= 1, rep
    assert any(reason == "unreadable" and docno.startswith("notes/ddd") for docno, reason in rep.skipped_paths)


def test_ls_escapes_format_characters(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from qmdlab.cli import cli

    monkeypatch.setenv("QMDLAB_HOME", str(tmp_path / "home"))
    root = tmp_path / "notes"
    root.mkdir()
    (root / "invoice\u202efdp.md").write_text("# Bill\n\ntotal\n")
    with Index.open(str(tmp_path / "idx")) as idx:
        idx.add_collection("notes", root)
        idx.update()
    res = CliRunner().invoke(cli, ["--index", str(tmp_path / "idx"), "ls"])
    assert res.exit_code == 0 and "\u202e" not in res.stdout and "notes/invoice\\u202efdp.md" in res.stdout
