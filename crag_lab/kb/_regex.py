"""Regular expressions from untrusted hands (a model's ``grep`` plan, a user's pattern), at a bounded cost.

Python's ``re`` backtracks: ``(a|aa)+$`` against a line of forty ``a`` and a ``!`` takes longer than
the age of the universe, and nothing can interrupt a running match, not even a model timeout. So a
pattern is

1. parsed with the standard library's parser (an invalid one is searched literally, as before);
2. refused when it is longer than ``MAX_PATTERN_CHARS``, or a counted repeat exceeds
   ``MAX_REPEAT`` or the counted repeats multiply past ``MAX_EXPANSION`` (the ``regex`` engine
   unrolls counted repeats when it compiles: ``a{4294967294}`` would take all memory);
3. compiled with the ``regex`` package, whose matches take a ``timeout``: ``Matcher.search`` passes
   whatever is left of the search's deadline and turns a timeout into ``PatternTooExpensiveError``.

>>> m = Matcher.compile("gate(way)?", timeout_s=1.0)
>>> bool(m.search("The GATEWAY listens on 8443")), bool(m.search("nothing here"))
(True, False)
>>> Matcher.compile("a{5000}").search("a")
Traceback (most recent call last):
...
crag_lab.kb._errors.PatternTooExpensiveError: grep pattern 'a{5000}' is too expensive: ...
"""

from __future__ import annotations

import importlib
import re
import time
from dataclasses import dataclass
from typing import Any

import regex

from crag_lab._text import nfc
from crag_lab.kb._errors import PatternTooExpensiveError

try:  # the standard library's own regex parser: re._parser from Python 3.11, sre_parse before
    sre_constants: Any = importlib.import_module("re._constants")
    sre_parse: Any = importlib.import_module("re._parser")
except ImportError:  # pragma: no cover - Python 3.10
    sre_constants = importlib.import_module("sre_constants")
    sre_parse = importlib.import_module("sre_parse")

MAX_PATTERN_CHARS = 1000
"""Longer patterns are refused: a search pattern written by a model or a person is far shorter."""

MAX_REPEAT = 1000
"""The largest count a counted repeat (``x{n}``, ``x{m,n}``) may have, as in RE2."""

MAX_EXPANSION = 50_000
"""The most pattern items the counted repeats may unroll to, nested repeats multiplied."""

DEFAULT_TIMEOUT_S = 2.0
"""Wall-clock budget of one search over the whole knowledge base."""

_FLAGS = {re.IGNORECASE: regex.IGNORECASE, re.MULTILINE: regex.MULTILINE, re.DOTALL: regex.DOTALL,
          re.VERBOSE: regex.VERBOSE, re.ASCII: regex.ASCII}
_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, getattr(sre_constants, "POSSESSIVE_REPEAT", None)}


def _too_expensive(pattern: str, why: str) -> PatternTooExpensiveError:
    return PatternTooExpensiveError(
        f"grep pattern {_short(pattern)} is too expensive: {why}; use a simpler pattern or plain words"
    )


def _short(pattern: str) -> str:
    return repr(pattern) if len(pattern) <= 80 else repr(pattern[:77]) + "..."


def _expansion(items: Any, pattern: str) -> int:
    """How many items the pattern unrolls to; raises when a counted repeat is too large."""
    total = 0
    for op, av in items:
        if op in _REPEATS:
            low, high, sub = av
            count = low if high == sre_constants.MAXREPEAT else high
            if count > MAX_REPEAT:
                raise _too_expensive(pattern, f"a repeat count of {count} exceeds {MAX_REPEAT}")
            total += max(count, 1) * _expansion(sub, pattern)
        elif op == sre_constants.SUBPATTERN:
            total += _expansion(av[-1], pattern)
        elif op == sre_constants.BRANCH:
            total += sum(_expansion(branch, pattern) for branch in av[1])
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
            total += _expansion(av[1], pattern)
        elif op == getattr(sre_constants, "ATOMIC_GROUP", None):
            total += _expansion(av, pattern)
        elif op == sre_constants.GROUPREF_EXISTS:
            total += _expansion(av[1], pattern) + (_expansion(av[2], pattern) if av[2] else 0)
        else:
            total += 1
        if total > MAX_EXPANSION:
            raise _too_expensive(pattern, f"its counted repeats unroll to more than {MAX_EXPANSION} items")
    return total


@dataclass(frozen=True)
class Matcher:
    """A compiled untrusted pattern and the time one search may take; see the module docstring."""

    pattern: str
    compiled: Any  # a regex.Pattern (the regex package ships no type hints)
    timeout_s: float = DEFAULT_TIMEOUT_S

    @classmethod
    def compile(cls, pattern: str | re.Pattern[str], flags: int = re.IGNORECASE, *,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> Matcher:
        """A case-insensitive matcher for ``pattern``; an invalid regex becomes a literal search.

        The pattern is made NFC, as the lines it searches are (`crag_lab.kb._files.LineReader`): "São"
        typed with a combining tilde finds the precomposed one. A compiled ``re.Pattern`` is
        re-compiled from its text and flags, under the same limits.
        Raises ``PatternTooExpensiveError`` for a pattern refused by the limits above.
        """
        if isinstance(pattern, re.Pattern):
            flags, pattern = pattern.flags, pattern.pattern
        if not isinstance(pattern, str):
            raise TypeError(f"a grep pattern must be a str, got {type(pattern).__name__}")
        pattern = nfc(pattern)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise _too_expensive(pattern, f"it has {len(pattern)} characters, more than {MAX_PATTERN_CHARS}")
        engine_flags = regex.VERSION0
        for std, flag in _FLAGS.items():
            if flags & std:
                engine_flags |= flag
        try:
            parsed = sre_parse.parse(pattern, flags & ~re.DEBUG)
        except re.error:
            return cls(pattern, regex.compile(regex.escape(pattern), engine_flags), timeout_s)
        except RecursionError:
            raise _too_expensive(pattern, "its groups are nested too deeply") from None
        except (OverflowError, ValueError):  # a repeat count past what the parser can store
            raise _too_expensive(pattern, f"a repeat count exceeds {MAX_REPEAT}") from None
        try:
            _expansion(parsed, pattern)
        except RecursionError:
            raise _too_expensive(pattern, "its groups are nested too deeply") from None
        try:
            compiled = regex.compile(pattern, engine_flags)
        except (regex.error, RecursionError, OverflowError, ValueError):
            compiled = regex.compile(regex.escape(pattern), engine_flags)
        return cls(pattern, compiled, timeout_s)

    def deadline(self) -> float:
        """The ``time.monotonic()`` value a search starting now must end by."""
        return time.monotonic() + self.timeout_s

    def search(self, line: str, deadline: float | None = None) -> bool:
        """Whether ``line`` matches, within what is left until ``deadline`` (default: a fresh budget)."""
        left = (self.deadline() if deadline is None else deadline) - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            return self.compiled.search(line, timeout=left) is not None
        except TimeoutError:
            raise _too_expensive(
                self.pattern,
                f"searching took longer than {self.timeout_s:g} s (nested quantifiers such as (a+)+ or (a|aa)+ "
                "backtrack exponentially)",
            ) from None
