"""Text at the doors: questions checked before a run, JSON lines that any string can be written to.

A Python ``str`` can hold a lone surrogate (``"\\ud800"``), which is what a bad JSON or bytes decode
produces; it is not Unicode text, so UTF-8 cannot encode it and a tokenizer refuses it. Questions are
checked here, before any model call; text crag_lab only stores (answers, audit events) is written as
JSON with ``\\uXXXX`` escapes where it must be, so that saving never fails on it and loading gives the
string back.

Text that is compared with other text comes in as Unicode NFC (`nfc`): questions and history
messages here, knowledge-base lines where they are read (`crag_lab.kb._files.LineReader`), tool
arguments and dataset labels where they are parsed. "São" typed with a combining tilde (NFD, as
macOS keyboards and many copy-pastes give it) is then the same string as the precomposed "São".

>>> check_question("Which port?")
'Which port?'
>>> check_question("Is the office in Sa\\u0303o Paulo?") == "Is the office in S\\u00e3o Paulo?"
True
>>> check_question("port \\ud800?")
Traceback (most recent call last):
...
crag_lab.errors.InvalidQuestionError: question has a lone surrogate '\\ud800' at index 5: ...
>>> json_line({"q": "\\ud800"})
'{"q": "\\\\ud800"}'
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from crag_lab.errors import InvalidQuestionError

_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> int | None:
    """Index of the first surrogate code point in ``text`` (none is valid text in a ``str``), else None."""
    found = _SURROGATE_RE.search(text)
    return found.start() if found else None


def encodable(text: str) -> str:
    """``text`` with surrogates made valid: a surrogate pair becomes its character, a lone one U+FFFD.

    >>> encodable("a\\ud83d\\ude00b\\ud800")
    'a😀b\ufffd'
    """
    if lone_surrogate(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def nfc(text: str) -> str:
    """``text`` in Unicode normal form C (composed): one string for what a reader sees as one text.

    NFC never joins or splits lines, so line numbers stay the same; it can shorten a line.

    >>> nfc("Sa\\u0303o") == "S\\u00e3o", len(nfc("e\\u0301")), nfc("a\\nb") == "a\\nb"
    (True, 1, True)
    """
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def check_question(query: object, *, what: str = "question") -> str:
    """``query`` in NFC (`nfc`) if it is a non-empty ``str`` of valid Unicode text, else a clear error.

    Raises ``TypeError`` for anything that is not a ``str`` (``None``, numbers, lists, bytes) and
    ``InvalidQuestionError`` (a ``ValueError``) for an empty or whitespace-only question or one with
    a lone surrogate.
    """
    if isinstance(query, (bytes, bytearray)):
        raise TypeError(f"{what} must be text (str), got {type(query).__name__}: decode it first, e.g. .decode('utf-8')")
    if not isinstance(query, str):
        raise TypeError(f"{what} must be a str, got {type(query).__name__} {_short(query)}")
    if not query.strip():
        raise InvalidQuestionError(f"{what} is empty: ask something, e.g. 'Which port does the gateway use?'")
    index = lone_surrogate(query)
    if index is not None:
        raise InvalidQuestionError(
            f"{what} has a lone surrogate {query[index]!r} at index {index}: it is not valid Unicode text "
            "(a bad JSON or bytes decode makes these); fix the decoding, or drop it with "
            ".encode('utf-8', 'replace').decode('utf-8')"
        )
    return nfc(query)


def check_questions(queries: object, *, what: str = "queries") -> list[str]:
    """Every question of ``queries`` checked (and made NFC) with ``check_question``; a single ``str`` is refused.

    A string is an iterable of its characters, so ``ask_many("Which port?")`` would ask eleven
    one-letter questions: it raises ``TypeError`` instead.
    """
    if isinstance(queries, (str, bytes, bytearray)) or not isinstance(queries, Iterable):
        raise TypeError(f"{what} must be an iterable of questions (e.g. a list of str), got {type(queries).__name__} "
                        f"{_short(queries)}; wrap a single question in a list")
    return [check_question(q, what=f"question #{n}") for n, q in enumerate(queries, 1)]


def check_history(history: object) -> list[dict[str, str]] | None:
    """``history`` as a list of new ``{"role": str, "content": str, ...}`` messages with NFC text (`nfc`);
    None stays None. Raises ``TypeError`` or ``InvalidQuestionError`` naming the message that is not text."""
    if history is None:
        return None
    if isinstance(history, (str, bytes)) or not isinstance(history, Iterable):
        raise TypeError(f"history must be a list of {{'role', 'content'}} messages, got {type(history).__name__}")
    messages: list[dict[str, str]] = []
    for n, message in enumerate(history, 1):
        if not isinstance(message, Mapping):
            raise TypeError(f"history message #{n} must be a dict with 'role' and 'content', got {type(message).__name__}")
        for key in ("role", "content"):
            value = message.get(key)
            if not isinstance(value, str):
                raise TypeError(f"history message #{n} needs a str {key!r}, got {type(value).__name__} {_short(value)}")
            index = lone_surrogate(value)
            if index is not None:
                raise InvalidQuestionError(f"history message #{n} {key!r} has a lone surrogate at index {index}: "
                                           "it is not valid Unicode text")
        messages.append({**message, "role": nfc(message["role"]), "content": nfc(message["content"])})
    return messages


def json_line(value: Any, **options: Any) -> str:
    """``json.dumps(value)`` that UTF-8 can always encode: non-ASCII kept, unless a lone surrogate forces escapes.

    ``json.loads`` of the result gives ``value`` back, lone surrogates included; only two surrogates
    side by side that form a pair come back as the one character they encode (JSON cannot tell them apart).
    """
    text = json.dumps(value, ensure_ascii=False, **options)
    if lone_surrogate(text) is None:
        return text
    return json.dumps(value, ensure_ascii=True, **options)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
