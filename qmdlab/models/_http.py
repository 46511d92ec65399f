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
``$OPENAI_API_KEY`` (so an OpenAI key is never sent to some other server). Connection errors, 5xx
and 429 answers are retried twice with exponential backoff (a ``Retry-After`` header is honoured,
up to 10 s). Every failure is one :class:`~qmdlab.errors.ModelError` line naming the URL and what
to do; text the server sent is shown escaped (:func:`qmdlab.display.printable`), so an answer
cannot write terminal escapes into an error or a trace note.

What a server can make qmdlab do is bounded:

- **time**: each request (connect, send, and every read of the answer's head and body) has one
  deadline, ``$QMDLAB_HTTP_TIMEOUT`` seconds (default 60, at most a day); at the deadline the
  connection is shut down, so a server sending one byte at a time cannot hold a request open. A
  timeout is not retried, so a stage with a time budget fails once and degrades with its note;
- **size**: an answer over :data:`MAX_REPLY_BYTES` (64 MiB) is refused (declared or counted while
  read: memory never grows past it); of an error answer :data:`MAX_ERROR_BYTES` are read;
- **redirects**: none is followed. A 3xx answer is one error naming its ``Location``: following
  it would resend the key (and the texts) to whatever host the server names;
- **content**: what comes back is checked by each backend (vectors finite, non-zero and of one
  dimension: :mod:`qmdlab.models.http_embed`; expansion lines bounded in number and length:
  :func:`qmdlab.models.expansion.parse_expansion`).
"""

from __future__ import annotations

import functools
import http.client
import json
import math
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, NamedTuple, Optional
from urllib.parse import parse_qsl, urlsplit

from qmdlab import cancel
from qmdlab.display import printable
from qmdlab.errors import ConfigError, ModelError
from qmdlab.served import is_served

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = 60.0
#: The largest ``$QMDLAB_HTTP_TIMEOUT`` accepted (a day).
MAX_TIMEOUT = 86_400.0
DEFAULT_RETRIES = 2
MAX_RETRY_AFTER = 10.0
#: Bytes of a served model's answer read at most; a larger answer is refused.
MAX_REPLY_BYTES = 64 * 1024 * 1024
#: Bytes of an error answer (4xx, 5xx) read for its message.
MAX_ERROR_BYTES = 4096
_CHUNK = 64 * 1024
OPTIONS = {"scores": ("probability", "logit"), "template": None}


def is_remote(ref: Any) -> bool:
    """Whether ``ref`` names a served model (:func:`qmdlab.served.is_served`).

    >>> is_remote("http://127.0.0.1:8080/v1#m"), is_remote("openai:text-embedding-3-small"), is_remote("pkg:x")
    (True, True, False)
    """
    return is_served(ref)


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
    """``$QMDLAB_HTTP_TIMEOUT`` seconds, else :data:`DEFAULT_TIMEOUT`; a value that is not a number
    of seconds above 0 and at most :data:`MAX_TIMEOUT` (``nan``, ``inf``, ``-1``, ``1e999``) is one
    :class:`~qmdlab.errors.ConfigError` line naming the variable and that range."""
    text = os.environ.get("QMDLAB_HTTP_TIMEOUT")
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_TIMEOUT:  # NaN fails it too
        raise ConfigError(
            f"QMDLAB_HTTP_TIMEOUT={text!r} is not a number of seconds above 0 and at most {MAX_TIMEOUT:g}; "
            "set it to e.g. 60"
        )
    return value


def _line(text: Any, limit: int = 160) -> str:
    """``text`` on one line, cut to ``limit`` characters, control characters escaped (server bodies
    go into one-line errors; :func:`qmdlab.display.printable`).

    >>> _line("a\\n  b" + "c" * 300, 10)
    'a bcccccc…'
    >>> _line("\\x1b]0;owned\\x07 red \\x1b[31m")
    '\\\\x1b]0;owned\\\\x07 red \\\\x1b[31m'
    """
    flat = " ".join(str(text)[: limit * 4].split())
    flat = flat if len(flat) <= limit else flat[: limit - 1] + "…"
    return printable(flat)


def _size(n: int) -> str:
    """A byte count as the limits state it.

    >>> _size(64 * 1024 * 1024), _size(1000)
    ('64 MiB', '1000 bytes')
    """
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n} bytes"


class _Deadline:
    """One request's time limit, shared by the connect, the send and every read: each socket
    operation waits at most the time left, and a timer shuts the connection's sockets down when
    it has passed, so a server that sends its head or body one byte at a time cannot hold a read
    open past it."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer: Optional[threading.Timer] = None
        self._stopped = False

    def left(self) -> float:
        """Seconds left; :class:`TimeoutError` once none are."""
        left = self.end - time.monotonic()
        if left <= 0 or self.expired:
            self.expired = True
            raise TimeoutError(f"deadline of {self.seconds:g} s passed")
        return left

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down at the deadline (at once when it has passed)."""
        with self._lock:
            self._socks.append(sock)
            if self._timer is None and not self._stopped:
                self._timer = threading.Timer(max(0.0, self.end - time.monotonic()), self._expire)
                self._timer.daemon = True
                self._timer.start()
        if self.expired:
            self._expire()

    def _expire(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self.expired = True
            for sock in self._socks:
                try:  # the plain socket's shutdown, on an SSL socket too: a reader blocked in it sees the end
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:  # closed already
                    pass

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self._timer is not None:
                self._timer.cancel()


class _DeadlineHTTP(http.client.HTTPConnection):
    def __init__(self, *args: Any, deadline: _Deadline, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.deadline = deadline

    def connect(self) -> None:
        # the plain TCP connection (HTTPConnection's, for _DeadlineHTTPS too), under the deadline
        self.timeout = self.deadline.left()
        http.client.HTTPConnection.connect(self)
        self.deadline.watch(self.sock)


class _DeadlineHTTPS(_DeadlineHTTP, http.client.HTTPSConnection):
    def connect(self) -> None:
        # HTTPSConnection.connect, with the TLS handshake under the deadline too
        super().connect()
        host = self._tunnel_host or self.host  # type: ignore[attr-defined]
        tls = self._context.wrap_socket(  # type: ignore[attr-defined]
            self.sock, server_hostname=host, do_handshake_on_connect=False
        )
        self.sock = tls
        self.deadline.watch(tls)
        tls.settimeout(self.deadline.left())
        tls.do_handshake()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx answer is not followed: it comes back as an :class:`urllib.error.HTTPError`."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _opener(deadline: _Deadline) -> urllib.request.OpenerDirector:
    class Http(urllib.request.HTTPHandler):
        def http_open(self, req):  # type: ignore[no-untyped-def]
            return self.do_open(functools.partial(_DeadlineHTTP, deadline=deadline), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req):  # type: ignore[no-untyped-def]
            return self.do_open(functools.partial(_DeadlineHTTPS, deadline=deadline), req)

    return urllib.request.build_opener(_NoRedirect, Http, Https)


def _read_some(resp: Any, limit: int) -> bytes:
    """At most ``limit`` bytes of an (error) answer; whatever arrived when reading fails."""
    out = b""
    try:
        while len(out) < limit:
            chunk = resp.read1(limit - len(out)) if hasattr(resp, "read1") else resp.read(limit - len(out))
            if not chunk:
                break
            out += chunk
    except Exception:  # the body is only a detail of the error being raised
        pass
    return out


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
        name as ``model`` when it names one), within the module's limits."""
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
            deadline = _Deadline(self.timeout)
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with _opener(deadline).open(req, timeout=self.timeout) as resp:
                    raw = self._read(url, resp, deadline)
                break
            except ModelError:
                raise
            except Exception as err:
                if (
                    deadline.expired
                    or isinstance(err, TimeoutError)
                    or isinstance(getattr(err, "reason", None), TimeoutError)
                ):
                    raise self._timed_out(url) from None
                if isinstance(err, urllib.error.HTTPError):
                    if 300 <= err.code < 400:
                        raise ModelError(
                            f"{url} answered HTTP {err.code}, a redirect to "
                            f"{_line(err.headers.get('Location') or '(no Location)', 200)}; qmdlab follows no "
                            f"redirect of a served model (the key would go along): put the URL that answers "
                            f"into the {self.role} model reference (QMDLAB_{self.role.upper()}_MODEL)"
                        ) from None
                    detail = _line(_read_some(err, MAX_ERROR_BYTES).decode("utf-8", "replace"))
                    if err.code != 429 and err.code < 500:
                        raise ModelError(
                            f"{url} answered HTTP {err.code} ({detail or _line(err.reason)}); check the model name "
                            f"and that the server serves this endpoint ({self._fix()})"
                        ) from None
                    problem = f"HTTP {err.code} ({detail or _line(err.reason)})"
                    retry_after = _retry_after(err.headers.get("Retry-After"))
                elif isinstance(err, urllib.error.URLError):
                    problem = f"cannot connect: {_line(err.reason)}"
                elif isinstance(err, (OSError, http.client.HTTPException)):
                    problem = f"connection failed: {_line(err) or type(err).__name__}"
                else:
                    raise
            finally:
                deadline.stop()
            if attempt + 1 < tries:
                delay = self.backoff * 2**attempt
                cancel.wait(min(MAX_RETRY_AFTER, retry_after) if retry_after is not None else delay)
        else:
            raise ModelError(f"{url}: {problem} after {tries} tries; {self._fix()}")
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise ModelError(
                f"{url} answered something that is not JSON ({_line(raw[:400].decode('utf-8', 'replace'), 80)!r}); "
                f"point the {self.role} model reference at an OpenAI-compatible server"
            ) from None

    def _read(self, url: str, resp: Any, deadline: _Deadline) -> bytearray:
        """The answer's body, read in chunks under ``deadline`` and at most :data:`MAX_REPLY_BYTES` of it."""
        cap = MAX_REPLY_BYTES
        too_large = ModelError(
            f"{url} answered more than {_size(cap)}, more than qmdlab reads of a served model's answer; "
            f"check the server (or send fewer texts per request)"
        )
        declared = resp.headers.get("Content-Length", "")
        if declared.strip().isdigit() and int(declared) > cap:
            raise too_large
        buf = bytearray()
        while True:
            deadline.left()
            chunk = resp.read1(_CHUNK)
            if not chunk:
                break
            if len(buf) + len(chunk) > cap:
                raise too_large
            buf += chunk
        deadline.left()  # a socket shut down at the deadline reads as the end of the answer
        if resp.length:  # the server closed before the end it declared
            raise http.client.IncompleteRead(bytes(buf[-40:]), resp.length)
        return buf

    def bad_reply(self, endpoint: str, what: str, reply: Any) -> ModelError:
        """The one-line error for a JSON answer of an unexpected shape."""
        return ModelError(
            f"{self.served.url(endpoint)} answered JSON without {what} ({_line(json.dumps(reply)[:1000], 120)}); "
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
