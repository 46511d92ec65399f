"""``qmdlab get doc.md#address`` and ``qmdlab get doc.md --outline`` (navigation by heading address)."""

from __future__ import annotations

import pytest

from qmdlab.commands.store import split_address

GUIDE = (
    "---\ntitle: Guide\n---\nintro line\n# Install\nsteps\n## Linux\napt install x\n"
    "## macOS\nbrew install x\n# Use\nrun it\n```\n# not a heading\n```\n"
)


@pytest.fixture
def run(tmp_path, cli_run):
    src = tmp_path / "notes"
    src.mkdir()
    (src / "guide.md").write_text(GUIDE, encoding="utf-8")
    (src / "c#.md").write_text("# Sharp\nc sharp notes\n", encoding="utf-8")  # a '#' in a real file name
    cli_run("collection", "add", str(src), "--name", "kb")
    return cli_run


def test_section_by_address(run):
    assert run("get", "kb/guide.md#install/linux", "--no-header").output == "## Linux\napt install x\n"
    assert (
        run("get", "guide.md#install", "--no-header").output
        == "# Install\nsteps\n## Linux\napt install x\n## macOS\nbrew install x\n"
    )
    # the fenced "# not a heading" stays inside the last section
    assert run("get", "kb/guide.md#use", "--no-header").output == "# Use\nrun it\n```\n# not a heading\n```\n"
    # a heading title instead of its slug resolves too
    assert run("get", "kb/guide.md#Install/macOS", "--no-header").output == "## macOS\nbrew install x\n"


def test_section_line_numbers_refer_to_the_file(run):
    out = run("get", "kb/guide.md#install/macos", "--line-numbers", "--no-header").output
    assert out == "    9: ## macOS\n   10: brew install x\n"
    assert GUIDE.split("\n")[8] == "## macOS"  # line 9 of the file, front matter included


def test_docid_with_and_without_address(run):
    docid = [ln.split("\t")[1] for ln in run("ls", "--all").output.splitlines() if ln.startswith("kb/guide.md")][0]
    assert docid.startswith("#") and len(docid) == 7
    assert run("get", docid, "--no-header").output == GUIDE.rstrip("\n") + "\n"  # '#abc123' alone is the docid
    assert run("get", f"{docid}#use", "--no-header").output.startswith("# Use\nrun it\n")


def test_hash_in_a_real_file_name_is_not_an_address(run):
    assert run("get", "kb/c#.md", "--no-header").output == "# Sharp\nc sharp notes\n"


def test_outline_prints_the_heading_tree_with_addresses(run):
    out = run("get", "kb/guide.md", "--outline").output.splitlines()
    assert out[0].startswith("kb/guide.md (#") and out[0].endswith("): Guide")
    assert out[1:] == [
        "# Install  [install] lines 5-10",
        "  ## Linux  [install/linux] lines 7-8",
        "  ## macOS  [install/macos] lines 9-10",
        "# Use  [use] lines 11-15",
    ]


def test_unknown_address_is_one_line_naming_the_outline(run):
    res = run("get", "kb/guide.md#install/windows", ok=False)
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: kb/guide.md: no section 'install/windows'")
    assert "'install/linux'" in lines[0] and "qmdlab get kb/guide.md --outline" in lines[0]
    res = run("get", "kb/nope.md#install", ok=False)
    assert res.exit_code == 1 and "no document" in res.output and "Traceback" not in res.output


def test_split_address():
    assert split_address("a/b.md#x/y") == ("a/b.md", "x/y")
    assert split_address("#abc123") == ("#abc123", None)
    assert split_address("#abc#sec") == ("#abc", "sec")
