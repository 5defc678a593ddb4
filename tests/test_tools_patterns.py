"""Argument patterns of the remote tools (crag_lab/tools/_patterns.py).

These decide whether the plan node's text fallback may call jira_fetch, confluence_fetch or
web_fetch at all (spec 003), so false positives matter as much as hits.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crag_lab.tools import ToolError
from crag_lab.tools._patterns import (
    NON_ISSUE_PREFIXES,
    PATTERN_TOOLS,
    extract_args,
    find_confluence_page,
    find_issue_key,
    find_url,
    validate_args,
)

# ---------------------------------------------------------------------------------------------
# Jira issue keys


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("PAY-142", "PAY-142"),
        ("Why is PAY-142 still open?", "PAY-142"),
        ("see (PAY-142), then", "PAY-142"),
        ("https://acme.atlassian.net/browse/PAY-142.", "PAY-142"),
        ("branch feature/PAY-142 merged", "PAY-142"),
        ("AB-1 is the shortest", "AB-1"),
        ("A1B2C3D4E5-999999 is the longest", "A1B2C3D4E5-999999"),
        ("UTF-8 text mentioned in OPS-7", "OPS-7"),  # a denied prefix is skipped, not the end
        ("first DATA-1 then DATA-2", "DATA-1"),
    ],
)
def test_find_issue_key_finds_keys(text: str, key: str) -> None:
    assert find_issue_key(text) == key


@pytest.mark.parametrize(
    "text",
    [
        "Do we store dates as ISO-8601?",
        "files are UTF-8 encoded",
        "the digest is SHA-256",
        "we moved to HTTP-2 last year",
        "pay-142 in lowercase",
        "A-1 has a one-letter project",
        "ABCDEFGHIJK-1 has an 11-character project",
        "PAY-1234567 has a 7-digit number",
        "PAY-0 and PAY-007 have a leading zero",
        "1PAY-12 starts with a digit",
        "RHEL-8.4 is a version",
        "X-PAY-142 and PAY-142X and PAY_142 and foo_PAY-142 are glued",
        "2024-01-15",
        "",
    ],
)
def test_find_issue_key_ignores_non_keys(text: str) -> None:
    assert find_issue_key(text) is None


@pytest.mark.parametrize("prefix", sorted(NON_ISSUE_PREFIXES))
def test_every_denied_prefix_is_not_a_key_in_prose(prefix: str) -> None:
    assert find_issue_key(f"we use {prefix}-8 here") is None
    # An explicit argument is checked for shape only: a project may really be called "MD".
    assert validate_args("jira_fetch", {"key": f"{prefix}-8"}) == {"key": f"{prefix}-8"}


def test_deny_list_holds_the_documented_examples() -> None:
    assert {"UTF", "SHA", "ISO", "HTTP"} <= NON_ISSUE_PREFIXES


# ---------------------------------------------------------------------------------------------
# Confluence pages


@pytest.mark.parametrize(
    ("text", "page"),
    [
        ("https://acme.atlassian.net/wiki/spaces/ENG/pages/98765/Retry+Policy", "98765"),
        ("see https://acme.atlassian.net/wiki/spaces/~jdoe/pages/42 please", "42"),
        ("https://wiki.corp/pages/viewpage.action?pageId=12345", "12345"),
        ("https://wiki.corp/pages/viewpage.action?spaceKey=ENG&pageId=777#top", "777"),
        ("what does pageId=4242 say", "4242"),
        ("page id: 4242", "4242"),
        ("Confluence page 12345 explains it", "12345"),
        ("Page #123456", "123456"),
    ],
)
def test_find_confluence_page_finds_ids(text: str, page: str) -> None:
    assert find_confluence_page(text) == page


@pytest.mark.parametrize(
    "text",
    [
        "on page 12 of the PDF",
        "page 1234 of the manual",  # bare "page N" needs five digits or more
        "pages/12345 without a space",
        "https://acme.atlassian.net/wiki/spaces/ENG/overview",
        "pageId=0",
        "summarise our retry policy",
    ],
)
def test_find_confluence_page_ignores_non_pages(text: str) -> None:
    assert find_confluence_page(text) is None


# ---------------------------------------------------------------------------------------------
# URLs


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("read https://example.org/guide", "https://example.org/guide"),
        ("Summarise (https://example.org/guide?x=1), please.", "https://example.org/guide?x=1"),
        ("[docs](http://example.org/a_(b))", "http://example.org/a_(b)"),
        ("<https://example.org/x>", "https://example.org/x"),
        ("HTTPS://Example.org/Path!", "HTTPS://Example.org/Path"),
        ("http://127.0.0.1:8080/x is local", "http://127.0.0.1:8080/x"),  # found here; refused by the fetcher
    ],
)
def test_find_url_finds_http_urls(text: str, url: str) -> None:
    assert find_url(text) == url


@pytest.mark.parametrize(
    "text",
    ["file:///etc/passwd", "ftp://example.org/x", "javascript:alert(1)", "https:// nothing", "example.org", ""],
)
def test_find_url_ignores_other_schemes_and_hostless_urls(text: str) -> None:
    assert find_url(text) is None


# ---------------------------------------------------------------------------------------------
# extract_args: the plan node's applicability test


def test_extract_args_gives_each_tool_its_argument() -> None:
    query = "Compare PAY-142 with https://acme.atlassian.net/wiki/spaces/ENG/pages/98765/Retries"
    assert extract_args("jira_fetch", query) == {"key": "PAY-142"}
    assert extract_args("confluence_fetch", query) == {"page": "98765"}
    assert extract_args("web_fetch", query) == {"url": "https://acme.atlassian.net/wiki/spaces/ENG/pages/98765/Retries"}


@pytest.mark.parametrize(
    "query",
    [
        "summarise our retry policy",
        "How do we encode timestamps (ISO-8601, UTF-8)?",
        "Is SHA-256 enough, see page 12",
        "what is on the wiki about payments?",
        "read file:///etc/passwd",
    ],
)
def test_plan_node_fallback_never_calls_remote_tools_without_an_argument_pattern(query: str) -> None:
    """Spec 003, "Plan node respects routing plan in fallback paths": no pattern, no remote call."""
    for tool in PATTERN_TOOLS:
        assert extract_args(tool, query) is None


def test_extract_args_skips_a_url_with_credentials_for_the_next_one() -> None:
    query = "not http://user:pw@example.org/ but https://example.org/ok"
    assert extract_args("web_fetch", query) == {"url": "https://example.org/ok"}


def test_unknown_tool_name_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"jira_fetch.*confluence_fetch.*web_fetch"):
        extract_args("vector_search", "PAY-142")
    with pytest.raises(ValueError, match="valid tools"):
        validate_args("read_file", {"path": "x"})


# ---------------------------------------------------------------------------------------------
# validate_args


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        ("jira_fetch", {"key": "PAY-142"}, {"key": "PAY-142"}),
        ("jira_fetch", {"key": " pay-142 ", "reason": "LLM extra"}, {"key": "PAY-142"}),
        ("confluence_fetch", {"page": "12345"}, {"page": "12345"}),
        ("confluence_fetch", {"page": 12345}, {"page": "12345"}),
        ("confluence_fetch", {"page": "https://x.atlassian.net/wiki/spaces/A/pages/77/T"}, {"page": "77"}),
        ("confluence_fetch", {"page": "https://wiki.corp/pages/viewpage.action?pageId=9"}, {"page": "9"}),
        ("web_fetch", {"url": " https://example.org/a?b=c "}, {"url": "https://example.org/a?b=c"}),
        ("web_fetch", {"url": "http://[2001:db8::1]:8080/x"}, {"url": "http://[2001:db8::1]:8080/x"}),
    ],
)
def test_validate_args_normalises_valid_arguments(tool: str, args: dict[str, Any], expected: dict[str, str]) -> None:
    assert validate_args(tool, args) == expected


@pytest.mark.parametrize(
    ("tool", "args", "message"),
    [
        ("jira_fetch", {}, "needs a 'key' argument"),
        ("jira_fetch", {"key": 142}, "needs a 'key' argument"),
        ("jira_fetch", {"key": "PAY142"}, "not a Jira issue key"),
        ("jira_fetch", {"key": "PAY-142; DROP"}, "not a Jira issue key"),
        ("confluence_fetch", {"page": ""}, "needs a 'page' argument"),
        ("confluence_fetch", {"page": True}, "needs a 'page' argument"),
        ("confluence_fetch", {"page": "Retry policy"}, "not a Confluence page"),
        ("confluence_fetch", {"page": "https://example.org/about"}, "not a Confluence page"),
        ("web_fetch", {"url": "file:///etc/passwd"}, "only http and https"),
        ("web_fetch", {"url": "ftp://example.org/x"}, "only http and https"),
        ("web_fetch", {"url": "example.org/x"}, "only http and https"),
        ("web_fetch", {"url": "http://"}, "no host"),
        ("web_fetch", {"url": "http://example.org:99999/"}, "not valid"),
        ("web_fetch", {"url": "https://example.org/a b"}, "whitespace"),
        ("web_fetch", {"url": "https://example.org/" + "a" * 3000}, "limit is 2048"),
    ],
)
def test_validate_args_rejects_invalid_arguments(tool: str, args: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolError, match=message):
        validate_args(tool, args)


def test_validate_args_never_echoes_url_credentials() -> None:
    with pytest.raises(ToolError) as err:
        validate_args("web_fetch", {"url": "https://alice:hunter2-secret@example.org/"})
    assert "hunter2-secret" not in str(err.value)
    assert "user name or password" in str(err.value)


def test_validate_args_rejects_a_non_mapping() -> None:
    with pytest.raises(ToolError, match="JSON object"):
        validate_args("jira_fetch", ["PAY-142"])  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Properties

_prose_words = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12), min_size=0, max_size=15
).map(" ".join)
_keys = st.from_regex(r"[A-Z][A-Z0-9]{1,9}-[1-9][0-9]{0,5}", fullmatch=True).filter(
    lambda key: key.split("-")[0] not in NON_ISSUE_PREFIXES
)


@given(st.text())
def test_random_text_never_raises(text: str) -> None:
    find_issue_key(text)
    find_confluence_page(text)
    find_url(text)
    for tool in PATTERN_TOOLS:
        args = extract_args(tool, text)
        if args is not None:  # whatever extract_args gives, validate_args accepts unchanged
            assert validate_args(tool, args) == args


@settings(max_examples=50)
@given(_prose_words, _keys, _prose_words, st.sampled_from([" ", ", ", " (", ": "]), st.sampled_from([" ", ". ", ")? "]))
def test_a_key_embedded_in_prose_is_found(before: str, key: str, after: str, left: str, right: str) -> None:
    query = f"{before}{left}{key}{right}{after}"
    assert find_issue_key(query) == key
    assert extract_args("jira_fetch", query) == {"key": key}


@settings(max_examples=50)
@given(_prose_words, st.integers(min_value=1, max_value=10**12), _prose_words)
def test_a_page_url_embedded_in_prose_is_found(before: str, page_id: int, after: str) -> None:
    query = f"{before} https://acme.atlassian.net/wiki/spaces/ENG/pages/{page_id}/Some+Title {after}"
    assert extract_args("confluence_fetch", query) == {"page": str(page_id)}


@settings(max_examples=50)
@given(_prose_words, st.from_regex(r"[a-z0-9]{1,10}(\.[a-z0-9]{1,10}){0,3}/[a-z0-9_/-]{0,20}", fullmatch=True))
def test_a_url_embedded_in_prose_is_found(before: str, rest: str) -> None:
    url = f"https://example.org/{rest}"
    assert find_url(f"{before} {url}. thanks") == url


@given(_prose_words)
def test_lowercase_prose_holds_no_argument(text: str) -> None:
    assert all(extract_args(tool, text) is None for tool in PATTERN_TOOLS)


@settings(max_examples=50)
@given(st.dictionaries(st.text(max_size=5), st.one_of(st.none(), st.integers(), st.text(), st.booleans())))
def test_validate_args_only_raises_tool_error(args: dict[str, Any]) -> None:
    for tool in PATTERN_TOOLS:
        with contextlib.suppress(ToolError):
            validate_args(tool, args)
