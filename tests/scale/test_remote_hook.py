"""The ``--ray`` plumbing that needs no Ray: the trace hook of qmdlab.eval.record, the actors' classes run
in-process, the install hint, the option checks. (tests/scale/test_ray_*.py run the same on Ray.)"""

from __future__ import annotations

import builtins
import json

import numpy as np
import pytest
from click.testing import CliRunner

from qmdlab.cli import cli
from qmdlab.errors import ConfigError, ModelError
from qmdlab.eval.runner import run_suite
from qmdlab.eval.suites import get_suite
from qmdlab.models import load_models
from qmdlab.pipeline.config import PipelineConfig
from qmdlab.scale.cluster import INSTALL_HINT, RayOptions, forwarded_env
from qmdlab.scale.ray_embed import EmbedActor, EmbedderSpec
from qmdlab.scale.ray_queries import ModelSpec, QueryActor, RayQueries, fingerprints


def smart_suite(tmp_path):
    d = tmp_path / "user-data"
    d.mkdir()
    docs = {
        "1": ("Cats", "cats purr and sleep all day"),
        "2": ("Dogs", "dogs bark at cats"),
        "3": ("Birds", "birds fly south in winter"),
        "10": ("Fish", "fish swim in water"),
        "11": ("Cat food", "what cats eat: fish and meat"),
    }
    (d / "T.ALL").write_text("".join(f".I {i}\n.T\n{t}\n.W\n{w}\n" for i, (t, w) in docs.items()))
    (d / "T.QRY").write_text(".I 1\n.W\ncats\n.I 2\n.W\nbirds fly\n.I 3\n.W\nswimming fish\n.I 4\n.W\ncat food\n")
    (d / "T.REL").write_text("1 1 0 0.0\n1 11 0 0.0\n2 3 0 0.0\n3 10 0 0.0\n4 11 0 0.0\n")
    return get_suite(d, "smart")


def in_process(spec: ModelSpec, calls: list):
    """A ``remote`` that runs :class:`QueryActor` here: what each Ray actor runs, minus the transport."""

    def remote(rows, lab):
        actor = QueryActor(str(lab.index.dir), spec, lab.config, forwarded_env())
        for r in rows:
            calls.append(str(r["qid"]))
            yield actor.run(r, forwarded_env())

    return remote


@pytest.mark.slow  # indexes a suite and runs it twice with the fake models (a few seconds)
def test_remote_traces_give_bit_identical_metrics_and_fill_the_same_cache(tmp_path, qmdlab_home):
    suite = smart_suite(tmp_path)
    spec = ModelSpec.resolve("fake")
    cfg = PipelineConfig()
    calls: list = []
    remote = run_suite(
        suite,
        spec.build(),
        cfg,
        out=tmp_path / "remote",
        progress=False,
        log=lambda m: None,
        remote=in_process(spec, calls),
    )
    assert sorted(calls) == ["1", "2", "3", "4"]  # every query went through the remote
    assert remote.timings["queries_cached"] == 0
    cache = json.loads((tmp_path / "remote" / "run.json").read_text())["trace_cache"]
    done = sorted(p.parent.name for p in __import__("pathlib").Path(cache).glob("*/DONE"))
    assert done == ["1", "2", "3", "4"]
    # a local run of the same config finds all four in the cache (same key) ...
    again = run_suite(suite, spec.build(), cfg, out=tmp_path / "again", progress=False, log=lambda m: None)
    assert again.timings["queries_cached"] == 4
    # ... and a fresh local run (new cache) computes the same metrics, bit for bit, and the same run file
    import shutil

    shutil.rmtree(cache)
    local = run_suite(suite, spec.build(), cfg, out=tmp_path / "local", progress=False, log=lambda m: None)
    assert local.timings["queries_cached"] == 0
    assert (tmp_path / "local" / "metrics.json").read_text() == (tmp_path / "remote" / "metrics.json").read_text()
    assert (tmp_path / "local" / "qmdlab.trec").read_text() == (tmp_path / "remote" / "qmdlab.trec").read_text()
    for table in ("lists", "final"):
        a, b = getattr(local.trace, table), getattr(remote.trace, table)
        assert a.sort(a.columns).equals(b.sort(b.columns)), table


def test_cached_queries_never_reach_the_remote(tmp_path, qmdlab_home):
    suite = smart_suite(tmp_path)
    spec = ModelSpec.resolve("fake", expand="none", rerank="none")
    cfg = PipelineConfig(expand=False, rerank=False)
    run_suite(
        suite, spec.build(), cfg, out=tmp_path / "a", limit=2, progress=False, log=lambda m: None, check_ranx=False
    )
    calls: list = []
    res = run_suite(
        suite,
        spec.build(),
        cfg,
        out=tmp_path / "b",
        progress=False,
        log=lambda m: None,
        remote=in_process(spec, calls),
        check_ranx=False,
    )
    assert sorted(calls) == ["3", "4"] and res.timings["queries_cached"] == 2


def test_model_spec_reproduces_the_drivers_fingerprints(monkeypatch):
    monkeypatch.setenv("QMDLAB_RERANK_MODEL", "none")  # the driver's environment is made explicit
    spec = ModelSpec.resolve("fake")
    assert spec.refs == ("fake:keyword", "fake:rules", None)
    monkeypatch.delenv("QMDLAB_RERANK_MODEL")
    assert fingerprints(spec.build()) == fingerprints(load_models("fake", rerank="none"))


def test_a_different_model_on_an_actor_is_refused():
    rq = RayQueries(ModelSpec.resolve("fake"), models=load_models("fake"))
    assert rq.expected == fingerprints(load_models("fake"))
    with pytest.raises(ModelError, match="model references"):
        ModelSpec.resolve("fake", embed=object())


def test_embed_actor_matches_the_local_embedder():
    emb = load_models("fake").embedder
    actor = EmbedActor(EmbedderSpec("fake:keyword"), {})
    batch = {
        "chunk_id": np.array([7, 3]),
        "title": np.array(["Git", None], dtype=object),
        "text": np.array(["git rebase onto main", "docker prune"], dtype=object),
    }
    out = actor(batch)
    assert out["chunk_id"].tolist() == [7, 3] and set(out["fingerprint"].tolist()) == {emb.fingerprint}
    np.testing.assert_array_equal(
        out["vector"], emb.embed_documents([("Git", "git rebase onto main"), ("", "docker prune")])
    )


def test_ray_options_are_checked():
    with pytest.raises(ConfigError, match="--ray-actors"):
        RayOptions(actors=0).check()
    with pytest.raises(ConfigError, match="--ray-cpus/--ray-gpus"):
        RayOptions(num_cpus=0, num_gpus=0).check()


@pytest.mark.parametrize(
    "verb",
    [
        ["embed", "--preset", "fake", "--ray"],
        pytest.param(["eval", "default", "--ray", "local"], marks=pytest.mark.extra("eval")),  # eval needs ranx first
    ],
)
def test_without_ray_the_flag_says_what_to_install(verb, monkeypatch, qmdlab_home):
    real_import = builtins.__import__

    def no_ray(name, *a, **kw):
        if name == "ray" or name.startswith("ray."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    res = CliRunner().invoke(cli, ["--index", str(qmdlab_home / "idx"), *verb])
    assert res.exit_code == 1, res.output
    assert "pip install 'qmdlab[scale]'" in res.output and INSTALL_HINT in res.output
