"""Argument patterns for the remote tools, shared by the connectors and the plan node's fallback.

The plan node's text fallback may only call ``jira_fetch``, ``confluence_fetch`` or ``web_fetch``
when the query itself holds a valid argument for that tool (spec 003, "Plan node respects routing
plan in fallback paths"). ``extract_args`` is that test; ``validate_args`` is the stricter check the
connectors run on every call, whatever produced the arguments (an LLM's JSON or ``extract_args``).

>>> extract_args("jira_fetch", "Why is PAY-142 still open?")
{'key': 'PAY-142'}
>>> extract_args("jira_fetch", "Do we store dates as ISO-8601 in UTF-8?") is None
True
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from crag_lab.tools._base import ToolError

__all__ = [
    "NON_ISSUE_PREFIXES",
    "PATTERN_TOOLS",
    "extract_args",
    "find_confluence_page",
    "find_issue_key",
    "find_url",
    "validate_args",
]

#: The tools whose arguments come from these patterns, in the order the plan node lists them.
PATTERN_TOOLS: tuple[str, ...] = ("jira_fetch", "confluence_fetch", "web_fetch")

#: Prefixes that look like a Jira project key in prose but name a standard or a version instead
#: (``UTF-8``, ``SHA-256``, ``ISO-8601``, ``HTTP-2``, ``GPT-4``...). Only free-text extraction skips
#: them; an explicit ``{"key": ...}`` argument is checked for shape alone.
NON_ISSUE_PREFIXES: frozenset[str] = frozenset(
    {
        # encodings, hashes, checksums, ciphers
        "UTF", "UCS", "SHA", "MD", "CRC", "AES", "DES", "RSA",
        # standards bodies and numbered documents
        "ISO", "IEC", "IEEE", "RFC", "ECMA", "ANSI", "PEP", "CVE", "CWE",
        # protocols and hardware generations
        "HTTP", "HTTPS", "TLS", "SSL", "IPV", "USB", "DDR", "LTE", "X86",
        # names with a version or year
        "GPT", "COVID",
    }
)  # fmt: skip

_KEY_SHAPE = r"[A-Z][A-Z0-9]{1,9}-[1-9][0-9]{0,5}"
# Not glued to a longer word; not the middle of a version ("RHEL-8.4") or a date-like run ("A1-2-3").
_ISSUE_KEY_RE = re.compile(
    r"(?<![A-Za-z0-9_-])(?P<key>(?P<prefix>[A-Z][A-Z0-9]{1,9})-[1-9][0-9]{0,5})(?![A-Za-z0-9_]|[.-][0-9])"
)
_KEY_FULL_RE = re.compile(_KEY_SHAPE)

_PAGE_ID = r"[1-9][0-9]{0,18}"
_CONFLUENCE_RE = re.compile(
    # Cloud / modern URLs: .../wiki/spaces/ENG/pages/12345/Title
    rf"/spaces/[^/\s?#]+/pages/(?P<cloud>{_PAGE_ID})(?![0-9])"
    # Server / Data Center URLs: .../pages/viewpage.action?spaceKey=ENG&pageId=12345
    rf"|/pages/viewpage\.action\?(?:[^\s#]*?&)?pageId=(?P<viewpage>{_PAGE_ID})(?![0-9])"
    # explicit ids in prose: "pageId=12345", "page id: 12345", "page_id 12345"
    rf"|\bpage[ _-]?id\s*[:=#]?\s*(?P<pageid>{_PAGE_ID})(?![0-9])"
    # "page 12345": five digits or more, so that "page 12 of the PDF" is not a Confluence page
    r"|\bpage\s+#?(?P<bare>[1-9][0-9]{4,18})(?![0-9])",
    re.IGNORECASE,
)

_URL_RE = re.compile(r"\bhttps?://[^\s<>\"'`{}|\\^]+", re.IGNORECASE)
_TRAILING_PUNCT = ".,;:!?'\"*"
_MAX_URL_CHARS = 2048


def find_issue_key(text: str) -> str | None:
    """The first Jira issue key in ``text`` (``PAY-142``), or ``None``.

    A key is 2-10 uppercase letters or digits starting with a letter, a dash and a 1-6 digit
    number without a leading zero. Prefixes in ``NON_ISSUE_PREFIXES`` are skipped, so ``UTF-8``
    or ``SHA-256`` are not keys, and lowercase words are never keys in prose.

    >>> find_issue_key("UTF-8 logs for https://acme.atlassian.net/browse/PAY-142.")
    'PAY-142'
    >>> find_issue_key("compare SHA-256 and HTTP-2") is None
    True
    """
    for match in _ISSUE_KEY_RE.finditer(text):
        if match.group("prefix") not in NON_ISSUE_PREFIXES:
            return match.group("key")
    return None


def find_confluence_page(text: str) -> str | None:
    """The first Confluence page id in ``text``, or ``None``.

    Recognises page URLs (``.../wiki/spaces/ENG/pages/12345/Title`` and
    ``.../pages/viewpage.action?pageId=12345``) and explicit ids (``pageId=12345``,
    ``page id 12345``, ``page 12345`` with at least five digits).

    >>> find_confluence_page("see https://acme.atlassian.net/wiki/spaces/ENG/pages/98765/Retries")
    '98765'
    >>> find_confluence_page("on page 12 of the PDF") is None
    True
    """
    match = _CONFLUENCE_RE.search(text)
    if match is None:
        return None
    return next(group for group in match.groups() if group is not None)


def _iter_urls(text: str) -> Iterator[str]:
    """Candidate http(s) URLs in ``text`` with trailing prose punctuation removed."""
    for match in _URL_RE.finditer(text):
        url = match.group(0)
        while url:
            if url[-1] in _TRAILING_PUNCT:
                url = url[:-1]
            elif url[-1] in ")]" and url.count(url[-1]) > url.count("(" if url[-1] == ")" else "["):
                url = url[:-1]  # closes a bracket opened in the prose, e.g. "(see https://x.org)"
            else:
                break
        try:
            parts = urlsplit(url)
            host = parts.hostname
            parts.port  # noqa: B018 - raises ValueError on a malformed port
        except ValueError:
            continue
        if host:
            yield url


def find_url(text: str) -> str | None:
    """The first http or https URL in ``text``, or ``None``; other schemes are ignored.

    >>> find_url("Summarise (https://example.org/guide?x=1), please.")
    'https://example.org/guide?x=1'
    >>> find_url("open file:///etc/passwd or ftp://example.org") is None
    True
    """
    return next(_iter_urls(text), None)


def extract_args(tool_name: str, query: str) -> dict[str, str] | None:
    """Arguments for ``tool_name`` found in ``query``, or ``None`` when it holds no valid one.

    This is the applicability test of the plan node's text fallback: a remote tool whose
    arguments are ``None`` here must not be called. Unknown tool names raise ``ValueError``
    listing ``PATTERN_TOOLS``.

    >>> extract_args("confluence_fetch", "what does pageId=4242 say?")
    {'page': '4242'}
    >>> extract_args("web_fetch", "summarise our retry policy") is None
    True
    """
    _check_tool_name(tool_name)
    if tool_name == "jira_fetch":
        candidates: list[dict[str, str]] = []
        key = find_issue_key(query)
        if key is not None:
            candidates.append({"key": key})
    elif tool_name == "confluence_fetch":
        page = find_confluence_page(query)
        candidates = [] if page is None else [{"page": page}]
    else:
        candidates = [{"url": url} for url in _iter_urls(query)]
    for args in candidates:
        try:
            return validate_args(tool_name, args)
        except ToolError:
            continue
    return None


def validate_args(tool_name: str, args: Mapping[str, Any]) -> dict[str, str]:
    """Check and normalise the arguments of a remote tool; raise ``ToolError`` when invalid.

    Returns only the tool's own key (extra keys an LLM adds are ignored): ``{"key": "PAY-142"}``
    (uppercased), ``{"page": "12345"}`` (a page URL becomes its id) or ``{"url": ...}``.

    >>> validate_args("jira_fetch", {"key": " pay-142 "})
    {'key': 'PAY-142'}
    >>> validate_args("confluence_fetch", {"page": "https://x.atlassian.net/wiki/spaces/A/pages/77/T"})
    {'page': '77'}
    """
    _check_tool_name(tool_name)
    if not isinstance(args, Mapping):
        raise ToolError(f"{tool_name} takes a JSON object of arguments, got {type(args).__name__}")
    if tool_name == "jira_fetch":
        return {"key": _valid_issue_key(args)}
    if tool_name == "confluence_fetch":
        return {"page": _valid_page(args)}
    return {"url": _valid_url(args)}


def _check_tool_name(tool_name: str) -> None:
    if tool_name not in PATTERN_TOOLS:
        raise ValueError(f"no argument pattern for tool {tool_name!r}; valid tools: {list(PATTERN_TOOLS)}")


def _required_text(tool_name: str, args: Mapping[str, Any], name: str, example: str) -> str:
    value = args.get(name)
    if isinstance(value, int) and not isinstance(value, bool) and name == "page":
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{tool_name} needs a {name!r} argument, e.g. {{{name!r}: {example!r}}}")
    return value.strip()


def _valid_issue_key(args: Mapping[str, Any]) -> str:
    key = _required_text("jira_fetch", args, "key", "PAY-142").upper()
    if not _KEY_FULL_RE.fullmatch(key):
        raise ToolError(
            f"jira_fetch: {key[:40]!r} is not a Jira issue key; expected a project key of 2-10 "
            "letters/digits starting with a letter, a dash and an issue number, e.g. 'PAY-142'"
        )
    return key


def _valid_page(args: Mapping[str, Any]) -> str:
    page = _required_text("confluence_fetch", args, "page", "12345")
    if re.fullmatch(_PAGE_ID, page):
        return page
    if re.match(r"https?://", page, re.IGNORECASE) and not any(c.isspace() for c in page):
        found = find_confluence_page(page)
        if found is not None:
            return found
    raise ToolError(
        f"confluence_fetch: {page[:80]!r} is not a Confluence page; pass a numeric page id or a page "
        "URL like https://example.atlassian.net/wiki/spaces/ENG/pages/12345/Title"
    )


def _valid_url(args: Mapping[str, Any]) -> str:
    url = _required_text("web_fetch", args, "url", "https://example.org/")
    if len(url) > _MAX_URL_CHARS:
        raise ToolError(f"web_fetch: the URL is {len(url)} characters long; the limit is {_MAX_URL_CHARS}")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise ToolError("web_fetch: the URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        raise ToolError("web_fetch: the URL is not valid; check its host name and port") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ToolError(f"web_fetch fetches only http and https URLs, not {parts.scheme or 'a relative'!r} ones")
    if parts.username is not None or parts.password is not None:
        raise ToolError("web_fetch refuses URLs with a user name or password in them; remove the 'user:pass@' part")
    if not host:
        raise ToolError("web_fetch: the URL has no host name, e.g. https://example.org/page")
    return url
