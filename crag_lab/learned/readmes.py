"""The documentation the learned parts read: the markdown READMEs of the installed distributions.

Only permissively licensed ones, and never crag_lab's own (its README describes the bundled knowledge
base). The answer scorer and the span reader draw templated questions from them
(`crag_lab.learned.data.doc_pairs`); the router draws the names that code and configuration are
written with (`technical_names`), so that a question about ``max_retries`` reads like a question.

>>> technical_names([("demo", "Set `max_retries` in `http.Client`; see `README` and `x`.")])
[('demo', 'demo'), ('demo', 'http.Client'), ('demo', 'max_retries')]
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Iterable, Sequence
from typing import Any

PERMISSIVE = ("MIT", "BSD", "Apache", "ISC", "PSF", "Python Software Foundation", "Unlicense", "0BSD", "Zlib")
EXCLUDED_DISTRIBUTIONS = frozenset({"crag-lab"})  # its README describes the bundled knowledge base
_CODE_SPAN = re.compile(r"`([A-Za-z_][\w.\-/]{2,30})`")
_LOOKS_TECHNICAL = re.compile(r"[_.\-/]|[a-z][A-Z]")
"""A code span is a name a user would type only when it is built like one: ``max_retries``, ``http.Client``,
``typer-slim``, ``HasTraits``; a plain word in backticks (``README``, ``timeout``) is left out."""


def _licence(meta: Any) -> str:
    text = meta.get("License-Expression") or ""
    if not text:
        classifiers = [c.rsplit("::", 1)[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")]
        first_line = (meta.get("License") or "").splitlines()[:1]
        text = " / ".join(classifiers) or (first_line[0] if first_line else "")
    return str(text)


def documentation(sites: Sequence[str] = ()) -> list[tuple[str, str, str, str]]:
    """(name, version, licence, markdown) of every distribution installed beside crag_lab (and in
    the ``sites`` folders) with a permissive licence and a markdown description of 500 characters
    or more, sorted by name (one entry per name: the running environment's wins)."""
    seen: dict[str, tuple[str, str, str, str]] = {}
    dists = list(importlib.metadata.distributions())
    if sites:
        dists += list(importlib.metadata.distributions(path=[str(s) for s in sites]))
    for dist in dists:
        meta: Any = dist.metadata  # an email.message.Message underneath: get, get_all, get_payload
        name = str(meta["Name"]).lower()
        body = meta.get_payload() or meta.get("Description") or ""
        licence = _licence(meta)
        if (name in EXCLUDED_DISTRIBUTIONS or "markdown" not in (meta.get("Description-Content-Type") or "")
                or len(body) < 500 or not any(p.lower() in licence.lower() for p in PERMISSIVE)):
            continue
        seen.setdefault(name, (name, str(meta["Version"]), licence, str(body)))
    return [seen[k] for k in sorted(seen)]


def technical_names(docs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(document, name) for each document's own name and every code span of its markdown built like an
    identifier (`_LOOKS_TECHNICAL`), each name once (first document wins), sorted."""
    seen: dict[str, str] = {}
    for doc, markdown in sorted(docs):
        seen.setdefault(doc, doc)
        for span in _CODE_SPAN.findall(markdown):
            if _LOOKS_TECHNICAL.search(span):
                seen.setdefault(span, doc)
    return sorted((doc, name) for name, doc in seen.items())
