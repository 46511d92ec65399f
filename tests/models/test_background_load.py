"""A model loads on a thread while the process goes on printing: nothing printed meanwhile is lost,
the first use waits for the load, and llama.cpp's own complaints stay off the terminal."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

pytestmark = pytest.mark.extra("llama")


def _minilm(require):
    from qmdlab.models import load_models, packaged

    require(packaged.is_ready("all-minilm-l6-v2"), "MiniLM is not pulled: `qmdlab pull --preset offline-mini`")
    return load_models("offline-mini", expand="none", rerank="none", n_threads=1, idle_timeout=None).embedder


def test_output_printed_during_a_load_reaches_the_terminal(capfd, require, monkeypatch):
    """llama-cpp-python used to point stdout and stderr at /dev/null for the length of a load: what
    another thread printed meanwhile was lost. The spy prints from inside the load itself."""
    from llama_cpp import _internals

    embedder = _minilm(require)
    load_c = _internals.llama_cpp.llama_model_load_from_file
    inside, printed = threading.Event(), threading.Event()

    def load_and_print(*args):
        inside.set()
        assert printed.wait(30)
        os.write(1, b"printed by another thread while the weights load\n")
        os.write(2, b"and on stderr\n")
        return load_c(*args)

    monkeypatch.setattr(_internals.llama_cpp, "llama_model_load_from_file", load_and_print)
    embedder.load_in_background()
    assert inside.wait(30)  # the load has begun, on its own thread
    os.write(1, b"printed by the main thread during the load\n")
    printed.set()
    vec = embedder.embed_query("heron")  # waits for the background load
    out, err = capfd.readouterr()
    assert "printed by the main thread during the load" in out
    assert "printed by another thread while the weights load" in out and "and on stderr" in err
    assert embedder.llama.loads == 1 and vec.shape == (embedder.dim,) and np.isfinite(vec).all()
    embedder.release()


def test_first_use_raises_a_failed_background_load(tmp_path):
    from qmdlab.errors import ModelError
    from qmdlab.models._llama import LazyLlama

    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    lazy = LazyLlama(lambda: bad, n_threads=1, idle_timeout=None, embedding=True)
    lazy.load_in_background()
    with pytest.raises(ModelError, match="could not load .*broken.gguf"):
        lazy.ensure_loaded()
    assert not lazy.loaded
