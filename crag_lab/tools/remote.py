"""Remote connectors: a Jira issue, a Confluence page or a web page as evidence.

Three tools, ``jira_fetch``, ``confluence_fetch`` and ``web_fetch``, built by ``remote_tools``
from one ``RemoteSettings`` (environment variables ``CRAG_*`` or ``.env``). Each returns the
JSON array of evidence objects every tool returns, with one item.

Every request goes through the same guarded fetch: http and https only; the host is resolved
and refused when any address is loopback, private, link-local, multicast, reserved or
unspecified (unless ``allow_private_networks`` or the host is in ``allowed_hosts``); redirects
are followed by hand, at most five, each hop checked again; the body is streamed and stopped at
``max_bytes``; the whole call, redirects included, must finish within ``timeout_s``. The
Authorization header goes only to the configured Jira/Confluence origin. Tokens are scrubbed
from everything a tool returns or raises, even when a server echoes them back.

>>> tools = remote_tools(RemoteSettings(_env_file=None, jira_base_url=None, jira_token=None))
>>> [tool.name for tool in tools]
['jira_fetch', 'confluence_fetch', 'web_fetch']
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote, urljoin, urlsplit

import httpx
from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from crag_lab.tools._base import Tool, ToolError, evidence_json
from crag_lab.tools._patterns import validate_args

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "ConfluenceFetch",
    "JiraFetch",
    "RemoteSettings",
    "WebFetch",
    "configured_remote_tools",
    "remote_tools",
]

MAX_REDIRECTS = 5
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_USER_AGENT = "crag_lab/0.1 (remote connectors)"
_ERROR_BODY_BYTES = 2048
_EXCERPT_CHARS = 300
_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class RemoteSettings(BaseSettings):
    """Where the remote tools connect and the limits they keep.

    Read from arguments, then ``CRAG_*`` environment variables, then ``.env``. Tokens are
    ``SecretStr`` so they never show in a repr. ``allowed_hosts`` takes a JSON list in the
    environment (``CRAG_ALLOWED_HOSTS='["jira.corp.local", "10.0.0.5"]'``) or a comma-separated
    string as an argument.

    >>> s = RemoteSettings(_env_file=None, jira_base_url="https://acme.atlassian.net/", jira_token="t0k3n")
    >>> s.jira_base_url, "t0k3n" in repr(s)
    ('https://acme.atlassian.net', False)
    """

    model_config = SettingsConfigDict(
        env_prefix="CRAG_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        frozen=True,
        validate_default=True,
        hide_input_in_errors=True,  # a mistyped value may be a token: never echo it
    )

    jira_base_url: str | None = Field(default=None, description="Jira site, e.g. https://acme.atlassian.net")
    jira_token: SecretStr | None = Field(default=None, description="Jira API token or personal access token.")
    jira_email: str | None = Field(
        default=None,
        description="Account e-mail: set it for Jira Cloud API tokens (basic auth); leave unset for Bearer PATs.",
    )
    confluence_base_url: str | None = Field(
        default=None, description="Confluence site, e.g. https://acme.atlassian.net/wiki"
    )
    confluence_token: SecretStr | None = Field(
        default=None, description="Confluence API token or personal access token."
    )
    confluence_email: str | None = Field(
        default=None,
        description="Account e-mail: set it for Confluence Cloud API tokens (basic auth); unset for Bearer.",
    )
    web_fetch_enabled: bool = Field(
        default=False, description="Opt-in (offline by default): True lets web_fetch fetch public http(s) pages."
    )
    allow_private_networks: bool = Field(
        default=False,
        description="Allow loopback/private/link-local targets everywhere (a server on a trusted network).",
    )
    allowed_hosts: list[str] = Field(
        default_factory=list, description="Host names or IPs allowed even when private, e.g. ['127.0.0.1']."
    )
    max_bytes: int = Field(default=2_000_000, gt=0, description="Largest response body read, in bytes.")
    timeout_s: float = Field(
        default=10.0, gt=0.0, le=600.0, description="Seconds one tool call may take, redirects included."
    )

    @field_validator("jira_base_url", "confluence_base_url", mode="before")
    @classmethod
    def _base_url(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        url = value.strip().rstrip("/")
        if not url:
            return None
        parts = urlsplit(url)
        try:
            parts.port  # noqa: B018 - raises ValueError on a malformed port
        except ValueError:
            raise ValueError("has an invalid port") from None
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http(s) URL with a host, e.g. https://acme.atlassian.net")
        if parts.username is not None or parts.password is not None:
            raise ValueError("must not contain a user name or password; set the *_TOKEN and *_EMAIL variables instead")
        if parts.query or parts.fragment:
            raise ValueError("must be the site's base URL, without a query or fragment")
        return url

    @field_validator("jira_token", "confluence_token", "jira_email", "confluence_email", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            return None
        if isinstance(value, str):
            return value.strip()
        return value

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _hosts(cls, value: object) -> object:
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, (list, tuple, set, frozenset)):
            return [_normalise_host(str(host)) for host in value if str(host).strip()]
        return value


# --------------------------------------------------------------------------------------------
# Address policy


def _normalise_host(host: str) -> str:
    """Lowercase a host name and write IP literals one canonical way (``[::1]`` -> ``::1``)."""
    host = host.strip().strip("[]").rstrip(".").lower()
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def _address_kind(ip: _IPAddress) -> str | None:
    """Why ``ip`` is not a public address (``"loopback"``, ``"private"``...), or ``None`` if it is.

    IPv6 forms that embed an IPv4 address (mapped, 6to4, Teredo, NAT64) are judged by that
    address too, so ``::ffff:127.0.0.1`` is loopback.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        embedded: list[ipaddress.IPv4Address] = []
        if ip.ipv4_mapped is not None:
            embedded.append(ip.ipv4_mapped)
        if ip.sixtofour is not None:
            embedded.append(ip.sixtofour)
        if ip.teredo is not None:
            embedded.extend(ip.teredo)
        if ip in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        for inner in embedded:
            kind = _address_kind(inner)
            if kind is not None:
                return kind
        if ip.ipv4_mapped is not None:
            return None
    checks = (
        ("unspecified", ip.is_unspecified),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("non-global", not ip.is_global),
    )
    return next((kind for kind, hit in checks if hit), None)


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


# --------------------------------------------------------------------------------------------
# HTML to text


_SKIP_TAGS = frozenset({"script", "style", "nav", "noscript", "template", "svg", "iframe", "ac:parameter"})
_BLOCK_TAGS = frozenset(
    {
        "p", "div", "section", "article", "main", "header", "footer", "aside", "blockquote", "ul", "ol",
        "dl", "dt", "dd", "table", "thead", "tbody", "tr", "figure", "figcaption", "hr", "br", "address",
        "details", "summary", "form", "fieldset", "body", "html", "ac:structured-macro", "ac:rich-text-body",
    }
)  # fmt: skip
_HEADINGS = {f"h{level}": "#" * level + " " for level in range(1, 7)}


class _TextExtractor(HTMLParser):
    """Readable text from HTML or Confluence storage format: one line per block.

    Drops script, style, nav (and Confluence macro parameters); keeps headings (as ``# ``),
    paragraphs, list items (as ``- ``), and ``pre`` / code-macro bodies with their whitespace.
    """

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self._title: list[str] = []
        self._parts: list[str] = []
        self._prefix = ""
        self._skip = 0
        self._pre = 0
        self._code_body = 0
        self._in_title = False

    @property
    def title(self) -> str:
        return " ".join("".join(self._title).split())

    def text(self) -> str:
        self._flush()
        return "\n".join(self.blocks)

    def _flush(self, pre: bool = False) -> None:
        raw = "".join(self._parts)
        self._parts = []
        text = "\n".join(line.rstrip() for line in raw.strip("\n").splitlines()) if pre else " ".join(raw.split())
        if text.strip():
            self.blocks.append(self._prefix + text)
            self._prefix = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP_TAGS:
            self._skip += 1
        if self._skip:
            return
        if tag == "title":
            self._in_title = True
        elif tag in _HEADINGS or tag == "li":
            self._flush(self._pre > 0)
            self._prefix = _HEADINGS.get(tag, "- ")
        elif tag == "pre":
            self._flush()
            self._pre += 1
        elif tag == "ac:plain-text-body":
            self._flush(self._pre > 0)
            self._code_body += 1
        elif tag in ("td", "th"):
            self._parts.append(" ")
        elif tag in _BLOCK_TAGS:
            self._flush(self._pre > 0)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP_TAGS:
            self._skip = max(0, self._skip - 1)
            return
        if self._skip:
            return
        if tag == "title":
            self._in_title = False
        elif tag == "pre":
            self._flush(pre=True)
            self._pre = max(0, self._pre - 1)
        elif tag == "ac:plain-text-body":
            self._flush(pre=True)
            self._code_body = max(0, self._code_body - 1)
        elif tag in _HEADINGS or tag == "li" or tag in _BLOCK_TAGS:
            self._flush(self._pre > 0)

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        (self._title if self._in_title else self._parts).append(data)

    def unknown_decl(self, data: str) -> None:
        if data[:6].upper() == "CDATA[":
            self._cdata(data[6:])

    def handle_comment(self, data: str) -> None:
        # Newer Pythons report a CDATA section outside SVG/MathML as a bogus comment.
        if data[:7].upper() == "[CDATA[" and data.endswith("]]"):
            self._cdata(data[7:-2])

    def _cdata(self, text: str) -> None:
        if self._skip:
            return
        self._parts.append(text)
        if self._code_body:
            self._flush(pre=True)


def _html_to_text(html: str) -> tuple[str, str]:
    """``(title, text)`` of an HTML document or a Confluence storage-format fragment."""
    try:
        parser = _TextExtractor()
        parser.feed(html)
        parser.close()
    except AssertionError:
        # html.parser reports some malformed declarations ("<![<") this way; read them as text.
        parser = _TextExtractor()
        parser.feed(re.sub(r"<!(?!--|doctype\b)", "&lt;!", html, flags=re.IGNORECASE))
        parser.close()
    return parser.title, parser.text()


# --------------------------------------------------------------------------------------------
# The guarded fetch


@dataclass(frozen=True)
class _Response:
    url: str
    status: int
    content_type: str
    charset: str | None
    body: bytes  # the whole body for 2xx; the first ``_ERROR_BODY_BYTES`` otherwise


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, _normalise_host(parts.hostname or ""), parts.port or (443 if scheme == "https" else 80)


class _Fetcher:
    """GET with the address policy, manual redirects, a byte cap and one deadline per call."""

    def __init__(self, settings: RemoteSettings, tool: str, transport: httpx.BaseTransport | None) -> None:
        self._settings = settings
        self._tool = tool
        self._transport = transport
        self._allowed = frozenset(_normalise_host(host) for host in settings.allowed_hosts)
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

    def get(self, url: str, *, accept: str, authorization: tuple[tuple[str, str, int], str] | None) -> _Response:
        """GET ``url``; ``authorization`` is (origin, header value), sent only to that origin."""
        settings = self._settings
        deadline = time.monotonic() + settings.timeout_s
        client = self._http()
        for _hop in range(MAX_REDIRECTS + 1):
            host = self._check_target(url)
            headers = {"Accept": accept, "User-Agent": _USER_AGENT}
            if authorization is not None and _origin(url) == authorization[0]:
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
                            raise ToolError(f"{self._tool}: HTTP {status} redirect from {_short(url)} had no Location")
                        url = urljoin(url, location).split("#", 1)[0]
                        continue
                    body = self._read(response, deadline, strict=200 <= status < 300)
                    content_type = response.headers.get("content-type", "")
                    return _Response(
                        url=url,
                        status=status,
                        content_type=content_type.split(";", 1)[0].strip().lower(),
                        charset=_charset(content_type),
                        body=body,
                    )
            except httpx.TimeoutException:
                raise ToolError(
                    f"{self._tool}: timed out after {settings.timeout_s:g} s fetching {_short(url)} "
                    "(limit set by CRAG_TIMEOUT_S); the server is slow or unreachable"
                ) from None
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                raise ToolError(
                    f"{self._tool}: request to {_short(url)} failed ({type(exc).__name__}); "
                    "check the address and that the server is up"
                ) from None
        raise ToolError(f"{self._tool}: more than {MAX_REDIRECTS} redirects, the last to {_short(url)}; giving up")

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
        host = _normalise_host(raw_host)
        if self._settings.allow_private_networks or host in self._allowed:
            return host
        try:
            infos = socket.getaddrinfo(host, port or (443 if scheme == "https" else 80), type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise ToolError(f"{self._tool}: could not resolve host {host!r}; check the URL") from None
        for info in infos:
            address = str(info[4][0])
            kind = _address_kind(ipaddress.ip_address(address))
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
        kind = _address_kind(ipaddress.ip_address(address))
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
            f"{self._tool}: the response from {_short(str(response.url))} exceeds the "
            f"{self._settings.max_bytes:,}-byte cap{size}; raise CRAG_MAX_BYTES to read it"
        )


def _charset(content_type: str) -> str | None:
    match = re.search(r"charset=[\"']?([A-Za-z0-9._:-]+)", content_type, re.IGNORECASE)
    return match.group(1) if match else None


def _decode(body: bytes, charset: str | None) -> str:
    if charset is None:
        meta = re.search(rb"<meta[^>]+charset=[\"']?([A-Za-z0-9._:-]+)", body[:4096], re.IGNORECASE)
        charset = meta.group(1).decode("ascii") if meta else "utf-8"
    try:
        return body.decode(charset, errors="replace")
    except LookupError:  # an unknown name, or a bytes-to-bytes codec such as "base64"
        return body.decode("utf-8", errors="replace")


def _short(url: str, limit: int = 120) -> str:
    """A URL for a message: no user:password, no query string (where tokens hide), not too long."""
    base = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1", url.split("?", 1)[0])
    return base if len(base) <= limit else base[: limit - 3] + "..."


def _excerpt(body: bytes) -> str:
    text = " ".join(body.decode("utf-8", errors="replace").split())
    return text if len(text) <= _EXCERPT_CHARS else text[: _EXCERPT_CHARS - 3] + "..."


# --------------------------------------------------------------------------------------------
# The tools


class _RemoteTool:
    """What the three tools share: settings, a lazily created client, scrubbing, status errors."""

    name: str

    def __init__(self, settings: RemoteSettings | None = None, *, transport: httpx.BaseTransport | None = None) -> None:
        self.settings = settings if settings is not None else RemoteSettings()
        self._fetcher = _Fetcher(self.settings, self.name, transport)
        self._secrets = _secret_forms(self.settings)

    def __call__(self, args: Mapping[str, Any]) -> str:
        try:
            valid = validate_args(self.name, args)
            items = self._run(valid)
        except ToolError as exc:
            raise ToolError(self._scrub(str(exc))) from None
        clean = [{k: self._scrub(v) if isinstance(v, str) else v for k, v in item.items()} for item in items]
        return self._scrub(evidence_json(clean))

    def _run(self, args: dict[str, str]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        """Close the HTTP connection pool; the tool opens a new one if called again."""
        self._fetcher.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, configured={self.configured})"

    @property
    def configured(self) -> bool:
        return True

    def _scrub(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _status_error(self, response: _Response, what: str, hints: Mapping[int, str]) -> ToolError:
        status = response.status
        if status in hints:
            hint = hints[status]
        elif status >= 500:
            hint = "the server failed; try again later"
        else:
            hint = "unexpected status"
        reason = httpx.codes.get_reason_phrase(status)
        said = _excerpt(response.body)
        return ToolError(
            f"{self.name}: HTTP {status} {reason} fetching {what} from {_short(response.url)}: {hint}."
            + (f" Server said: {said}" if said else "")
        )

    def _json(self, response: _Response, base_var: str) -> dict[str, Any]:
        try:
            data = json.loads(_decode(response.body, response.charset))
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ToolError(
                f"{self.name}: {_short(response.url)} did not return a JSON object "
                f"(content type {response.content_type or 'unknown'!r}); check that {base_var} is the site's base URL"
            )
        return data


def _secret_forms(settings: RemoteSettings) -> tuple[str, ...]:
    """Every way a token could appear in a response: raw, percent-encoded, inside basic auth."""
    forms: set[str] = set()
    for token, email in (
        (settings.jira_token, settings.jira_email),
        (settings.confluence_token, settings.confluence_email),
    ):
        if token is None:
            continue
        raw = token.get_secret_value()
        forms.update({raw, quote(raw, safe="")})
        if email:
            basic = base64.b64encode(f"{email}:{raw}".encode()).decode("ascii")
            forms.update({basic, basic.rstrip("=")})
    # Longest first, so a form containing another is replaced whole.
    return tuple(sorted((f for f in forms if f), key=len, reverse=True))


def _authorization(base_url: str, token: SecretStr, email: str | None) -> tuple[tuple[str, str, int], str]:
    if email:
        basic = base64.b64encode(f"{email}:{token.get_secret_value()}".encode()).decode("ascii")
        return _origin(base_url), f"Basic {basic}"
    return _origin(base_url), f"Bearer {token.get_secret_value()}"


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def _get(data: object, *path: str) -> object:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


class JiraFetch(_RemoteTool):
    """``jira_fetch {key}``: one Jira issue (summary, status, assignee, description, comments).

    >>> tool = JiraFetch(RemoteSettings(_env_file=None, jira_base_url=None, jira_token=None))
    >>> tool.configured
    False
    """

    name: str = "jira_fetch"

    @property
    def configured(self) -> bool:
        return self.settings.jira_base_url is not None and self.settings.jira_token is not None

    def _run(self, args: dict[str, str]) -> list[dict[str, Any]]:
        settings = self.settings
        if settings.jira_base_url is None or settings.jira_token is None:
            raise ToolError(
                "jira_fetch is not configured: set CRAG_JIRA_BASE_URL and CRAG_JIRA_TOKEN (plus CRAG_JIRA_EMAIL for "
                "Jira Cloud API tokens) in the environment or .env"
            )
        key = args["key"]
        response = self._fetcher.get(
            f"{settings.jira_base_url}/rest/api/2/issue/{quote(key)}",
            accept="application/json",
            authorization=_authorization(settings.jira_base_url, settings.jira_token, settings.jira_email),
        )
        if response.status != 200:
            raise self._status_error(
                response,
                f"issue {key}",
                {
                    401: "the token was rejected; check CRAG_JIRA_TOKEN (and CRAG_JIRA_EMAIL for Jira Cloud)",
                    403: f"the token's user may not see {key}; check its permissions",
                    404: f"issue {key} does not exist or the token's user cannot see it; "
                    "check the key and CRAG_JIRA_BASE_URL",
                },
            )
        data = self._json(response, "CRAG_JIRA_BASE_URL")
        fields = data.get("fields")
        if not isinstance(fields, dict):
            raise ToolError(f"jira_fetch: the response for {key} has no 'fields'; is CRAG_JIRA_BASE_URL a Jira site?")
        real_key = _text(data.get("key")) or key
        summary = _text(fields.get("summary"))
        lines = [f"{real_key}: {summary}" if summary else real_key]
        lines.append(f"Status: {_text(_get(fields, 'status', 'name')) or 'unknown'}")
        lines.append(f"Assignee: {_text(_get(fields, 'assignee', 'displayName')) or 'Unassigned'}")
        description = _text(fields.get("description"))
        if description:
            lines += ["", "Description:", description]
        comments = _get(fields, "comment", "comments")
        if isinstance(comments, list) and comments:
            lines += ["", "Comments:"]
            for comment in comments:
                author = _text(_get(comment, "author", "displayName")) or "someone"
                created = _text(_get(comment, "created"))[:10]
                when = f" ({created})" if created else ""
                lines.append(f"- {author}{when}: {_text(_get(comment, 'body'))}")
        return [
            {
                "text": "\n".join(lines),
                "path": real_key,
                "line": None,
                "line_end": None,
                "score": None,
                "title": lines[0],
            }
        ]


class ConfluenceFetch(_RemoteTool):
    """``confluence_fetch {page}``: one Confluence page (id or page URL) as plain text.

    >>> ConfluenceFetch(RemoteSettings(_env_file=None, confluence_base_url=None)).name
    'confluence_fetch'
    """

    name: str = "confluence_fetch"

    @property
    def configured(self) -> bool:
        return self.settings.confluence_base_url is not None and self.settings.confluence_token is not None

    def _run(self, args: dict[str, str]) -> list[dict[str, Any]]:
        settings = self.settings
        base = settings.confluence_base_url
        if base is None or settings.confluence_token is None:
            raise ToolError(
                "confluence_fetch is not configured: set CRAG_CONFLUENCE_BASE_URL "
                "(e.g. https://acme.atlassian.net/wiki) and CRAG_CONFLUENCE_TOKEN (plus CRAG_CONFLUENCE_EMAIL "
                "for Confluence Cloud API tokens) in the environment or .env"
            )
        page_id = args["page"]
        response = self._fetcher.get(
            f"{base}/rest/api/content/{page_id}?expand=body.storage,version,space",
            accept="application/json",
            authorization=_authorization(base, settings.confluence_token, settings.confluence_email),
        )
        if response.status != 200:
            raise self._status_error(
                response,
                f"page {page_id}",
                {
                    401: "the token was rejected; check CRAG_CONFLUENCE_TOKEN (and CRAG_CONFLUENCE_EMAIL for Cloud)",
                    403: f"the token's user may not read page {page_id}; check the space permissions",
                    404: f"page {page_id} does not exist or the token's user cannot see it; "
                    "check the id and CRAG_CONFLUENCE_BASE_URL (Cloud sites end in /wiki)",
                },
            )
        data = self._json(response, "CRAG_CONFLUENCE_BASE_URL")
        storage = _get(data, "body", "storage", "value")
        if not isinstance(storage, str):
            raise ToolError(
                f"confluence_fetch: page {page_id} came back without body.storage; is CRAG_CONFLUENCE_BASE_URL "
                "a Confluence site?"
            )
        title = _text(data.get("title")) or f"Confluence page {page_id}"
        _, body = _html_to_text(storage)
        space = _text(_get(data, "space", "key"))
        version = _get(data, "version", "number")
        about = ", ".join(
            part for part in (f"space {space}" if space else "", f"version {version}" if version else "") if part
        )
        webui = _get(data, "_links", "webui")
        path = f"{base}{webui}" if isinstance(webui, str) and webui.startswith("/") else f"confluence:{page_id}"
        header = f"# {title}" + (f" ({about})" if about else "")
        return [
            {
                "text": f"{header}\n{body}".strip(),
                "path": path,
                "line": None,
                "line_end": None,
                "score": None,
                "title": title,
            }
        ]


class WebFetch(_RemoteTool):
    """``web_fetch {url}``: a public web page as readable text (HTML or text/plain only).

    >>> WebFetch(RemoteSettings(_env_file=None, web_fetch_enabled=False)).configured
    False
    """

    name: str = "web_fetch"
    _HTML: ClassVar[frozenset[str]] = frozenset({"text/html", "application/xhtml+xml"})

    @property
    def configured(self) -> bool:
        return self.settings.web_fetch_enabled

    def _run(self, args: dict[str, str]) -> list[dict[str, Any]]:
        if not self.settings.web_fetch_enabled:
            raise ToolError("web_fetch is disabled (CRAG_WEB_FETCH_ENABLED=false); enable it to fetch web pages")
        response = self._fetcher.get(
            args["url"], accept="text/html,application/xhtml+xml,text/plain;q=0.9", authorization=None
        )
        if response.status != 200:
            raise self._status_error(
                response,
                "the page",
                {
                    401: "the page needs a login, and web_fetch sends no credentials",
                    403: "the site refused access to this page",
                    404: "no page at this address; check the URL",
                },
            )
        if response.content_type in self._HTML:
            title, text = _html_to_text(_decode(response.body, response.charset))
        elif response.content_type == "text/plain":
            title, text = "", _decode(response.body, response.charset or "utf-8").strip()
        else:
            raise ToolError(
                f"web_fetch: {_short(response.url)} is {response.content_type or 'of unknown type'!r}; "
                "only HTML and text/plain pages are read"
            )
        return [
            {
                "text": text,
                "path": response.url,
                "line": None,
                "line_end": None,
                "score": None,
                "title": title or response.url,
            }
        ]


def remote_tools(settings: RemoteSettings | None = None, *, transport: httpx.BaseTransport | None = None) -> list[Tool]:
    """The three remote tools sharing one settings value (read from the environment if omitted).

    Unconfigured tools are still returned; calling one raises ``ToolError`` naming the variables
    to set. ``transport`` replaces the network (``httpx.MockTransport``) in tests.

    >>> [t.name for t in remote_tools(RemoteSettings(_env_file=None))]
    ['jira_fetch', 'confluence_fetch', 'web_fetch']
    """
    settings = settings if settings is not None else RemoteSettings()
    return [
        JiraFetch(settings, transport=transport),
        ConfluenceFetch(settings, transport=transport),
        WebFetch(settings, transport=transport),
    ]


def configured_remote_tools(
    settings: RemoteSettings | None = None, *, transport: httpx.BaseTransport | None = None
) -> list[Tool]:
    """Only the remote tools whose settings are complete (web_fetch: unless disabled).

    This is what an agent should be offered: a tool it cannot call is noise in the plan prompt.

    >>> settings = RemoteSettings(
    ...     _env_file=None, jira_base_url="https://acme.atlassian.net", jira_token="t0k3n",
    ...     confluence_token=None, web_fetch_enabled=False,
    ... )
    >>> [t.name for t in configured_remote_tools(settings)]
    ['jira_fetch']
    """
    return [tool for tool in remote_tools(settings, transport=transport) if getattr(tool, "configured", False)]
