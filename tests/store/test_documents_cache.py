"""``Index.documents()`` is kept between writes and rebuilt after any (this or another connection's)."""

from __future__ import annotations

from qmdlab.store import Index

from .conftest import write_notes


def test_documents_frame_is_reused_until_a_write(tmp_path):
    root = write_notes(tmp_path / "n", {"a.md": "---\ntags: [x]\n---\n# a\n", "b.md": "# b\n"})
    idx = Index.open(str(tmp_path / "idx"))
    idx.add_collection("n", root)
    idx.update()
    first = idx.documents()
    assert idx.documents() is first  # no write in between: the same frame
    assert idx.documents(["n"]) is not first and idx.documents(["n"]).equals(first)

    (root / "c.md").write_text("# c\n", encoding="utf-8")  # this connection writes
    idx.update()
    assert idx.documents()["path"].to_list() == ["a.md", "b.md", "c.md"]

    other = Index.open(str(tmp_path / "idx"))  # another connection writes
    (root / "a.md").write_text("---\ntags: [y]\n---\n# a, retagged\n", encoding="utf-8")
    other.update()
    other.close()
    assert idx.documents().filter(idx.documents()["path"] == "a.md")["tags"].to_list() == [["y"]]
    idx.close()
