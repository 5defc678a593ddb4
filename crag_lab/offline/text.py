"""Tiny text utilities shared by the offline router, planner and synthesizer."""

from __future__ import annotations

import functools
import re

_STOPWORDS = (
    "a about above after again against all am an and any are as at be because been before being "
    "below between both but by can could did do does doing down during each few for from further had "
    "has have having he her here hers him his how i if in into is it its itself just me more most my "
    "no nor not now of off on once only or other our ours out over own same she should so some such "
    "than that the their theirs them then there these they this those through to too under until up "
    "very was we were what when where which while who whom why will with would you your yours "
    "use used using get got tell know please there's what's who's how's i'm it's does do done make "
    "need needs want wants should would shall may might must"
)
STOPWORDS = frozenset(_STOPWORDS.split()) | frozenset("bcdefghjklmnopqrstuvwxyz")
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-/]*[A-Za-z0-9]|[A-Za-z0-9]")
_SUFFIXES = ("ations", "ation", "ings", "ing", "ies", "ied", "ers", "er", "es", "ed", "ly", "s", "e")


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens, keeping identifiers like ``PAY-142``, ``api-gateway`` or ``8443``."""
    return [t.lower() for t in _TOKEN.findall(text)]


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """A light suffix stripper: enough to match "rotate"/"rotation"/"rotating" (remembered: a question's
    reading stems the same evidence words thousands of times).

    >>> stem("rotate"), stem("rotation"), stem("rotating"), stem("configured"), stem("configuration")
    ('rot', 'rot', 'rot', 'configur', 'configur')
    >>> stem("policies"), stem("policy"), stem("8443")
    ('policy', 'policy', '8443')
    """
    if any(ch.isdigit() for ch in word):
        return word
    for suffix in _SUFFIXES:
        if len(word) >= len(suffix) + 3 and word.endswith(suffix):
            word = word[: -len(suffix)] + ("y" if suffix in ("ies", "ied") else "")
            break
    if len(word) > 4 and word.endswith("at"):
        word = word[:-2]
    return word


def content_terms(text: str) -> list[str]:
    """Stemmed tokens without stopwords, in order, without duplicates."""
    return list(dict.fromkeys(stem(t) for t in tokens(text) if t not in STOPWORDS))


def term_parts(term: str) -> list[str]:
    """The stemmed parts of a compound token (``api-gateway`` -> ``api``, ``gateway``), else ``[]``.

    >>> term_parts("api-gateway"), term_parts("gateway")
    (['api', 'gateway'], [])
    """
    parts = [p for p in re.split(r"[-_./]+", term) if p]
    if len(parts) < 2:
        return []
    return [stem(p) for p in parts if p not in STOPWORDS]


def one_slip(a: str, b: str) -> bool:
    """``a`` and ``b`` differ by one typing slip: a letter changed, added, dropped, or two swapped.

    >>> one_slip("kelven", "kelvin"), one_slip("leibnz", "leibniz"), one_slip("zeria", "zeira"), one_slip("abc", "xyz")
    (True, True, True, False)
    """
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1
                                   and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]])
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))
