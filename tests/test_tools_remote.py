"""Remote connectors (crag_lab/tools/remote/) against a real HTTP server on 127.0.0.1.

The server speaks the shapes of the real APIs (Jira REST v2 issues, Confluence content with
body.storage) plus the awkward cases: redirect chains, a slow and a dripping endpoint, huge
bodies, error statuses and a server that echoes the Authorization header back.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import socket
import threading
import time
import types
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from crag_lab.tools import Tool, ToolError
from crag_lab.tools.remote import (
    ConfluenceFetch,
    JiraFetch,
    RemoteSettings,
    WebFetch,
    _address,
    _fetch,
    configured_remote_tools,
    remote_tools,
)
from crag_lab.tools.remote._html import html_to_text

TOKEN = "tok-SECRET-8c1f2e0d9b7a"
EMAIL = "bot@example.org"
BASIC = base64.b64encode(f"{EMAIL}:{TOKEN}".encode()).decode()

JIRA_ISSUE = {
    "key": "PAY-142",
    "fields": {
        "summary": "Refunds double-charged on retry",
        "status": {"name": "In Progress"},
        "assignee": {"displayName": "Dana Reyes"},
        "description": "When the gateway times out we retry without an idempotency key.",
        "comment": {
            "comments": [
                {"author": {"displayName": "Sam Ode"}, "body": "Seen in prod twice.", "created": "2024-05-02T10:00"},
                {"author": {"displayName": "Dana Reyes"}, "body": "Fix in review."},
            ]
        },
    },
}

CONFLUENCE_STORAGE = (
    "<h1>Retry policy</h1><p>We retry <strong>three</strong> times &amp; back off.</p>"
    "<ul><li><p>first after 1 s</p></li><li>then 2 s</li></ul>"
    '<ac:structured-macro ac:name="code"><ac:parameter ac:name="language">python</ac:parameter>'
    "<ac:plain-text-body><![CDATA[for i in range(3):\n    retry()]]></ac:plain-text-body></ac:structured-macro>"
)

HTML_PAGE = """<!doctype html><html><head><title>Retry guide</title>
<style>body { color: red }</style><script>var token = "x"; alert(1)</script></head>
<body><nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<h2>Backoff</h2><p>Use   exponential
backoff.</p><ul><li>cap at 30 s</li><li>add jitter</li></ul>
<pre>retry(
    max=3)</pre><noscript>enable JS</noscript></body></html>"""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def _send(self, status: int, body: bytes | str, content_type: str = "application/json", **headers: str) -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.end_headers()
        self.wfile.write(data)

    def _authorised(self) -> bool:
        return self.headers.get("Authorization") in (f"Bearer {TOKEN}", f"Basic {BASIC}")

    def do_GET(self) -> None:
        self.server.requests.append((self.path, dict(self.headers.items())))
        path = self.path.split("?", 1)[0]
        route = getattr(self, "_route_" + path.strip("/").split("/")[0].replace("-", "_").replace(".", "_"), None)
        if route is None:
            self._send(404, '{"message": "no route"}')
        else:
            route(path)

    # Jira -------------------------------------------------------------------------------------
    def _route_jira(self, path: str) -> None:
        key = path.rsplit("/", 1)[-1]
        if key == "ECHO-1":  # an error page that echoes the request headers, token included
            self._send(401, "Unauthorized. You sent: " + json.dumps(dict(self.headers.items())), "text/plain")
        elif not self._authorised():
            self._send(401, '{"errorMessages": ["You are not authenticated."]}')
        elif key == "PAY-142":
            self._send(200, json.dumps(JIRA_ISSUE))
        elif key == "LEAK-1":  # the issue text itself holds the credentials
            echoed = f"header was {self.headers['Authorization']}"
            issue = {"key": key, "fields": {"summary": "s", "description": echoed}}
            self._send(200, json.dumps(issue))
        elif key == "HOP-1":  # a redirect to another origin must not carry the token
            self._send(302, "", Location=f"http://localhost:{self.server.server_port}/echo")
        elif key == "SAME-1":
            self._send(302, "", Location="/jira/rest/api/2/issue/PAY-142")
        elif key == "HTML-1":
            self._send(200, "<html><body>Log in</body></html>", "text/html")
        elif key == "DENY-1":
            self._send(403, '{"errorMessages": ["No permission."]}')
        elif key == "BOOM-1":
            self._send(500, "Internal Server Error", "text/plain")
        else:
            self._send(404, '{"errorMessages": ["Issue Does Not Exist"], "errors": {}}')

    def _route_echo(self, path: str) -> None:
        auth = self.headers.get("Authorization", "none")
        self._send(200, json.dumps({"key": "HOP-1", "fields": {"summary": "moved", "description": f"auth={auth}"}}))

    # Confluence -------------------------------------------------------------------------------
    def _route_wiki(self, path: str) -> None:
        page_id = path.rsplit("/", 1)[-1]
        if not self._authorised():
            self._send(401, '{"message": "Unauthorized"}')
            return
        content: dict[str, Any] = {
            "id": page_id,
            "type": "page",
            "title": "Retry Policy",
            "space": {"key": "ENG"},
            "version": {"number": 7},
            "body": {"storage": {"value": CONFLUENCE_STORAGE, "representation": "storage"}},
        }
        if page_id == "12345":
            content["_links"] = {"webui": "/spaces/ENG/pages/12345/Retry+Policy", "base": "https://ignored"}
            self._send(200, json.dumps(content))
        elif page_id == "555":
            self._send(200, json.dumps(content))
        else:
            self._send(404, '{"statusCode": 404, "message": "No content found with id"}')

    # Web --------------------------------------------------------------------------------------
    def _route_page_html(self, path: str) -> None:
        self._send(200, HTML_PAGE, "text/html; charset=utf-8")

    def _route_plain_txt(self, path: str) -> None:
        self._send(200, "line one\nline two\n", "text/plain")

    def _route_latin1(self, path: str) -> None:
        self._send(200, "<p>café</p>".encode("latin-1"), "text/html; charset=iso-8859-1")

    def _route_image_png(self, path: str) -> None:
        self._send(200, b"\x89PNG\r\n", "image/png")

    def _route_redirect(self, path: str) -> None:
        hops = int(path.rsplit("/", 1)[-1])
        self._send(302, "", "text/plain", Location="/page.html" if hops == 0 else f"/redirect/{hops - 1}")

    def _route_to_private(self, path: str) -> None:
        self._send(302, "", "text/plain", Location="http://10.255.255.1/admin")

    def _route_to_file(self, path: str) -> None:
        self._send(302, "", "text/plain", Location="file:///etc/passwd")

    def _route_status(self, path: str) -> None:
        self._send(int(path.rsplit("/", 1)[-1]), "nope", "text/plain")

    def _route_slow(self, path: str) -> None:
        time.sleep(3.0)
        self._send(200, "late", "text/plain")

    def _route_drip(self, path: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        for _ in range(60):  # each byte comes well within the per-read timeout; the whole does not
            self.wfile.write(b"x")
            self.wfile.flush()
            time.sleep(0.05)

    def _route_huge(self, path: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        for _ in range(8):
            self.wfile.write(b"y" * 65536)

    def _route_huge_declared(self, path: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "10000000")
        self.end_headers()
        self.wfile.write(b"z" * 1024)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, dict[str, str]]] = []

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_port}"

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up early (size cap, timeout) is expected here."""


@pytest.fixture(scope="module")
def _running_server() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=2)


@pytest.fixture
def server(_running_server: _Server) -> _Server:
    _running_server.requests.clear()
    return _running_server


@pytest.fixture(autouse=True)
def _no_crag_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests see no CRAG_* variables and no .env of the developer's."""
    for name in list(__import__("os").environ):
        if name.startswith("CRAG_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def make_settings(server: _Server, **overrides: Any) -> RemoteSettings:
    values: dict[str, Any] = {
        "jira_base_url": f"{server.base}/jira",
        "jira_token": TOKEN,
        "confluence_base_url": f"{server.base}/wiki",
        "confluence_token": TOKEN,
        "allowed_hosts": ["127.0.0.1"],
        "web_fetch_enabled": True,
        "timeout_s": 2.0,
        "max_bytes": 100_000,
    }
    values.update(overrides)
    return RemoteSettings(**values)


@pytest.fixture
def tools(server: _Server) -> Iterator[dict[str, Any]]:
    made: dict[str, Any] = {tool.name: tool for tool in remote_tools(make_settings(server))}
    yield made
    for tool in made.values():
        tool.close()


def call(tool: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Call a tool and return its single evidence item."""
    items = json.loads(tool(args))
    assert isinstance(items, list) and len(items) == 1
    assert set(items[0]) == {"text", "path", "line", "line_end", "score", "title"}
    return dict(items[0])


# ---------------------------------------------------------------------------------------------
# The three tools


def test_remote_tools_are_tools_with_the_spec_names(server: _Server) -> None:
    made = remote_tools(make_settings(server))
    assert [tool.name for tool in made] == ["jira_fetch", "confluence_fetch", "web_fetch"]
    assert all(isinstance(tool, Tool) for tool in made)


def test_jira_fetch_returns_the_issue_as_one_evidence_item(server: _Server, tools: dict[str, Any]) -> None:
    item = call(tools["jira_fetch"], {"key": "pay-142"})
    assert item["path"] == "PAY-142"
    assert item["line"] is None and item["line_end"] is None
    assert item["title"] == "PAY-142: Refunds double-charged on retry"
    for expected in (
        "Status: In Progress",
        "Assignee: Dana Reyes",
        "without an idempotency key",
        "- Sam Ode (2024-05-02): Seen in prod twice.",
        "- Dana Reyes: Fix in review.",
    ):
        assert expected in item["text"]
    [(path, headers)] = server.requests
    assert path == "/jira/rest/api/2/issue/PAY-142"
    assert headers["Authorization"] == f"Bearer {TOKEN}"


def test_jira_fetch_uses_basic_auth_when_an_email_is_set(server: _Server) -> None:
    with JiraFetch(make_settings(server, jira_email=EMAIL)) as tool:
        assert call(tool, {"key": "PAY-142"})["path"] == "PAY-142"
    assert server.requests[0][1]["Authorization"] == f"Basic {BASIC}"


def test_confluence_fetch_returns_plain_text_of_the_storage_format(server: _Server, tools: dict[str, Any]) -> None:
    item = call(tools["confluence_fetch"], {"page": "12345"})
    assert item["path"] == f"{server.base}/wiki/spaces/ENG/pages/12345/Retry+Policy"
    assert item["title"] == "Retry Policy"
    assert item["text"].splitlines() == [
        "# Retry Policy (space ENG, version 7)",
        "# Retry policy",
        "We retry three times & back off.",
        "- first after 1 s",
        "- then 2 s",
        "for i in range(3):",
        "    retry()",
    ]
    assert server.paths() == ["/wiki/rest/api/content/12345?expand=body.storage,version,space"]


def test_confluence_fetch_takes_a_page_url_and_falls_back_to_an_id_path(tools: dict[str, Any]) -> None:
    item = call(tools["confluence_fetch"], {"page": "https://acme.atlassian.net/wiki/spaces/ENG/pages/555/Retry"})
    assert item["path"] == "confluence:555"


def test_web_fetch_keeps_readable_html_and_drops_script_style_nav(server: _Server, tools: dict[str, Any]) -> None:
    item = call(tools["web_fetch"], {"url": f"{server.base}/page.html"})
    assert item["title"] == "Retry guide"
    assert item["path"] == f"{server.base}/page.html"
    assert item["text"].splitlines() == [
        "## Backoff",
        "Use exponential backoff.",
        "- cap at 30 s",
        "- add jitter",
        "retry(",
        "    max=3)",
    ]
    assert "Accept" in server.requests[0][1] and "Authorization" not in server.requests[0][1]


def test_web_fetch_passes_text_plain_through_and_honours_the_charset(server: _Server, tools: dict[str, Any]) -> None:
    assert call(tools["web_fetch"], {"url": f"{server.base}/plain.txt"})["text"] == "line one\nline two"
    assert call(tools["web_fetch"], {"url": f"{server.base}/latin1"})["text"] == "café"


def test_web_fetch_refuses_other_content_types(server: _Server, tools: dict[str, Any]) -> None:
    with pytest.raises(ToolError, match="'image/png'; only HTML and text/plain"):
        tools["web_fetch"]({"url": f"{server.base}/image.png"})


def test_a_closed_tool_opens_a_new_client_when_called_again(server: _Server) -> None:
    tool = WebFetch(make_settings(server))
    call(tool, {"url": f"{server.base}/plain.txt"})
    tool.close()
    assert call(tool, {"url": f"{server.base}/plain.txt"})["text"].startswith("line one")
    tool.close()


_HTML_BITS = ["<", ">", "</", "<!", "<![", "]]>", "<!--", "-->", "p", "pre", "li", "script", "nav", "&", ";", " ", "x"]


@given(st.lists(st.sampled_from(_HTML_BITS) | st.text(max_size=3), max_size=30).map("".join))
def test_html_to_text_never_raises_on_malformed_markup(html: str) -> None:
    title, text = html_to_text(html)
    assert isinstance(title, str) and isinstance(text, str)


def test_html_to_text_reads_a_declaration_html_parser_chokes_on() -> None:
    assert html_to_text("<p>a <![< b</p>") == ("", "a <![< b")


# ---------------------------------------------------------------------------------------------
# Configuration


def test_unconfigured_tools_name_the_variables_to_set() -> None:
    settings = RemoteSettings()
    jira, confluence, _ = remote_tools(settings)
    with pytest.raises(ToolError, match="CRAG_JIRA_BASE_URL and CRAG_JIRA_TOKEN"):
        jira({"key": "PAY-142"})
    with pytest.raises(ToolError, match=r"CRAG_CONFLUENCE_BASE_URL .* CRAG_CONFLUENCE_TOKEN"):
        confluence({"page": "12345"})
    assert configured_remote_tools(settings) == []  # offline by default: web_fetch is opt-in
    assert [t.name for t in configured_remote_tools(RemoteSettings(web_fetch_enabled=True))] == ["web_fetch"]
    disabled = RemoteSettings(web_fetch_enabled=False)
    with pytest.raises(ToolError, match="CRAG_WEB_FETCH_ENABLED"):
        WebFetch(disabled)({"url": "https://example.org/"})


def test_settings_come_from_the_environment_and_dotenv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CRAG_JIRA_BASE_URL", "https://acme.atlassian.net/")
    monkeypatch.setenv("CRAG_JIRA_TOKEN", TOKEN)
    monkeypatch.setenv("CRAG_ALLOWED_HOSTS", '["127.0.0.1", "Jira.Corp.Local", "[::1]"]')
    monkeypatch.setenv("CRAG_WEB_FETCH_ENABLED", "false")
    (tmp_path / ".env").write_text("CRAG_CONFLUENCE_BASE_URL=https://acme.atlassian.net/wiki\nCRAG_TIMEOUT_S=3\n")
    settings = RemoteSettings()
    assert settings.jira_base_url == "https://acme.atlassian.net"
    assert settings.jira_token is not None and settings.jira_token.get_secret_value() == TOKEN
    assert settings.allowed_hosts == ["127.0.0.1", "jira.corp.local", "::1"]
    assert settings.web_fetch_enabled is False
    assert settings.confluence_base_url == "https://acme.atlassian.net/wiki"
    assert settings.timeout_s == 3.0
    assert (settings.max_bytes, settings.allow_private_networks) == (2_000_000, False)
    assert [tool.name for tool in configured_remote_tools(settings)] == ["jira_fetch"]


@pytest.mark.parametrize(
    "url",
    [
        f"https://bot:{TOKEN}@acme.atlassian.net",
        "ftp://acme.example",
        "https://acme.net/?token=" + TOKEN,
        "https://acme.net:99999",
    ],
)
def test_bad_base_urls_are_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(ValidationError) as err:
        RemoteSettings(jira_base_url=url)
    assert "jira_base_url" in str(err.value)
    assert TOKEN not in str(err.value)


# ---------------------------------------------------------------------------------------------
# Address policy


def test_loopback_is_refused_before_any_request_without_the_allowance(server: _Server) -> None:
    settings = make_settings(server, allowed_hosts=[])
    jira, confluence, web = remote_tools(settings)
    for tool, args in (
        (jira, {"key": "PAY-142"}),
        (confluence, {"page": "12345"}),
        (web, {"url": f"{server.base}/page.html"}),
    ):
        with pytest.raises(ToolError, match=r"refused 127.0.0.1: a loopback address.*CRAG_ALLOWED_HOSTS"):
            tool(args)
    assert server.requests == []


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("localhost", "loopback"),
        ("[::1]", "loopback"),
        ("[::ffff:127.0.0.1]", "loopback"),
        ("2130706433", "loopback"),  # 127.0.0.1 as one decimal number
        ("0.0.0.0", "unspecified"),
    ],
)
def test_disguised_loopback_hosts_are_refused_before_any_request(server: _Server, host: str, kind: str) -> None:
    with WebFetch(make_settings(server)) as tool, pytest.raises(ToolError, match=f"a {kind} address"):
        tool({"url": f"http://{host}:{server.server_port}/page.html"})
    assert server.requests == []


def test_allow_private_networks_lets_loopback_through(server: _Server) -> None:
    with WebFetch(make_settings(server, allowed_hosts=[], allow_private_networks=True)) as tool:
        assert call(tool, {"url": f"{server.base}/plain.txt"})["text"].startswith("line one")


def test_the_connected_address_is_checked_again(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lookup that said "public" does not vouch for the address the connection really reached."""
    public = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", server.server_port))]
    fake_socket = types.SimpleNamespace(getaddrinfo=lambda *a, **k: public, SOCK_STREAM=socket.SOCK_STREAM)
    monkeypatch.setattr(_fetch, "socket", fake_socket)
    with WebFetch(make_settings(server, allowed_hosts=[])) as tool, pytest.raises(ToolError, match="loopback"):
        tool({"url": f"{server.base}/plain.txt"})


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("240.0.0.1", "private"),
        ("100.64.0.1", "non-global"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "link-local"),
        ("2002:7f00:1::", "loopback"),  # 6to4 wrapping 127.0.0.1
        ("64:ff9b::a00:1", "private"),  # NAT64 wrapping 10.0.0.1
        ("::7f00:1", "reserved"),  # IPv4-compatible 127.0.0.1
        ("8.8.8.8", None),
        ("93.184.216.34", None),
        ("2606:4700:4700::1111", None),
        ("::ffff:8.8.8.8", None),
    ],
)
def test_address_kinds(address: str, kind: str | None) -> None:
    assert _address.address_kind(ipaddress.ip_address(address)) == kind


# ---------------------------------------------------------------------------------------------
# Redirects


def test_redirect_chain_is_followed_and_the_final_url_cited(server: _Server, tools: dict[str, Any]) -> None:
    item = call(tools["web_fetch"], {"url": f"{server.base}/redirect/3"})
    assert item["path"] == f"{server.base}/page.html"
    assert server.paths() == ["/redirect/3", "/redirect/2", "/redirect/1", "/redirect/0", "/page.html"]


def test_more_than_five_redirects_are_refused(server: _Server, tools: dict[str, Any]) -> None:
    with pytest.raises(ToolError, match="more than 5 redirects"):
        tools["web_fetch"]({"url": f"{server.base}/redirect/9"})
    assert len(server.requests) == 6


def test_every_redirect_hop_is_checked(server: _Server, tools: dict[str, Any]) -> None:
    with pytest.raises(ToolError, match=r"refused 10\.255\.255\.1: a private address"):
        tools["web_fetch"]({"url": f"{server.base}/to-private"})
    with pytest.raises(ToolError, match="only http and https"):
        tools["web_fetch"]({"url": f"{server.base}/to-file"})
    assert server.paths() == ["/to-private", "/to-file"]


def test_the_token_goes_only_to_the_configured_origin(server: _Server) -> None:
    with JiraFetch(make_settings(server, allowed_hosts=["127.0.0.1", "localhost"])) as tool:
        moved = call(tool, {"key": "HOP-1"})
        same = call(tool, {"key": "SAME-1"})
    assert moved["text"].endswith("auth=none")
    assert same["path"] == "PAY-142"
    assert [("Authorization" in headers) for _, headers in server.requests] == [True, False, True, True]


# ---------------------------------------------------------------------------------------------
# Limits


def test_a_slow_server_times_out_with_the_limit_named(server: _Server) -> None:
    started = time.monotonic()
    with WebFetch(make_settings(server, timeout_s=0.2)) as tool, pytest.raises(ToolError) as err:
        tool({"url": f"{server.base}/slow"})
    assert time.monotonic() - started < 1.5  # the server would take 3 s
    assert "timed out after 0.2 s" in str(err.value) and "CRAG_TIMEOUT_S" in str(err.value)


def test_the_timeout_covers_the_whole_call_not_each_read(server: _Server) -> None:
    started = time.monotonic()
    with WebFetch(make_settings(server, timeout_s=0.2)) as tool, pytest.raises(ToolError, match="timed out"):
        tool({"url": f"{server.base}/drip"})
    assert time.monotonic() - started < 1.5  # the server would take 3 s


@pytest.mark.parametrize(("path", "declared"), [("/huge", ""), ("/huge-declared", "it declares 10,000,000 bytes")])
def test_bodies_stop_at_the_byte_cap(server: _Server, tools: dict[str, Any], path: str, declared: str) -> None:
    with pytest.raises(ToolError, match=r"exceeds the 100,000-byte cap.*CRAG_MAX_BYTES") as err:
        tools["web_fetch"]({"url": f"{server.base}{path}"})
    assert declared in str(err.value)


def test_a_connection_failure_is_a_tool_error(server: _Server) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket closes
    with WebFetch(make_settings(server)) as tool, pytest.raises(ToolError, match=r"failed \(ConnectError\)"):
        tool({"url": f"http://127.0.0.1:{port}/"})


# ---------------------------------------------------------------------------------------------
# Error statuses


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("NOPE-1", "HTTP 404 Not Found .*issue NOPE-1 does not exist.*CRAG_JIRA_BASE_URL.*Issue Does Not Exist"),
        ("DENY-1", "HTTP 403 Forbidden .*may not see DENY-1"),
        ("BOOM-1", "HTTP 500 Internal Server Error .*try again later"),
        ("HTML-1", "did not return a JSON object .*'text/html'.*CRAG_JIRA_BASE_URL"),
    ],
)
def test_jira_errors_say_what_to_check(tools: dict[str, Any], key: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        tools["jira_fetch"]({"key": key})


def test_a_rejected_token_names_the_variable(server: _Server) -> None:
    jira = JiraFetch(make_settings(server, jira_token="wrong-token"))
    with jira, pytest.raises(ToolError, match=r"HTTP 401 Unauthorized .*CRAG_JIRA_TOKEN"):
        jira({"key": "PAY-142"})
    confluence = ConfluenceFetch(make_settings(server, confluence_token="wrong-token"))
    with confluence, pytest.raises(ToolError, match=r"HTTP 401 Unauthorized .*CRAG_CONFLUENCE_TOKEN"):
        confluence({"page": "12345"})


def test_confluence_404_names_the_page(tools: dict[str, Any]) -> None:
    with pytest.raises(ToolError, match=r"HTTP 404 .*page 999 does not exist.*CRAG_CONFLUENCE_BASE_URL"):
        tools["confluence_fetch"]({"page": "999"})


@pytest.mark.parametrize(
    ("status", "message"),
    [(401, "needs a login"), (403, "refused access"), (404, "check the URL"), (503, "try again later")],
)
def test_web_errors_carry_the_status(server: _Server, tools: dict[str, Any], status: int, message: str) -> None:
    with pytest.raises(ToolError, match=f"HTTP {status} .*{message}"):
        tools["web_fetch"]({"url": f"{server.base}/status/{status}"})


def test_invalid_arguments_fail_before_any_request(server: _Server, tools: dict[str, Any]) -> None:
    for name, args in (("jira_fetch", {"key": "UTF8"}), ("confluence_fetch", {"page": "x"}), ("web_fetch", {})):
        with pytest.raises(ToolError, match=name):
            tools[name](args)
    assert server.requests == []


# ---------------------------------------------------------------------------------------------
# Secrets


def test_tokens_never_show_in_reprs(server: _Server) -> None:
    settings = make_settings(server, jira_email=EMAIL)
    shown = [repr(settings), str(settings), settings.model_dump_json()]
    shown += [repr(tool) for tool in remote_tools(settings)] + [str(tool) for tool in remote_tools(settings)]
    for text in shown:
        assert TOKEN not in text and BASIC not in text


@pytest.mark.parametrize("email", [None, EMAIL])
def test_an_echoed_token_is_scrubbed_from_errors(server: _Server, email: str | None) -> None:
    with JiraFetch(make_settings(server, jira_email=email)) as tool, pytest.raises(ToolError) as err:
        tool({"key": "ECHO-1"})
    assert server.requests[0][1]["Authorization"] in (f"Bearer {TOKEN}", f"Basic {BASIC}")
    message = str(err.value)
    assert "HTTP 401" in message and "***" in message
    assert TOKEN not in message and BASIC not in message and TOKEN not in repr(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__


@pytest.mark.parametrize("email", [None, EMAIL])
def test_an_echoed_token_is_scrubbed_from_returned_text(server: _Server, email: str | None) -> None:
    with JiraFetch(make_settings(server, jira_email=email)) as tool:
        returned = tool({"key": "LEAK-1"})
    assert TOKEN not in returned and BASIC not in returned
    assert "header was" in returned and "***" in returned


def test_transport_errors_do_not_chain_the_request_with_its_headers(server: _Server) -> None:
    tool = JiraFetch(make_settings(server, timeout_s=0.2, jira_base_url=f"{server.base}/slow"))
    with tool, pytest.raises(ToolError, match="timed out") as err:
        tool({"key": "PAY-142"})
    assert err.value.__cause__ is None and err.value.__suppress_context__
    assert TOKEN not in str(err.value)
