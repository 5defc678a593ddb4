"""The guarded fetch: every request of a remote tool goes through `Fetcher.get`.

http and https only; the host is resolved and refused when any address is not public (see
`crag_lab.tools.remote._address`); redirects are followed by hand, at most five, each hop checked
again, and the address actually connected to is checked once more; the body is streamed and stopped
at ``max_bytes``; the whole call, redirects included, must finish within ``timeout_s``. The
Authorization header goes only to the origin it belongs to.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx

from crag_lab.tools._base import ToolError
from crag_lab.tools.remote._address import address_kind, normalise_host
from crag_lab.tools.remote.settings import RemoteSettings

MAX_REDIRECTS = 5
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_USER_AGENT = "crag_lab/0.1 (remote connectors)"
_ERROR_BODY_BYTES = 2048
_EXCERPT_CHARS = 300


@dataclass(frozen=True)
class Response:
    url: str
    status: int
    content_type: str
    charset: str | None
    body: bytes  # the whole body for 2xx; the first ``_ERROR_BODY_BYTES`` otherwise


def origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, normalise_host(parts.hostname or ""), parts.port or (443 if scheme == "https" else 80)


class Fetcher:
    """GET with the address policy, manual redirects, a byte cap and one deadline per call."""

    def __init__(self, settings: RemoteSettings, tool: str, transport: httpx.BaseTransport | None) -> None:
        self._settings = settings
        self._tool = tool
        self._transport = transport
        self._allowed = frozenset(normalise_host(host) for host in settings.allowed_hosts)
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _http(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                # trust_env=False: no proxy variables, no ~/.netrc credentials slipping into requests.
                self._client = httpx.Client(follow_redirects=False, trust_env=False, transport=self._transport)
            return self._client

    def get(self, url: str, *, accept: str, authorization: tuple[tuple[str, str, int], str] | None) -> Response:
        """GET ``url``; ``authorization`` is (origin, header value), sent only to that origin."""
        settings = self._settings
        deadline = time.monotonic() + settings.timeout_s
        client = self._http()
        for _hop in range(MAX_REDIRECTS + 1):
            host = self._check_target(url)
            headers = {"Accept": accept, "User-Agent": _USER_AGENT}
            if authorization is not None and origin(url) == authorization[0]:
                headers["Authorization"] = authorization[1]
            try:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise httpx.TimeoutException("deadline passed")
                with client.stream("GET", url, headers=headers, timeout=httpx.Timeout(remaining)) as response:
                    self._check_peer(host, response)
                    status = response.status_code
                    if status in _REDIRECT_STATUSES:
                        location = response.headers.get("location", "").strip()
                        if not location:
                            raise ToolError(f"{self._tool}: HTTP {status} redirect from {short(url)} had no Location")
                        url = urljoin(url, location).split("#", 1)[0]
                        continue
                    body = self._read(response, deadline, strict=200 <= status < 300)
                    content_type = response.headers.get("content-type", "")
                    return Response(
                        url=url,
                        status=status,
                        content_type=content_type.split(";", 1)[0].strip().lower(),
                        charset=charset_of(content_type),
                        body=body,
                    )
            except httpx.TimeoutException:
                raise ToolError(
                    f"{self._tool}: timed out after {settings.timeout_s:g} s fetching {short(url)} "
                    "(limit set by CRAG_TIMEOUT_S); the server is slow or unreachable"
                ) from None
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise ToolError(
                    f"{self._tool}: request to {short(url)} failed ({type(exc).__name__}); "
                    "check the address and that the server is up"
                ) from None
        raise ToolError(f"{self._tool}: more than {MAX_REDIRECTS} redirects, the last to {short(url)}; giving up")

    def _check_target(self, url: str) -> str:
        """Refuse ``url`` unless it is http(s) to an allowed address; return its normalised host."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise ToolError(f"{self._tool}: refused {scheme or 'relative'!r} URL; only http and https are fetched")
        if parts.username is not None or parts.password is not None:
            raise ToolError(f"{self._tool}: refused a URL with a user name or password in it")
        try:
            raw_host, port = parts.hostname, parts.port
        except ValueError:
            raise ToolError(f"{self._tool}: refused a URL with an invalid host or port") from None
        if not raw_host:
            raise ToolError(f"{self._tool}: refused a URL without a host")
        host = normalise_host(raw_host)
        if self._settings.allow_private_networks or host in self._allowed:
            return host
        try:
            infos = socket.getaddrinfo(host, port or (443 if scheme == "https" else 80), type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise ToolError(f"{self._tool}: could not resolve host {host!r}; check the URL") from None
        for info in infos:
            address = str(info[4][0])
            kind = address_kind(ipaddress.ip_address(address))
            if kind is not None:
                raise self._refused(host, address, kind)
        return host

    def _check_peer(self, host: str, response: httpx.Response) -> None:
        """Re-check the address actually connected to (a DNS answer can change between lookups)."""
        if self._settings.allow_private_networks or host in self._allowed:
            return
        stream = response.extensions.get("network_stream")
        peer = stream.get_extra_info("server_addr") if stream is not None else None
        if not peer:
            return
        address = str(peer[0])
        kind = address_kind(ipaddress.ip_address(address))
        if kind is not None:
            raise self._refused(host, address, kind)

    def _refused(self, host: str, address: str, kind: str) -> ToolError:
        shown = host if host == address else f"{host} ({address})"
        return ToolError(
            f"{self._tool}: refused {shown}: a {kind} address. Remote tools only reach public hosts; to allow "
            f"this one set CRAG_ALLOWED_HOSTS='[\"{host}\"]' (or CRAG_ALLOW_PRIVATE_NETWORKS=true)"
        )

    def _read(self, response: httpx.Response, deadline: float, *, strict: bool) -> bytes:
        """The body, streamed; past ``max_bytes`` it raises when ``strict``, else it is cut short."""
        cap = self._settings.max_bytes if strict else _ERROR_BODY_BYTES
        declared = response.headers.get("content-length", "")
        if strict and declared.isdigit() and int(declared) > cap:
            raise self._too_big(response, declared=int(declared))
        chunks: list[bytes] = []
        total = 0
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                if strict:
                    raise self._too_big(response, declared=None)
                break
            if time.monotonic() > deadline:
                raise httpx.TimeoutException("deadline passed while reading the body")
        return b"".join(chunks)[:cap]

    def _too_big(self, response: httpx.Response, *, declared: int | None) -> ToolError:
        size = f" (it declares {declared:,} bytes)" if declared is not None else ""
        return ToolError(
            f"{self._tool}: the response from {short(str(response.url))} exceeds the "
            f"{self._settings.max_bytes:,}-byte cap{size}; raise CRAG_MAX_BYTES to read it"
        )


def charset_of(content_type: str) -> str | None:
    match = re.search(r"charset=[\"']?([A-Za-z0-9._:-]+)", content_type, re.IGNORECASE)
    return match.group(1) if match else None


def decode(body: bytes, charset: str | None) -> str:
    if charset is None:
        meta = re.search(rb"<meta[^>]+charset=[\"']?([A-Za-z0-9._:-]+)", body[:4096], re.IGNORECASE)
        charset = meta.group(1).decode("ascii") if meta else "utf-8"
    try:
        return body.decode(charset, errors="replace")
    except LookupError:  # an unknown name, or a bytes-to-bytes codec such as "base64"
        return body.decode("utf-8", errors="replace")


def short(url: str, limit: int = 120) -> str:
    """A URL for a message: no user:password, no query string (where tokens hide), not too long."""
    base = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1", url.split("?", 1)[0])
    return base if len(base) <= limit else base[: limit - 3] + "..."


def excerpt(body: bytes) -> str:
    text = " ".join(body.decode("utf-8", errors="replace").split())
    return text if len(text) <= _EXCERPT_CHARS else text[: _EXCERPT_CHARS - 3] + "..."
