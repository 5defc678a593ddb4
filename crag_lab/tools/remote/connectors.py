"""The three remote tools: ``jira_fetch``, ``confluence_fetch`` and ``web_fetch``.

Each validates its argument (`crag_lab.tools._patterns.validate_args`), fetches through the guarded
`crag_lab.tools.remote._fetch.Fetcher`, and returns the JSON array of evidence objects every tool
returns, with one item. Tokens are scrubbed from everything a tool returns or raises, even when a
server echoes them back.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import quote

import httpx
from pydantic import SecretStr

from crag_lab.tools._base import Tool, ToolError, evidence_json
from crag_lab.tools._patterns import validate_args
from crag_lab.tools.remote._fetch import Fetcher, Response, decode, excerpt, origin, short
from crag_lab.tools.remote._html import html_to_text
from crag_lab.tools.remote.settings import RemoteSettings

if TYPE_CHECKING:
    from typing_extensions import Self


class _RemoteTool:
    """What the three tools share: settings, a lazily created client, scrubbing, status errors."""

    name: str

    def __init__(self, settings: RemoteSettings | None = None, *, transport: httpx.BaseTransport | None = None) -> None:
        self.settings = settings if settings is not None else RemoteSettings()
        self._fetcher = Fetcher(self.settings, self.name, transport)
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

    def _status_error(self, response: Response, what: str, hints: Mapping[int, str]) -> ToolError:
        status = response.status
        if status in hints:
            hint = hints[status]
        elif status >= 500:
            hint = "the server failed; try again later"
        else:
            hint = "unexpected status"
        reason = httpx.codes.get_reason_phrase(status)
        said = excerpt(response.body)
        return ToolError(
            f"{self.name}: HTTP {status} {reason} fetching {what} from {short(response.url)}: {hint}."
            + (f" Server said: {said}" if said else "")
        )

    def _json(self, response: Response, base_var: str) -> dict[str, Any]:
        try:
            data = json.loads(decode(response.body, response.charset))
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise ToolError(
                f"{self.name}: {short(response.url)} did not return a JSON object "
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
        return origin(base_url), f"Basic {basic}"
    return origin(base_url), f"Bearer {token.get_secret_value()}"


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
        _, body = html_to_text(storage)
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
            title, text = html_to_text(decode(response.body, response.charset))
        elif response.content_type == "text/plain":
            title, text = "", decode(response.body, response.charset or "utf-8").strip()
        else:
            raise ToolError(
                f"web_fetch: {short(response.url)} is {response.content_type or 'of unknown type'!r}; "
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
