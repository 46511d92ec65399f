"""Shared plumbing of the HTTP model backends: served-model references, one JSON POST and the backends' common base.

A model served by an OpenAI-compatible server (llama-server, vLLM, Ollama, TEI, a hosted API)
is named by a reference

- ``http://HOST:PORT/v1#MODEL`` (or ``https://…``): the server's base URL, and after ``#`` the
  model name sent in every request (optional: single-model servers such as llama-server ignore it);
- ``openai:MODEL``: the base URL from ``$QMDLAB_OPENAI_BASE_URL``, else ``$OPENAI_BASE_URL``, else
  ``https://api.openai.com/v1``.

Options follow the model name after ``?``, ``&``-separated: ``scores=logit`` (rerank: the server
answers logits, as llama-server does, and qmdlab maps them through the logistic function) and
``template=NAME`` (embed: the input template family, default guessed from the model name).

The bearer key is ``$QMDLAB_MODEL_API_KEY``, else, for ``openai:`` references only,
``$OPENAI_API_KEY`` (so an OpenAI key is never sent to some other server). Each request waits at
most ``$QMDLAB_HTTP_TIMEOUT`` seconds (default 60); connection errors, 5xx and 429 answers are
retried twice with exponential backoff (a ``Retry-After`` header is honoured, up to 10 s); a
timeout is not retried, so a stage with a time budget fails once and degrades with its note.
Every failure is one :class:`~qmdlab.errors.ModelError` line naming the URL and what to do.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, NamedTuple, Optional
from urllib.parse import parse_qsl, urlsplit

from qmdlab import cancel
from qmdlab.errors import ConfigError, ModelError

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = 60.0
DEFAULT_RETRIES = 2
MAX_RETRY_AFTER = 10.0
OPTIONS = {"scores": ("probability", "logit"), "template": None}


def is_remote(ref: Any) -> bool:
    """Whether ``ref`` names a served model.

    >>> is_remote("http://127.0.0.1:8080/v1#m"), is_remote("openai:text-embedding-3-small"), is_remote("pkg:x")
    (True, True, False)
    """
    return isinstance(ref, str) and ref.startswith(("http://", "https://", "openai:"))


class Served(NamedTuple):
    """A parsed served-model reference.

    Attributes
    ----------
    ref : str
        The reference as written (it never holds the key), used as the model id.
    base_url : str
        The base URL without a trailing ``/``; endpoints are appended to it.
    model : str
        The model name sent in requests (``""``: none sent).
    options : dict
        ``scores`` and ``template`` (see the module docs).
    api_key : str or None
        The bearer key.
    """

    ref: str
    base_url: str
    model: str
    options: dict[str, str]
    api_key: Optional[str]

    def url(self, endpoint: str) -> str:
        return f"{self.base_url}/{endpoint.lstrip('/')}"


def parse_ref(ref: str, environ: Optional[Mapping[str, str]] = None) -> Served:
    """Split a served-model reference into base URL, model name and options.

    >>> s = parse_ref("http://127.0.0.1:8080/v1/#bge-reranker?scores=logit", environ={})
    >>> s.base_url, s.model, s.options, s.api_key
    ('http://127.0.0.1:8080/v1', 'bge-reranker', {'scores': 'logit'}, None)
    >>> s = parse_ref("openai:text-embedding-3-small", environ={"OPENAI_BASE_URL": "http://h:1/v1", "OPENAI_API_KEY": "k"})
    >>> s.base_url, s.model, s.api_key
    ('http://h:1/v1', 'text-embedding-3-small', 'k')
    >>> parse_ref("http://h:1/v1#m?color=red", environ={})
    Traceback (most recent call last):
    ...
    qmdlab.errors.ConfigError: model reference 'http://h:1/v1#m?color=red': unknown option 'color'; use scores=probability|logit or template=NAME
    """
    env = os.environ if environ is None else environ
    if ref.startswith("openai:"):
        base = env.get("QMDLAB_OPENAI_BASE_URL") or env.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
        fragment = ref[len("openai:") :]
        key = env.get("QMDLAB_MODEL_API_KEY") or env.get("OPENAI_API_KEY") or None
    else:
        base, _, fragment = ref.partition("#")
        key = env.get("QMDLAB_MODEL_API_KEY") or None
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(
            f"model reference {ref!r}: {base!r} is not an http(s) base URL; write http://HOST:PORT/v1#MODEL"
        )
    if parts.query:
        raise ConfigError(
            f"model reference {ref!r}: options go after the model name, e.g. http://HOST:PORT/v1#MODEL?scores=logit"
        )
    model, _, query = fragment.partition("?")
    options: dict[str, str] = {}
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name not in OPTIONS:
            raise ConfigError(
                f"model reference {ref!r}: unknown option {name!r}; use scores=probability|logit or template=NAME"
            )
        allowed = OPTIONS[name]
        if allowed is not None and value not in allowed:
            raise ConfigError(f"model reference {ref!r}: {name}={value!r}; use one of {', '.join(allowed)}")
        options[name] = value
    return Served(ref, base.rstrip("/"), model, options, key)


def default_timeout() -> float:
    """``$QMDLAB_HTTP_TIMEOUT`` seconds, else :data:`DEFAULT_TIMEOUT`."""
    text = os.environ.get("QMDLAB_HTTP_TIMEOUT")
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"QMDLAB_HTTP_TIMEOUT={text!r} is not a number of seconds; set it to e.g. 60") from None
    if value <= 0:
        raise ConfigError(f"QMDLAB_HTTP_TIMEOUT={text!r} must be positive; set it to e.g. 60")
    return value


def _line(text: Any, limit: int = 160) -> str:
    """``text`` on one line, cut to ``limit`` characters (server bodies go into one-line errors).

    >>> _line("a\\n  b" + "c" * 300, 10)
    'a bcccccc…'
    """
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class HttpEndpoint:
    """POSTs JSON to one served model, with a timeout and bounded retries.

    Parameters
    ----------
    served : Served
        The parsed reference.
    role : str
        ``embed``, ``expand`` or ``rerank``: named in errors with the variable that sets it.
    timeout : float, optional
        Seconds per request; default :func:`default_timeout`.
    retries : int
        Further tries after a connection error, a 5xx or a 429 answer.
    backoff : float
        Seconds before the first retry, doubled for each further one.
    """

    def __init__(
        self,
        served: Served,
        role: str,
        *,
        timeout: Optional[float] = None,
        retries: int = DEFAULT_RETRIES,
        backoff: float = 0.5,
    ):
        self.served = served
        self.role = role
        self.timeout = timeout if timeout is not None else default_timeout()
        self.retries = max(0, int(retries))
        self.backoff = backoff
        self.requests = 0

    def _fix(self) -> str:
        return f"start the server or fix the {self.role} model reference (QMDLAB_{self.role.upper()}_MODEL)"

    def _timed_out(self, url: str) -> ModelError:
        # not retried: under a stage budget a retry would only spend the rest of it on the same wait
        return ModelError(
            f"{url} did not answer within {self.timeout:g} s; raise QMDLAB_HTTP_TIMEOUT or check the server"
        )

    def post(self, endpoint: str, body: dict) -> Any:
        """The decoded JSON answer of ``POST base_url/endpoint`` with ``body`` (and the reference's model
        name as ``model`` when it names one)."""
        url = self.served.url(endpoint)
        if self.served.model:
            body = {**body, "model": self.served.model}
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.served.api_key:
            headers["Authorization"] = f"Bearer {self.served.api_key}"
        tries = self.retries + 1
        for attempt in range(tries):
            cancel.check()
            retry_after: Optional[float] = None
            self.requests += 1
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read()
                break
            except urllib.error.HTTPError as err:
                detail = _line(err.read().decode("utf-8", "replace"))
                if err.code != 429 and err.code < 500:
                    raise ModelError(
                        f"{url} answered HTTP {err.code} ({detail or err.reason}); check the model name and "
                        f"that the server serves this endpoint ({self._fix()})"
                    ) from None
                problem = f"HTTP {err.code} ({detail or err.reason})"
                retry_after = _retry_after(err.headers.get("Retry-After"))
            except TimeoutError:
                raise self._timed_out(url) from None
            except urllib.error.URLError as err:
                if isinstance(err.reason, TimeoutError):
                    raise self._timed_out(url) from None
                problem = f"cannot connect: {_line(err.reason)}"
            except (ConnectionError, http_client_errors()) as err:
                problem = f"connection failed: {_line(err) or type(err).__name__}"
            if attempt + 1 < tries:
                delay = self.backoff * 2**attempt
                cancel.wait(min(MAX_RETRY_AFTER, retry_after) if retry_after is not None else delay)
        else:
            raise ModelError(f"{url}: {problem} after {tries} tries; {self._fix()}")
        try:
            return json.loads(raw)
        except ValueError:
            raise ModelError(
                f"{url} answered something that is not JSON ({_line(raw.decode('utf-8', 'replace'), 80)!r}); "
                f"point the {self.role} model reference at an OpenAI-compatible server"
            ) from None

    def bad_reply(self, endpoint: str, what: str, reply: Any) -> ModelError:
        """The one-line error for a JSON answer of an unexpected shape."""
        return ModelError(
            f"{self.served.url(endpoint)} answered JSON without {what} ({_line(json.dumps(reply), 120)}); "
            f"point the {self.role} model reference at an OpenAI-compatible server"
        )


class HttpModel:
    """What every served-model backend holds: its parsed reference ``served``, its ``model_id`` and its ``endpoint``."""

    def __init__(
        self,
        ref: str | Served,
        role: str,
        *,
        timeout: Optional[float] = None,
        retries: int = DEFAULT_RETRIES,
        backoff: float = 0.5,
    ):
        self.served = parse_ref(ref) if isinstance(ref, str) else ref
        self.model_id = self.served.ref
        self.endpoint = HttpEndpoint(self.served, role, timeout=timeout, retries=retries, backoff=backoff)


def http_client_errors() -> type[Exception]:
    """The base class of ``http.client``'s protocol errors (a server that closed mid-answer)."""
    import http.client

    return http.client.HTTPException


def _retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds of a ``Retry-After`` header given in seconds (a date is ignored).

    >>> _retry_after("2"), _retry_after(None), _retry_after("Wed, 21 Oct 2015 07:28:00 GMT")
    (2.0, None, None)
    """
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def fingerprint_parts(served: Served) -> dict[str, Any]:
    """What every served model's fingerprint holds besides its role's own settings: the base URL and
    model name (never the key), so outputs of two servers or two models never share a cache entry."""
    return {"backend": "openai-http", "url": served.base_url, "model": served.model}
