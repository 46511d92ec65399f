"""``hf:org/repo/path/file.gguf`` references: download on first use, ETag refresh, GGUF check.

Files go to ``<model cache>/hf/<org>/<repo>/<path>`` with a ``.etag`` sidecar. Loading a model
uses the local file without touching the network; :func:`ensure` with ``refresh=True`` (what
``qmdlab pull`` does) sends a conditional GET (``If-None-Match``) and re-downloads only when the
server's ETag changed. A download is written to ``.part`` and renamed only after the first four
bytes proved to be the GGUF magic, so a corrupt or HTML error body never replaces a good file.
The endpoint is ``$HF_ENDPOINT`` (default ``https://huggingface.co``).
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import NamedTuple, Optional
from urllib.parse import quote

from qmdlab.errors import ModelError
from qmdlab.paths import model_cache_dir

GGUF_MAGIC = b"GGUF"


class HfRef(NamedTuple):
    repo: str
    filename: str
    revision: str = "main"


def parse_hf_uri(uri: str) -> HfRef:
    """Split ``hf:org/repo/path/to/file.gguf`` (optionally ``@revision`` after the repo).

    >>> parse_hf_uri("hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf")
    HfRef(repo='ggml-org/embeddinggemma-300M-GGUF', filename='embeddinggemma-300M-Q8_0.gguf', revision='main')
    >>> parse_hf_uri("hf:org/repo@v2/sub/m.gguf")
    HfRef(repo='org/repo', filename='sub/m.gguf', revision='v2')
    """
    if not uri.startswith("hf:"):
        raise ModelError(f"{uri!r} is not an hf: reference; write hf:org/repo/file.gguf")
    parts = uri[3:].strip("/").split("/")
    if len(parts) < 3 or not all(parts):
        raise ModelError(f"{uri!r} must look like hf:org/repo/file.gguf")
    repo_name, _, rev = parts[1].partition("@")
    return HfRef(f"{parts[0]}/{repo_name}", "/".join(parts[2:]), rev or "main")


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def url_for(ref: HfRef, base: Optional[str] = None) -> str:
    """The download URL of a reference (``base`` defaults to :func:`endpoint`).

    >>> url_for(HfRef("org/repo", "sub/a b.gguf"), "https://huggingface.co")
    'https://huggingface.co/org/repo/resolve/main/sub/a%20b.gguf'
    """
    return f"{base or endpoint()}/{ref.repo}/resolve/{quote(ref.revision)}/{quote(ref.filename)}"


def local_path(uri: str) -> Path:
    ref = parse_hf_uri(uri)
    rev = "" if ref.revision == "main" else f"@{ref.revision}"
    return model_cache_dir() / "hf" / (ref.repo + rev) / ref.filename


def _etag_file(path: Path) -> Path:
    return path.with_name(path.name + ".etag")


def is_gguf(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == GGUF_MAGIC


def ensure(uri: str, *, refresh: bool = False, progress: bool = False, timeout: float = 30.0) -> Path:
    """Local path of ``uri``, downloading it if absent, or if ``refresh`` and its ETag changed.

    Offline with a local copy, a refresh keeps the copy. Raises :class:`ModelError` naming
    ``qmdlab pull`` when there is no copy and no network, or when the body is not a GGUF file.
    """
    path = local_path(uri)
    have = path.is_file()
    if have and not refresh:
        return path
    req = urllib.request.Request(url_for(parse_hf_uri(uri)), headers={"User-Agent": "qmdlab"})
    if os.environ.get("HF_TOKEN"):
        req.add_header("Authorization", f"Bearer {os.environ['HF_TOKEN']}")
    etag_file = _etag_file(path)
    if have and etag_file.is_file():
        req.add_header("If-None-Match", etag_file.read_text().strip())
    try:
        resp = urllib.request.urlopen(req, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 304 and have:
            return path
        if have:
            return path
        raise ModelError(
            f"downloading {uri} failed: HTTP {err.code} {err.reason} (check the reference, then run `qmdlab pull`)"
        ) from None
    except (urllib.error.URLError, OSError) as err:
        if have:
            return path
        reason = getattr(err, "reason", err)
        raise ModelError(
            f"cannot download {uri} ({reason}); run `qmdlab pull --preset qmd` with network "
            f"access, or use the offline preset (`qmdlab pull --preset offline`)"
        ) from None
    with resp:
        etag = resp.headers.get("X-Linked-Etag") or resp.headers.get("ETag")
        total = int(resp.headers.get("Content-Length") or 0) or None
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=total, unit="B", unit_scale=True, desc=path.name, leave=False)
        try:
            first = True
            with open(part, "wb") as f:
                while True:
                    block = resp.read(1 << 20)
                    if not block:
                        break
                    if first and not block.startswith(GGUF_MAGIC):
                        raise ModelError(
                            f"{uri} is not a GGUF file (bad magic {block[:4]!r}); "
                            f"check the reference and run `qmdlab pull` again"
                        )
                    first = False
                    f.write(block)
                    if bar is not None:
                        bar.update(len(block))
            if first:
                raise ModelError(f"{uri} downloaded empty; run `qmdlab pull` again")
            if total is not None and part.stat().st_size != total:
                raise ModelError(
                    f"{uri}: download truncated ({part.stat().st_size} of {total} bytes); run `qmdlab pull` again"
                )
            os.replace(part, path)
        finally:
            part.unlink(missing_ok=True)
            if bar is not None:
                bar.close()
    if etag:
        etag_file.write_text(etag + "\n")
    else:
        etag_file.unlink(missing_ok=True)
    return path
