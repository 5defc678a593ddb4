"""Reading settings files and URLs safely: the base of the settings models, and the checks they share.

`EnvFileSettings` is the base of the three models that read ``.env`` and the environment
(`crag_lab.config.CragConfig`, `crag_lab.config.VectorStoreConfig`,
`crag_lab.tools.remote.RemoteSettings`): a ``.env`` that is not UTF-8 raises
`crag_lab.errors.SettingsError` naming the file, not a bare ``'utf-8' codec`` error.
`check_env_file` reads ``.env`` strictly; `url_problem` says what is wrong with a server URL.
Nothing here imports the rest of crag_lab (the settings models import it).

>>> url_problem("http://127.0.0.1:8080/v1") is None
True
>>> url_problem("http://127.0.0.1:80a/v1")
"has an invalid port '80a' (a number from 1 to 65535)"
"""

from __future__ import annotations

import io
import ipaddress
import os
import re
import stat
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic_settings import BaseSettings

from crag_lab.errors import SettingsError

ENV_FILE = ".env"
PREFIXES = ("KB_AGENT_", "CRAG_")
"""The environment variables the settings models read; ``CRAG_LAB_*`` are the project's own (tests, make)."""

_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
         (b"\xfe\xff", "UTF-16"))
_HOST = re.compile(r"(?!-)[\w-]{1,63}(?<!-)(?:\.(?!-)[\w-]{1,63}(?<!-))*\.?")


class EnvFileSettings(BaseSettings):
    """A pydantic-settings model whose unreadable ``.env`` is a `SettingsError` naming the file.

    pydantic-settings reads ``.env`` with the model's ``env_file_encoding`` and lets the codec's
    error through (``'utf-8' codec can't decode byte 0xff``), naming no file.
    """

    def __init__(self, /, **values: Any) -> None:
        try:
            super().__init__(**values)
        except UnicodeDecodeError as exc:
            files = values.get("_env_file", type(self).model_config.get("env_file"))
            names = [files] if isinstance(files, (str, os.PathLike)) else list(files or ())
            bad = next((str(f) for f in names if _undecodable(Path(f))), str(names[0]) if names else ENV_FILE)
            raise SettingsError(f"{bad}: {_not_utf8(exc)}; save it as UTF-8") from None


def _undecodable(path: Path) -> bool:
    try:
        path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return True
    return False


def _not_utf8(exc: UnicodeDecodeError) -> str:
    data = exc.object if isinstance(exc.object, bytes) else b""
    line = data[:exc.start].count(b"\n") + 1
    for bom, name in _BOMS:
        if data.startswith(bom):
            return f"is saved as {name}, not UTF-8"
    return f"is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line})" if data else "is not UTF-8 text"


# --- the .env file -------------------------------------------------------------------------------


def check_env_file(path: str | Path = ENV_FILE) -> dict[str, tuple[str | None, int]]:
    """The variables of the ``.env`` file at ``path`` as ``{NAME: (value, line)}``; ``{}`` when there is none.

    Raises `SettingsError` naming the file when it cannot be read, is not a regular file (a FIFO
    would block every read), is not UTF-8 (UTF-16 as some editors save it, Latin-1), or has a
    line python-dotenv cannot parse (it would skip that line, and the setting, with only a log
    warning). A folder named ``.env`` (a virtual environment) is not a settings file and is left alone.

    >>> check_env_file("no-such-file.env")
    {}
    """
    target = Path(path)
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SettingsError(f"{path}: cannot be read ({exc.strerror or exc}); fix its permissions or remove it") from None
    if stat.S_ISDIR(mode):
        return {}  # what pydantic-settings does too: `python -m venv .env` is common
    if not stat.S_ISREG(mode):
        raise SettingsError(f"{path}: is not a regular file (a FIFO, socket or device); the settings are read from it "
                            "by several models, so make it a file or remove it")
    try:
        data = target.read_bytes()
    except OSError as exc:
        raise SettingsError(f"{path}: cannot be read ({exc.strerror or exc}); fix its permissions or remove it") from None
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise SettingsError(f"{path}: is saved as {name}, not UTF-8; save it as UTF-8")
    if b"\x00" in data:
        line = data[:data.index(b"\x00")].count(b"\n") + 1
        raise SettingsError(f"{path}: holds NUL bytes (line {line}): it is not UTF-8 text (UTF-16 without a "
                            "byte-order mark?); save it as UTF-8")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{path}: {_not_utf8(exc)}; save it as UTF-8") from None
    from dotenv.parser import parse_stream

    found: dict[str, tuple[str | None, int]] = {}
    for binding in parse_stream(io.StringIO(text)):
        if binding.error:
            raise SettingsError(f"{path}: line {binding.original.line} is not NAME=value "
                                f"({binding.original.string.splitlines()[0][:60]!r}); fix or remove it (an unclosed "
                                "quote runs on to the next lines)")
        if binding.key is not None:
            found[binding.key] = (binding.value, binding.original.line)
    return found


# --- URLs -------------------------------------------------------------------------------------------


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as the address of an http(s) server, or None.

    Stricter than httpx, which takes ``http://h:+80`` as port 80, ``http://h:99999`` as a port and
    ``http://:80`` as a URL without a host, and fails later with ``InvalidURL`` on ``80a``.

    >>> url_problem("ftp://127.0.0.1/v1")
    'must start with http:// or https://'
    """
    if not url.strip():
        return "is empty"
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        return "holds a space or a control character"
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL": an unclosed '['
        return f"is not a valid URL ({exc})"
    if parts.scheme.lower() not in ("http", "https") or not url.lower().startswith(f"{parts.scheme.lower()}://"):
        return "must start with http:// or https://"
    hostport = parts.netloc.rpartition("@")[2]
    port: str | None
    if hostport.startswith("["):
        host, closed, rest = hostport[1:].partition("]")
        if not closed:
            return "has an unclosed '[' in its host"
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"has an invalid IPv6 host [{host}]"
        if rest and not rest.startswith(":"):
            return f"has {rest!r} after its host where a ':port' belongs"
        port = rest[1:] if rest else None
    else:
        host, colon, port_text = hostport.partition(":")
        port = port_text if colon else None
        if not host:
            return "has no host"
        if not _HOST.fullmatch(host):
            return f"has an invalid host {host!r}"
    # An empty port (``http://h:/v1``) is the scheme's default, as RFC 3986 allows.
    if port and (not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535):
        return f"has an invalid port {port!r} (a number from 1 to 65535)"
    try:
        import httpx
    except ImportError:  # pragma: no cover - a dependency of the remote tools
        return None
    try:
        httpx.URL(url)
    except Exception as exc:  # httpx.InvalidURL, and whatever else its parser raises
        return f"is not a valid URL ({exc})"
    return None


def shown_url(url: str) -> str:
    """``url`` as it may be printed: a password in it is replaced by ``***``.

    >>> shown_url("http://me:s3cret@host:8080/v1")
    'http://me:***@host:8080/v1'
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    user, _, hostport = parts.netloc.rpartition("@")
    name, colon, _ = user.partition(":")
    return urlunsplit(parts._replace(netloc=f"{name}{':***' if colon else ''}@{hostport}"))


def check_url(url: str, *, what: str, example: str = "http://127.0.0.1:8080/v1") -> str:
    """``url`` if `url_problem` finds nothing; else `SettingsError` naming ``what`` (an option) and the value."""
    problem = url_problem(url)
    if problem is not None:
        raise SettingsError(f"{what} {shown_url(url)!r} {problem}; give the server's URL, e.g. {example}")
    return url


__all__ = ["ENV_FILE", "PREFIXES", "EnvFileSettings", "check_env_file", "check_url", "shown_url", "url_problem"]
