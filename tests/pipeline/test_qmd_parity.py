"""qmd parity in the pipeline and ``qmdlab query``: the strong-signal switch, --tag/--prefer-tag,
result flags (--all, --full, --max-chars, --line-numbers, format shorthands)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.models.base import ModelSet
from qmdlab.models.fakes import RuleExpander
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.pipeline.lab import Lab
from qmdlab.search.navigate import cap_text


def _notes(trace, stage):
    return " ".join(trace.notes.filter(trace.notes["stage"] == stage)["message"].to_list())


def test_strong_signal_switch(small_index):
    idx, emb = small_index
    cfg = PipelineConfig(strong_signal_min=0.3, strong_signal_gap=0.1)
    lab = Lab(idx, ModelSet(emb, RuleExpander({"pasta": [("lex", "pasta water")]}), None), cfg)
    t = lab.query("pasta")
    assert "expansion skipped" in _notes(t, "probe") and lab.expander.calls == 0
    t = lab.query("pasta", strong_signal=False)
    assert "but the skip is off (strong_signal: false): expanding" in _notes(t, "probe")
    assert lab.expander.calls == 1 and t.expansions.select("text", "kept").rows() == [("pasta water", True)]
    assert "lex" in set(t.lists["query_type"])
    assert PipelineConfig.from_dict({"strong_signal": False}).strong_signal is False


def _run(index_dir, *args):
    res = CliRunner().invoke(cli, ["--index", index_dir, "query", *args, "--preset", "fake", "--no-rerank"])
    assert res.exit_code == 0, res.output
    return res.stdout


def test_query_tag_filter_prefer_tag_and_result_flags(small_index):
    idx, _ = small_index
    d = str(idx.dir)
    rows = json.loads(_run(d, "sqlite search network", "--format", "json"))
    assert {r["file"] for r in rows} >= {"qmd://notes/sqlite.md", "qmd://notes/docker.md"}
    only = json.loads(_run(d, "sqlite search network", "--format", "json", "--tag", "ops"))
    assert [r["docno"] for r in only] == ["notes/docker.md"]  # --tag requires the tag, as on `search`
    plain = [r["docno"] for r in json.loads(_run(d, "git network", "--format", "json", "-n", "10"))]
    lifted = [
        r["docno"]
        for r in json.loads(
            _run(d, "git network", "--format", "json", "-n", "10", "--prefer-tag", "ops", "--tag-lift", "10")
        )
    ]
    assert "notes/docker.md" in plain and lifted[0] == "notes/docker.md" and sorted(lifted) == sorted(plain)
    assert _run(d, "git rebase", "--csv") == _run(d, "git rebase", "--format", "csv")
    assert len(json.loads(_run(d, "git", "-n", "1", "--format", "json"))) == 1
    assert len(json.loads(_run(d, "git", "-n", "1", "--all", "--format", "json"))) >= 2
    full = json.loads(_run(d, "rebase", "-n", "1", "--format", "json", "--full"))[0]
    assert "snippet" not in full and full["body"] == idx.get(full["docno"]).body.rstrip("\n")
    num = json.loads(_run(d, "rebase", "-n", "1", "--format", "json", "--line-numbers"))[0]
    header, first = num["snippet"].split("\n")[:2]  # qmd's @@ header, then numbered lines
    assert header.startswith("@@ -") and first.startswith(header[4:].split(",")[0] + ": ")
    capped = json.loads(_run(d, "rebase", "-n", "1", "--format", "json", "--full", "--max-chars", "20"))[0]
    assert (
        capped["file"] == full["file"] and capped["body"] == cap_text(full["body"], 20, read_on=(full["docno"], 1)).text
    )
    assert f"more characters; read on with `qmdlab get {full['docno']}:" in capped["body"]


def test_query_no_strong_signal_flag(small_index, tmp_path):
    idx, _ = small_index
    cfg = tmp_path / "low.yaml"
    cfg.write_text("strong_signal_min: 0.3\nstrong_signal_gap: 0.1\n")
    probe = [
        n["message"]
        for n in json.loads(_run(str(idx.dir), "pasta", "--config", str(cfg), "--trace-json"))["notes"]
        if n["stage"] == "probe"
    ]
    assert probe[0].endswith("expansion skipped")
    probe = [
        n["message"]
        for n in json.loads(_run(str(idx.dir), "pasta", "--config", str(cfg), "--trace-json", "--no-strong-signal"))[
            "notes"
        ]
        if n["stage"] == "probe"
    ]
    assert probe[0].endswith("but the skip is off (strong_signal: false): expanding")


def test_identical_content_returned_once_with_the_other_paths_noted(tmp_path):
    from qmdlab.models.fakes import KeywordEmbedder
    from qmdlab.store import Index

    src = tmp_path / "notes"
    (src / "copy").mkdir(parents=True)
    same = "# Git rebase\n\nRebase replays each commit onto another branch.\n"
    (src / "git.md").write_text(same, encoding="utf-8")
    (src / "copy" / "git.md").write_text(same, encoding="utf-8")
    (src / "merge.md").write_text("# Git merge\n\nMerge joins two branch tips.\n", encoding="utf-8")
    with Index(tmp_path / "index") as idx:
        idx.add_collection("notes", src)
        idx.update()
        emb = KeywordEmbedder(["git", "rebase", "merge", "branch", "commit"])
        todo = idx.chunks_needing_vectors(emb.fingerprint)
        idx.store_vectors(
            todo["chunk_id"].to_list(),
            emb.embed_documents(list(zip(todo["title"].to_list(), todo["text"].to_list()))),
            emb.fingerprint,
        )
        lab = Lab(idx, ModelSet(emb, None, None), PipelineConfig(rerank=False))
        t = lab.query("git rebase branch")
        docnos = t.final["docno"].to_list()
        assert docnos == ["notes/copy/git.md", "notes/merge.md"]  # docno tie-break: copy/ first
        assert t.final["final_rank"].to_list() == [1, 2]
        assert "notes/git.md: same content as notes/copy/git.md (shown once)" in _notes(t, "finish")
        both = lab.query("git rebase branch", dedupe_content=False).final["docno"].to_list()
        assert set(both) == {"notes/git.md", "notes/copy/git.md", "notes/merge.md"}
        assert "same content" not in _notes(lab.query("git rebase branch", dedupe_content=False), "finish")


def test_vsearch_result_flags(small_index_no_vectors):
    idx, _ = small_index_no_vectors
    d = str(idx.dir)

    def vs(*args):
        res = CliRunner().invoke(cli, ["--index", d, "vsearch", "git rebase branch", "--preset", "fake", *args])
        assert res.exit_code == 0, res.output
        return res.stdout

    assert CliRunner().invoke(cli, ["--index", d, "embed", "--preset", "fake", "--no-progress"]).exit_code == 0
    assert vs("--files") == vs("--format", "files")
    assert len(json.loads(vs("-n", "1", "--json"))) == 1
    assert len(json.loads(vs("-n", "1", "--all", "--json"))) >= 2
    top = json.loads(vs("-n", "1", "--json", "--full"))[0]
    assert top["body"] == idx.get(top["docno"]).body.rstrip("\n")
    capped = json.loads(vs("-n", "1", "--json", "--full", "--max-chars", "15"))[0]
    assert capped["file"] == top["file"] and "more characters; read on with `qmdlab get" in capped["body"]
