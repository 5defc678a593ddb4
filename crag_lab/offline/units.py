"""Quotable units of evidence, and what kind of answer a question asks for.

A unit is the smallest piece of a document that can answer a question on its own: a sentence of a
paragraph (wrapped lines joined first), a list item, a table row rendered with its header
(``Port: 8443``), a line of code. The grader scores an item by its best unit, and the synthesizer
quotes units, so both read evidence the same way.

>>> [u.text for u in units_of(1, "| Field | Value |\\n|---|---|\\n| Public port | 8443 |")]
['Public port: 8443']
>>> asks_for("Which port does the gateway use?"), asks_for("Who leads payments?")
('quantity', 'person')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from crag_lab.offline.text import STOPWORDS, content_terms, term_parts

MAX_UNIT_CHARS = 400

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'*])")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_LINK_ONLY = re.compile(r"^\W*(?:!?\[[^\]]*\]\([^)]*\)[\s,;.:-]*)+$")
_BRACKET_NUMBER = re.compile(r"\[(\d{1,3})\]")
_EMPHASIS = re.compile(r"\*\*([^*]+)\*\*|__([^_]+)__")
# Headers of a key/value table: their rows read best as "key: value", with no header names.
_GENERIC_HEADERS = frozenset({
    "field", "value", "key", "setting", "settings", "name", "property", "item", "parameter", "attribute",
    "option", "detail", "details", "fact", "what", "",
})

# Day and month names: a weekday answers "when" and "every ..."; neither is a name a question must ground.
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
# What a question asks for, from its phrasing, and what a unit holding it looks like.
_DURATION = (r"(?:ms|milliseconds?|s|sec|seconds?|min|minutes?|h|hours?|days?|weeks?|months?|years?|"
             r"business days?|calendar days?)")
_ASKS = (
    ("reason", re.compile(r"^\s*why\b|\bwhy (?:did|does|do|is|was|must|should|are|were)\b|\bthe reason\b|"
                          r"\bwhat (?:caused|was the cause|was the root cause)\b", re.IGNORECASE)),
    ("code", re.compile(r"\b(?:which|what)\s+(?:\w+\s+)?(?:command|commands|flags?|target|prefix|option|"
                        r"subcommand|script|cli|invocation|env(?:ironment)? var(?:iable)?s?|variable|endpoint|"
                        r"header|key prefix|path|url)\b|\bhow (?:do|can|should|would) (?:i|we|you)\b|"
                        r"\b(?:command|cli) (?:to|for|that)\b", re.IGNORECASE)),
    ("duration", re.compile(r"\bhow (?:long|often|quickly|fast|soon|frequently)\b|\bhow much time\b|"
                            r"\b(?:what|which)\b[^?,]{0,40}?\b(?:timeout|ttl|retention|deadline|lifetime|"
                            r"interval|period|window|sla|slo|rto|rpo|expiry|duration|objective)\b", re.IGNORECASE)),
    ("time", re.compile(r"\bwhen\b|\bwhat (?:time|date|day|year)\b|\bwhich (?:day|date|year|month|weekday)\b|"
                        r"\bsince (?:when|which)\b", re.IGNORECASE)),
    ("quantity", re.compile(r"\bhow (?:many|much|far|big|large|old)\b|"
                            r"\b(?:what|which)\b[^?,]{0,40}?\b(?:port|version|percentage|share|number|size|count|"
                            r"limit|amount|target|code|status|threshold|rate|budget|capacity|quota|max|maximum|"
                            r"minimum|ceiling|cap|replicas?|partitions?)s?\b|\b(?:largest|smallest|maximum|minimum)\b|"
                            r"\bport\b", re.IGNORECASE)),
    ("person", re.compile(r"\bwho(?:m|se)?\b|\bby name\b|\bwhich (?:person|engineer|manager|lead)\b|"
                          r"\b(?:name of the|named) (?:person|lead|owner|manager|engineer)\b", re.IGNORECASE)),
)
_LOOKS = {
    "reason": re.compile(r"\b(?:because|since|so that|otherwise|due to|caused|causes|as a result|"
                         r"which made|to avoid|in order to|reverted|would|root cause|led to|trigger(?:ed)?)\b",
                         re.IGNORECASE),
    "code": re.compile(r"`[^`]+`|\b[\w.-]+(?:[-_:./][\w]+)+\b|--[a-z][\w-]*"),
    "duration": re.compile(rf"(?<![\w.-])\d[\d,.]*\s*(?:-\s*)?{_DURATION}\b|\b(?:daily|weekly|monthly|hourly|"
                           r"quarterly|yearly|nightly)\b|\bevery (?:other |\d+\s*)?(?:second|minute|hour|day|night|"
                           rf"morning|evening|week|weekday|month|quarter|year|{_WEEKDAYS})s?\b", re.IGNORECASE),
    # A date or clock time: 2022-06-14, 09:30, 03/2025, 14.06.2022. Other dotted numbers (1.0, 3.2,
    # 0.4.20) are versions or decimals, not dates.
    "time": re.compile(rf"\b\d{{1,4}}(?:[-:/]\d{{1,4}})+\b|\b(?:0?[1-9]|[12]\d|3[01])\.(?:0?[1-9]|1[0-2])\.(?:19|20)\d\d\b|"
                       rf"\b(?:{_WEEKDAYS}|{_MONTHS}|"
                       r"daily|weekly|monthly|quarterly|yearly|nightly)\b|\b\d+\s*(?:am|pm|h|cet|utc)\b|"
                       r"\b(?:19|20)\d\d\b", re.IGNORECASE),
    "quantity": re.compile(r"(?<![\w.-])\d[\d,.]*(?:\s*%)?(?![\w-])"),
    "person": re.compile(r"\b[A-Z][a-z]+(?:\s+(?:de|van|von|da|del|der|la|le|dos|di)?\s*[A-Z][a-zà-ÿ]+)+\b"),
}
# Labels that name the asked kind of answer: a row labelled "Date" answers a when-question.
_KIND_LABELS = {kind: frozenset(content_terms(words)) for kind, words in {
    "time": "date day when time since until year month start",
    "person": "lead owner manager commander approver contact author who engineer assignee responsible chair sponsor",
    "duration": "duration timeout ttl retention interval delay expiry lifetime period window wait deadline target "
                "after within",
}.items()}
# Finer shapes of an answer, per kind: (what the question says, what the answer looks like). A version
# looks like 2.13 or v3, a share like 10 %; a command is an invocation with arguments, a code span
# with a space in it (`gwctl certs rotate`).
_SHAPES: dict[str, tuple[tuple[re.Pattern[str], re.Pattern[str]], ...]] = {
    "quantity": (
        (re.compile(r"\bversions?\b", re.IGNORECASE), re.compile(r"(?<![\w.])v?\d+(?:\.\d+)+(?!\w)|\bv\d+\b")),
        (re.compile(r"\b(?:share|percent|percentage|ratio)\b", re.IGNORECASE), re.compile(r"\d\s*%|\bpercent")),
    ),
    "code": (
        (re.compile(r"\bcommands?\b|\bhow (?:do|can|should|would) (?:i|we|you)\b|\b(?:cli|invocation)\b",
                    re.IGNORECASE), re.compile(r"`[^`\s]+ [^`]*[^`\s]`")),
    ),
}
_LABEL = re.compile(r"^\s*([^:;`]{1,40}?):\s+(\S.*)$")
_FRAME = re.compile(r"\bhow (?:many|much(?: time)?|long|often|far|quickly|fast|big|large|soon|old)\b|"
                    r"\bwhat (?:time|date|day|year)\b|\bwhich (?:day|date|year|month)\b|\bby name\b",
                    re.IGNORECASE)
# What a question names: a code span, a word with a digit (`PAY-142`, `2025.03.2`, `09:30`), or a
# capitalised word that does not open a sentence (`Maestro`, `ADR-0007`). Month and weekday names are
# not names here: documents write dates as numbers.
_NAMED = re.compile(r"`[^`]+`|\b[\w.-]*\d[\w.:-]*|(?<![.?!:;]\s)(?<!^)\b[A-Z][\w'.-]*")
_CALENDAR = frozenset(content_terms(f"{_MONTHS}|{_WEEKDAYS}".replace("|", " ")))
_PARTS = re.compile(r",\s*and\s+|\s+and\s+(?=(?:(?:at|in|on|under|from|to|for|by|with|after|before)\s+)?"
                    r"(?:what|which|who|whom|whose|how|when|where|why|is|are|does|do)\b)|;\s*|\?\s+", re.IGNORECASE)


def kind_labels(kind: str | None) -> frozenset[str]:
    """Stemmed label words that name ``kind`` ("Date", "When" for time)."""
    return _KIND_LABELS.get(kind or "", frozenset())


def shape_of(question: str, kind: str | None) -> re.Pattern[str] | None:
    """The finer shape of the answer a question asks for (a version, a share, a command), or None.

    A command wanted ("which command", "how do I") is a code span with arguments, not a lone identifier:

    >>> shape_of("Which version runs?", "quantity").search("OpenSearch 2.13") is not None
    True
    >>> command = shape_of("How do I rotate the certificates?", "code")
    >>> bool(command.search("run `gwctl certs rotate`")), bool(command.search("the role `certs-operator`"))
    (True, False)
    """
    return next((shape for asked, shape in _SHAPES.get(kind or "", ()) if asked.search(question)), None)


def labelled(text: str) -> list[tuple[str, str]]:
    """The (label, value) pairs of a labelled unit: a table row, a ``Key: value`` line; else ``[]``.

    >>> labelled("Step: 3; Day: +21"), labelled("It runs daily.")
    ([('Step', '3'), ('Day', '+21')], [])
    """
    pairs = [_LABEL.match(segment) for segment in text.split("; ")]
    return [(m.group(1), m.group(2)) for m in pairs if m is not None]


@dataclass(frozen=True)
class Unit:
    """One quotable piece of an evidence item: its text, its own terms and its heading/title terms."""

    n: int
    text: str
    terms: frozenset[str]
    context: frozenset[str] = frozenset()
    heading: str = ""


def expand(terms: list[str]) -> frozenset[str]:
    """Terms plus the parts of compound ones (``api-gateway`` adds ``api`` and ``gateway``)."""
    out = set(terms)
    for term in terms:
        out.update(term_parts(term))
    return frozenset(out)


def _clean(text: str) -> str:
    text = _LINK.sub(r"\1", text)
    text = _EMPHASIS.sub(lambda m: m.group(1) or m.group(2), text)
    return _BRACKET_NUMBER.sub(r"(\1)", text).strip()


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table_row(header: list[str] | None, cells: list[str]) -> str:
    """A table row as text: ``key: value`` for key/value tables, ``Header: cell; ...`` otherwise.

    >>> table_row(["Field", "Value"], ["Public port", "8443"])
    'Public port: 8443'
    >>> table_row(["Service", "Port", "Owner"], ["api-gateway", "8443", ""])
    'Service: api-gateway; Port: 8443'
    """
    if header and len(header) == len(cells):
        generic = all(h.strip().lower() in _GENERIC_HEADERS for h in header)
        if len(cells) == 2 and generic:
            return f"{cells[0]}: {cells[1]}" if cells[0] else cells[1]
        if not generic:
            return "; ".join(f"{h}: {c}" if h else c for h, c in zip(header, cells, strict=True) if c)
    return ": ".join(c for c in cells if c)


def units_of(n: int, text: str, title: str | None = None) -> list[Unit]:
    """Quotable units of one evidence text; table rows carry their header (``Port: 8443``).

    >>> text = "## Ports\\n\\nThe gateway listens\\non 8443. It is TLS.\\n\\n| Name | Port |\\n|---|---|\\n| a | 8443 |"
    >>> [u.text for u in units_of(1, text)]
    ['The gateway listens on 8443.', 'It is TLS.', 'Name: a; Port: 8443']
    """
    out: list[Unit] = []
    title_terms = content_terms(title or "")
    heading = ""
    header: list[str] | None = None
    in_code = False
    block: list[str] = []

    def add(raw: str) -> None:
        body = _clean(raw)
        if len(body) <= 3:
            return
        context = expand(content_terms(heading) + title_terms)
        for sentence in _SENTENCE.split(body) if not body.startswith("`") else [body]:
            if len(sentence) > 3:
                out.append(Unit(n, sentence[:MAX_UNIT_CHARS], expand(content_terms(sentence)), context, heading))

    def flush() -> None:
        if block:
            add(" ".join(block))
            block.clear()

    lines = text.splitlines()
    for i, raw in enumerate(lines):
        line = raw.strip()
        if line.startswith("```"):
            flush()
            in_code = not in_code
            continue
        if in_code:
            if line and not line.startswith("#"):
                add(f"`{line}`")
            continue
        if not line:
            flush()
            header = None
            continue
        if line.startswith("#"):
            flush()
            heading = _clean(line.lstrip("#").strip())
            continue
        if line.startswith("|"):
            flush()
            if _TABLE_RULE.match(line):
                continue
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if header is None and _TABLE_RULE.match(nxt):
                header = _cells(line)
                continue
            add(table_row(header, _cells(line)))
            continue
        if _LIST_ITEM.match(line):
            flush()
            item = _LIST_ITEM.sub("", line)
            if not _LINK_ONLY.match(item):  # a bare link is navigation, not an answer
                block.append(item)
            continue
        block.append(line)
    flush()
    return out


def question_terms(question: str) -> list[str]:
    """The content terms of a question without its framing ("how many", "what time", ...).

    >>> question_terms("How much time does a reviewer get?")
    ['review']
    """
    return content_terms(_FRAME.sub(" ", question))


def names(question: str) -> list[tuple[str, list[str]]]:
    """Each name the question uses, with its stemmed terms: code spans, words with a digit, and
    capitalised words that do not open a sentence (month and weekday names left out).

    A question about something the evidence never names cannot be answered from it
    (`crag_lab.offline.reading.Reading.ungrounded`).

    >>> names("Which acquirer is the default for Maestro cards on port 7070 since March?")
    [('Maestro', ['maestro']), ('7070', ['7070'])]
    >>> names("Kafka retention? Also `gwctl certs`.")
    [('gwctl certs', ['gwctl', 'cert'])]
    """
    found = []
    for match in _NAMED.finditer(question.strip()):
        name = match.group(0).strip("`").rstrip(".")
        # a stem that is a stopword ("withing" -> "with") can never be found in the evidence's terms
        terms = [t for t in content_terms(name) if t not in _CALENDAR and t not in STOPWORDS]
        if terms:
            found.append((name, terms))
    return found


def asks_for(question: str) -> str | None:
    """The kind of answer the phrasing asks for: reason, code, duration, time, quantity, person, or None.

    >>> asks_for("How many brokers are there?"), asks_for("When is the freeze?"), asks_for("What is it?")
    ('quantity', 'time', None)
    """
    question = re.sub(r"\b(what|who|when|where|how)'s\b", r"\1 is", question, flags=re.IGNORECASE)
    for kind, pattern in _ASKS:
        if pattern.search(question):
            return kind
    return None


_NEGATION = re.compile(r"\b(?:not|never|no|nor|none|nothing|neither|without|cannot)\b|n't\b", re.IGNORECASE)
# A condition: "if ...", "unless ...", "when ..." inside a sentence (a question opening with "when" asks a time).
_CONDITION = re.compile(r"\b(?:if|unless|whenever|in case)\b[^,;?]*|(?<=\w[ ,])when\b[^,;?]*", re.IGNORECASE)


def negates(text: str) -> bool:
    """The text says that something is not so (not, never, no, without, n't, ...), outside a condition:
    in "what happens if the renewal does not run?" the negation sets the scene, it is not asked.

    >>> negates("Which region did not invent it?"), negates("Which region invented it?"), negates("It isn't.")
    (True, False, True)
    >>> negates("Who approves it if the deadline cannot be met?"), negates("When does one not need it?")
    (False, True)
    """
    return bool(_NEGATION.search(_CONDITION.sub(" ", text)))


def spans(kind: str, text: str) -> list[str]:
    """The things of ``kind`` in ``text``, as written and in order, each once.

    >>> spans("quantity", "Port 8443, then 8444, then 8443 again")
    ['8443', '8444']
    """
    return list(dict.fromkeys(m.group(0).strip().rstrip(",.;:") for m in _LOOKS[kind].finditer(text)))


def found(kind: str, text: str) -> set[str]:
    """The things of ``kind`` in ``text`` (lower-cased).

    >>> sorted(found("time", "Accepted 14.06.2022 at 09:30, CloudEvents 1.0, uv 0.4.20"))
    ['09:30', '14.06.2022']
    """
    return {m.group(0).lower() for m in _LOOKS[kind].finditer(text)}


def holds(kind: str | None, text: str, question: str) -> bool | None:
    """Whether ``text`` holds a thing of the asked kind that the question does not already hold.

    >>> holds("quantity", "The gateway listens on 8443.", "Which port?"), holds(None, "x", "What?")
    (True, None)
    """
    if kind is None:
        return None
    return bool(found(kind, text) - found(kind, question))


def question_parts(question: str) -> list[str]:
    """The parts of a multi-part question ("..., and which ...?"); a one-part question gives ``[]``.

    >>> question_parts("Which team owns it, and in which channel do I reach them?")
    ['Which team owns it', 'in which channel do I reach them']
    """
    parts = [p.strip(" ?,") for p in _PARTS.split(question) if len(question_terms(p)) >= 2]
    return parts if len(parts) > 1 else []
