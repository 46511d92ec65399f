"""Validity of the embedded default data in data/: corpus, queries, qrels and expansion seed data."""
from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "data"
CORPUS = DATA / "corpus"
CATEGORIES = {"keyword", "paraphrase", "entity", "multi", "cjk", "short", "question"}
SEED_CATEGORIES = {"technical", "personal-notes", "entity", "short", "non-english"}
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")


def _jsonl(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:  # pragma: no cover - failure path
            pytest.fail(f"{path}:{n}: invalid JSON: {e}")
    return rows


def norm(q: str) -> str:
    q = unicodedata.normalize("NFKC", q).casefold()
    return re.sub(r"\s+", " ", q).strip().rstrip("?!.。？！ ")


@pytest.fixture(scope="module")
def docs() -> dict[str, str]:
    return {p.relative_to(CORPUS).as_posix(): p.read_text(encoding="utf-8") for p in sorted(CORPUS.rglob("*.md"))}


@pytest.fixture(scope="module")
def queries() -> list[dict]:
    return _jsonl(DATA / "queries.jsonl")


@pytest.fixture(scope="module")
def qrels() -> list[tuple[str, str, str, int]]:
    rows = []
    for n, line in enumerate((DATA / "qrels.txt").read_text(encoding="utf-8").splitlines(), 1):
        parts = line.split()
        assert len(parts) == 4, f"qrels.txt:{n}: expected 4 columns, got {line!r}"
        assert parts[3] in {"0", "1", "2", "3"}, f"qrels.txt:{n}: grade must be 0-3"
        rows.append((parts[0], parts[1], parts[2], int(parts[3])))
    return rows


@pytest.fixture(scope="module")
def seed() -> list[dict]:
    return _jsonl(DATA / "training" / "seed.jsonl")


def test_corpus(docs):
    assert len(docs) >= 60
    folders = Counter(d.split("/")[0] for d in docs)
    assert {"howto", "meetings", "reference", "projects", "personal"} <= set(folders)
    cjk = [d for d, t in docs.items() if len(CJK.findall(t)) > 100]
    assert len(cjk) >= 5, cjk
    for d, text in docs.items():
        assert d.isascii() and " " not in d, d
        assert 300 <= len(text) <= 9000, (d, len(text))
        body = text
        if text.startswith("---\n"):
            end = text.index("\n---\n", 4)
            fm = text[4:end]
            assert re.search(r"^title: ", fm, re.M), d
            m = re.search(r"^date: (\S+)", fm, re.M)
            assert m is None or re.fullmatch(r"\d{4}-\d{2}-\d{2}", m.group(1)), d
            body = text[end + 5 :]
        assert body.lstrip().startswith("# "), f"{d}: title must be the first # heading"
        assert "lorem" not in text.lower()
        assert text.count("```") % 2 == 0, f"{d}: unbalanced code fence"
    assert sum("```" in t for t in docs.values()) >= 20
    assert sum(bool(re.search(r"^\|.*\|\s*$", t, re.M)) for t in docs.values()) >= 15
    assert sum(t.count("\n## ") >= 8 for t in docs.values()) >= 3  # long notes where chunking matters


def test_queries(queries):
    assert len(queries) >= 90
    ids = [q["qid"] for q in queries]
    assert len(ids) == len(set(ids)), "duplicate qid"
    assert all(re.fullmatch(r"q\d{3}", i) for i in ids)
    assert len({norm(q["query"]) for q in queries}) == len(queries), "duplicate query text"
    for q in queries:
        assert set(q) <= {"qid", "query", "category", "intent"}, q
        assert q["category"] in CATEGORIES, q
        assert q["query"].strip(), q
    cats = Counter(q["category"] for q in queries)
    assert set(cats) == CATEGORIES
    assert cats["cjk"] >= 6
    assert all(CJK.search(q["query"]) for q in queries if q["category"] == "cjk")
    assert all(len(q["query"].split()) <= 2 for q in queries if q["category"] == "short")


def test_qrels(queries, qrels, docs):
    qids = {q["qid"] for q in queries}
    seen = set()
    by_q: dict[str, list[int]] = defaultdict(list)
    for qid, zero, docno, grade in qrels:
        assert qid in qids, f"unknown qid {qid}"
        assert zero == "0"
        assert docno in docs, f"{qid}: docno {docno} not in data/corpus"
        assert (qid, docno) not in seen, f"duplicate judgement {qid} {docno}"
        seen.add((qid, docno))
        by_q[qid].append(grade)
    for qid in qids:
        assert max(by_q.get(qid, [0])) >= 2, f"{qid} has no document with grade >= 2"
    rel_per_q = sum(sum(g >= 1 for g in gs) for gs in by_q.values()) / len(qids)
    assert 2.0 <= rel_per_q <= 4.0, rel_per_q
    grades = Counter(g for *_, g in qrels)
    assert all(grades[g] > 0 for g in (0, 1, 2, 3))
    multi = [q["qid"] for q in queries if q["category"] == "multi"]
    assert all(sum(g >= 2 for g in by_q[m]) >= 2 for m in multi), "multi queries need several relevant notes"


def test_seed_format(seed):
    assert len(seed) >= 160
    for n, ex in enumerate(seed, 1):
        where = f"seed.jsonl:{n} ({ex.get('query')!r})"
        assert set(ex) <= {"query", "output", "intent", "category"}, where
        q = ex["query"]
        assert isinstance(q, str) and q.strip(), where
        kinds = [k for k, _ in ex["output"]]
        assert all(k in {"hyde", "lex", "vec"} for k in kinds), where
        assert kinds.count("hyde") == 1, where
        assert 1 <= kinds.count("lex") <= 3, where
        assert 1 <= kinds.count("vec") <= 3, where
        for kind, text in ex["output"]:
            assert isinstance(text, str) and text.strip() == text and text, where
            assert "\n" not in text and "<think>" not in text, where
            assert norm(text) != norm(q), f"{where}: {kind} line echoes the query"
            if kind == "hyde":
                assert 50 <= len(text) <= 200, f"{where}: hyde length {len(text)}"
            if kind == "lex":
                assert len(text) <= 80, where
        assert ex.get("category") in SEED_CATEGORIES, where
        if ex["category"] == "entity":
            lex = " ".join(t for k, t in ex["output"] if k == "lex")
            ents = [w for w in re.findall(r"[\w.'/-]+", q) if w[0].isupper() and len(w) > 2 and w != "APIs"]
            missing = [w for w in ents if w not in lex]
            assert not missing, f"{where}: entities dropped from lex: {missing}"
    cats = Counter(ex["category"] for ex in seed)
    assert set(cats) == SEED_CATEGORIES
    assert min(cats.values()) >= 20
    non_en = [ex["query"] for ex in seed if ex["category"] == "non-english"]
    assert sum(bool(CJK.search(q)) for q in non_en) >= 8
    assert len({norm(ex["query"]) for ex in seed}) == len(seed), "duplicate seed query"


def test_no_train_eval_overlap(seed, queries):
    train = {norm(ex["query"]) for ex in seed}
    evalq = {norm(q["query"]) for q in queries}
    assert not (train & evalq), f"train/eval leakage: {sorted(train & evalq)}"
