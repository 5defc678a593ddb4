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

The parts: `settings` (``RemoteSettings``), ``_address`` (the address guard), ``_fetch`` (the
guarded fetch), ``_html`` (HTML to text) and `connectors` (the three tools).

>>> tools = remote_tools(RemoteSettings(_env_file=None, jira_base_url=None, jira_token=None))
>>> [tool.name for tool in tools]
['jira_fetch', 'confluence_fetch', 'web_fetch']
"""

from crag_lab.tools.remote.connectors import (
    ConfluenceFetch,
    JiraFetch,
    WebFetch,
    configured_remote_tools,
    remote_tools,
)
from crag_lab.tools.remote.settings import RemoteSettings

__all__ = [
    "ConfluenceFetch",
    "JiraFetch",
    "RemoteSettings",
    "WebFetch",
    "configured_remote_tools",
    "remote_tools",
]
