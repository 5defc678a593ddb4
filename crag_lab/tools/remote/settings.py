"""`RemoteSettings`: where the remote tools connect and the limits they keep (``CRAG_*``, ``.env``)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from crag_lab._env import EnvFileSettings, url_problem
from crag_lab.tools.remote._address import normalise_host


class RemoteSettings(EnvFileSettings):
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
        if url_problem(url) is not None:  # port 0 or 99999, a space in the host, ...
            raise ValueError("has an invalid host or port (a port is a number from 1 to 65535)")
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
            return [normalise_host(str(host)) for host in value if str(host).strip()]
        return value
