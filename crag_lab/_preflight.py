"""What every ``crag-lab`` command checks before it loads a model or builds an index.

The ``.env`` file, every ``KB_AGENT_*`` / ``CRAG_*`` setting of the three settings models,
``--api-base``, ``--cache`` and ``--audit``: each failure is one `crag_lab.errors.SettingsError`
(or the cache's / output path's own error) on one line, naming the variable, file or option and
the fix. Reads only: nothing is created, changed or removed.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_settings import BaseSettings

from crag_lab._env import ENV_FILE, PREFIXES, check_env_file, check_url
from crag_lab.config import CragConfig, OfflineSettings, TraceSettings, VectorStoreConfig
from crag_lab.errors import SettingsError
from crag_lab.tools.remote.settings import RemoteSettings

if TYPE_CHECKING:
    import argparse

SETTINGS_MODELS: tuple[type[BaseSettings], ...] = (CragConfig, VectorStoreConfig, TraceSettings, OfflineSettings,
                                                   RemoteSettings)
"""The models that read ``.env`` and the environment."""


def check_settings(env_file: str | Path = ENV_FILE) -> None:
    """Build every settings model from the environment and ``env_file``; raise one `SettingsError` naming
    each invalid variable (``KB_AGENT_TOP_K='abc'``), where it is set (the environment, or the file and
    line) and what it should be. A variable one edit away from a setting's name (``KB_AGENT_TOPK``)
    is refused too, naming the setting meant: it would be ignored. ``CRAG_LAB_*`` are not settings.

    >>> check_settings("no-such-file.env")  # doctest: +SKIP
    """
    from pydantic import ValidationError

    where = _Where(os.environ, check_env_file(env_file), str(env_file))
    problems: list[str] = []
    known: list[str] = []
    for model in SETTINGS_MODELS:
        prefix = str(model.model_config.get("env_prefix", "")).upper()
        known += [prefix + name.upper() for name in model.model_fields]
        hidden = bool(model.model_config.get("hide_input_in_errors"))
        try:
            model(_env_file=env_file)  # type: ignore[call-arg]
        except ValidationError as exc:
            problems += [_problem(prefix, model, error, where, hidden) for error in exc.errors(include_url=False)]
    for name in where.ours():
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            if close:
                problems.append(f"{name} ({where(name)}) is not a setting, so it would be ignored; did you mean "
                                f"{close[0]}?")
    if problems:
        raise SettingsError("; ".join(problems))


class _Where:
    """Where a variable is set: the environment wins over ``.env``, as in pydantic-settings."""

    def __init__(self, env: Mapping[str, str], dotenv: Mapping[str, tuple[str | None, int]], env_file: str) -> None:
        self.env = {k.upper(): k for k in env}
        self.dotenv = {k.upper(): line for k, (_, line) in dotenv.items()}
        self.env_file = env_file

    def __call__(self, name: str) -> str:
        if name in self.env:
            return "set in the environment"
        if name in self.dotenv:
            return f"set in {self.env_file} line {self.dotenv[name]}"
        return "not set"

    def is_set(self, name: str) -> bool:
        return name in self.env or name in self.dotenv

    def fix(self, name: str) -> str:
        if name in self.env:
            return "correct or unset the environment variable"
        return f"correct or remove that line of {self.env_file}"

    def ours(self) -> list[str]:
        names = dict.fromkeys([*self.env, *self.dotenv])
        return [n for n in names if n.startswith(PREFIXES) and not n.startswith("CRAG_LAB_")]


def _problem(prefix: str, model: type[BaseSettings], error: Any, where: _Where, hidden: bool) -> str:
    message = re.sub(r"^(Value|Assertion) error, ", "", str(error["msg"]))
    loc = error.get("loc") or ()
    if loc and isinstance(loc[0], str) and loc[0] in model.model_fields:
        name = prefix + loc[0].upper()
        shown = "" if hidden or not where.is_set(name) else f"={error.get('input')!r}"
        return f"{name}{shown} ({where(name)}): {message}; {where.fix(name)}"
    given = [f"{prefix}{f.upper()} ({where(prefix + f.upper())})" for f in model.model_fields
             if where.is_set(prefix + f.upper())]
    return f"the settings {', '.join(given) or 'of ' + model.__name__}: {message}"


def preflight(args: argparse.Namespace) -> None:
    """What every ``crag-lab`` command checks before it loads a model or builds an index.

    The ``.env`` file and every ``KB_AGENT_*`` / ``CRAG_*`` setting (`check_settings`), then the
    options the command has: ``--api-base`` (an http(s) URL with a valid port), ``--cache`` (a
    response cache of ours, or a new file in an existing folder: `crag_lab.cache.check_cache_file`)
    and ``--audit`` (a file that can be appended to).
    Reads only: nothing is created, changed or removed.
    """
    check_settings()
    api_base = getattr(args, "api_base", None)
    if api_base is not None:
        check_url(api_base, what="--api-base")
    cache = getattr(args, "cache", None)
    if cache is not None:
        from crag_lab.cache import check_cache_file

        check_cache_file(cache, what="--cache")
    audit = getattr(args, "audit", None)
    if audit is not None:  # JsonlSink would fail at the first event, mid-run
        from crag_lab._paths import check_output

        check_output(audit, what="--audit")


__all__ = ["SETTINGS_MODELS", "check_settings", "preflight"]
