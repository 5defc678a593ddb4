"""Training messages for the learned router: chitchat, simple and complex, from public training data.

- **chitchat**: speaker turns of the chit-chat corpus (``chitchat.jsonl.gz``), openers and closers
  of a conversation over-sampled (a user's small talk with an assistant is mostly greetings, thanks
  and goodbyes), long monologues left out.
- **simple**: SQuAD v1.1 train questions (one fact each), and the same questions in the other shapes
  a user types: a request in the imperative ("Tell me the ...", "List the ..."), a terse
  query of its content words ("Montana Act arrests", "arrests Montana Act?", with a long name
  abbreviated to its initials now and then), and a question in a personal register (`framed`: a
  short first-person or situational clause from general templates before it, "I'm writing a
  report on Montana - how many ...?", "quick one: ..."). SQuAD questions are almost never in the
  first person (at most 355 of 87,599), while about a sixth of the chit-chat turns are, so without these a
  question asked in the first person reads as small talk.
- **complex**: what the spec's full pipeline is for, a question whose answer joins several facts,
  composed from SQuAD v1.1 train questions and titles: two questions of one article joined ("..., and
  when ...?", "...? ...?", "...; ..."), a comparison or choice between two articles' subjects, a
  bridge (a question whose answer is named in another question of the article, replaced by the
  first question as a relative clause: "When was the person who founded X born?"), a longer bridge
  in one sentence (a relative clause inside a general second-hop template: "What is the nationality
  of the person who founded X?", "In which country is the city that ... located?") and a change
  over time. A share of them gets the same personal framing as the simple class, so the framing
  says nothing about the class.

Every class gets the same surface noise (lower case, no question mark, a typo now and then), so
punctuation and case say nothing about the class. ``casual_share`` also types a question word and
"is" as in a chat (`casual`: "whats", "who's"), in every class alike (tried, not shipped).
Validation holds out whole SQuAD articles and whole conversations. Nothing here reads an evaluation
set or the bundled knowledge base.

>>> lower_first("What year was it?")
'what year was it?'
>>> terse("How many people were arrested from the Montana Act?", random.Random(0))
'people arrested Montana Act'
>>> initials("the Montana Act")
'the MA'
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CLASSES = ("chitchat", "simple", "complex")
"""The router's classes, in the order of the head's outputs."""

_STOP = frozenset(re.findall(r"\S+", (
    "a an the of in on at to for from by with about as and or but is are was were be been being do does did "
    "what which who whom whose when where why how many much did has have had it its this that these those "
    "there their they he she his her him i you your we our can could would should will shall may might must "
    "not no into than then also during after before under over between")))
_WH = ("what", "which", "who", "whom", "whose", "when", "where", "why", "how")
_DO = frozenset(("do", "does", "did", "can", "could", "will", "would", "should"))
_AUX = _DO | {"is", "are", "was", "were", "has", "have", "had"}
_REQUEST = ("Tell me", "Show me", "Give me", "Find", "Look up", "I need", "Get me")
_REQUEST_WH = ("Tell me", "Find out", "I'd like to know", "Explain", "Show me")
_COMPARATIVES = ("older", "larger", "bigger", "smaller", "more populous", "longer", "more famous", "newer",
                 "more influential", "earlier", "more widely used", "taller")
_ATTRIBUTES = ("population", "history", "size", "founding date", "influence", "role", "origin", "structure",
               "economy", "reputation", "age", "main purpose", "location", "leadership")
_COMPARE_TEMPLATES = (
    "Compare {a} and {b}.", "Compare the {attr} of {a} with that of {b}.",
    "What is the difference between {a} and {b}?", "What are the differences between {a} and {b}?",
    "How does {a} differ from {b}?", "Which is {comp}, {a} or {b}?", "Is {a} {comp} than {b}?",
    "Which came first, {a} or {b}?", "Were {a} and {b} in the same country?",
    "Are {a} and {b} both {kind}?", "{a} vs {b}: which has the greater {attr}?",
    "How does the {attr} of {a} compare with {b}?", "Who is {comp}, {a} or {b}?",
    "Does {a} or {b} have the larger {attr}?", "What do {a} and {b} have in common?",
    "Which one is {comp}: {a} or {b}?",
)
_KINDS = ("cities", "countries", "people", "organisations", "in Europe", "older than 100 years", "famous")
_CHANGE_TEMPLATES = (
    "How has {a} changed over time?", "How did {a} change after {y}?", "What changed in {a} between {y} and {y2}?",
    "How has the {attr} of {a} evolved since {y}?", "What was the {attr} of {a} before {y}, and what is it now?",
    "How did the {attr} of {a} change from {y} to {y2}?", "What is the history of {a} since {y}?",
)
_TYPO_KEEP = re.compile(r"[A-Za-z]")
_CASUAL = re.compile(r"(what|who|where|how|when|which|that|there|it) is\b", re.IGNORECASE)
# A personal or situational register, in general words (no domain, no named system): a clause about
# the asker, then the question. "{topic}" is the article's title.
_FRAMES = (
    "I'm writing a report on {topic} - {q}", "My team needs to know this: {q}", "quick one: {q}",
    "Quick question: {q}", "I was reading about {topic} and wondered, {lq}", "I have an exam on {topic} tomorrow. {q}",
    "Sorry to bother you, but {lq}", "I can't remember - {lq}", "Hey, {lq}", "Hi! {q}",
    "I got asked this today and didn't know: {q}", "I'm preparing a presentation on {topic}. {q}",
    "My friend and I were arguing about this: {q}", "I'm new to {topic}. {q}", "Before I start, {lq}",
    "I've been stuck on this all morning: {q}", "I just got a message from my manager and need to check: {lq}",
    "For my homework: {q}", "I'm not sure about this one, {lq}", "We were talking about {topic} at lunch. {q}",
    "I was up all night with this. {q}", "Can you help me? {q}", "I need this for a meeting in ten minutes: {q}",
    "Honest question, {lq}", "My boss asked me and I don't know: {q}", "I'm trying to plan my week. {q}",
    "Asking for a colleague: {q}", "I keep forgetting this. {q}", "Real quick, {lq}", "So I was wondering, {lq}",
)
_ABBREVIATIONS = {"number": "no.", "approximately": "approx.", "information": "info", "department": "dept",
                  "population": "pop.", "government": "govt", "university": "univ.", "average": "avg",
                  "maximum": "max", "minimum": "min", "percentage": "pct", "temperature": "temp",
                  "application": "app", "organization": "org", "organisation": "org", "configuration": "config",
                  "international": "intl", "national": "natl", "year": "yr", "years": "yrs"}
# Second hops for a one-sentence bridge: {rel} describes a person ("the person who ...") or a thing.
_PERSON_HOPS = ("Where was {rel} born?", "What nationality was {rel}?", "In what year did {rel} die?",
                "Which country is {rel} from?", "What is the name of the university attended by {rel}?",
                "Who was the father of {rel}?", "What position was held by {rel}?", "When was {rel} born?",
                "What language did {rel} speak?", "Which city did {rel} live in?")
_THING_HOPS = ("When was {rel} founded?", "Where is {rel} located?", "Who built {rel}?",
               "In which country is {rel} located?", "What is the {attr} of {rel}?", "Who owns {rel}?",
               "Which year was {rel} established?", "Who was in charge of {rel}?", "What is {rel} named after?",
               "How old is {rel}?")


DISLOCATE = 0.2
"""Share of the token reader's one-sentence bridges with the description first (`dislocated`)."""
TECHNICAL_SHARE = 0.25
MULTIHOP_REPEAT = 5
"""Each multi-hop training question people wrote is seen this many times (they are few beside the composed ones)."""
CASUAL_SHARE = 0.3
"""With ``train_router --casual``: the share of the token reader's messages whose opening question word and
"is" are typed as in a chat (`casual`), every class alike ("whats up" is small talk, "whats the timeout"
a question). Tried, not shipped: the router's data card has the numbers."""
"""Share of the simple and complex messages whose names are swapped for names from software documentation."""
_NAME_SPAN = re.compile(r"\b[A-Z][\w'-]*(?: (?:(?:of|the|de|and) )?[A-Z][\w'-]*)*")
_NOT_NAMES = frozenset(("i", "i'm", "i've", "i'd", "i'll", "hey", "hi", "sorry", "my", "we", "our", "before", "for",
                        "honest", "real", "so", "asking", "quick", "can", "compare", "list", "tell", "show", "give",
                        "find", "look", "get", "explain", "are", "were", "does", "did", "is", "was", *_WH))


@dataclass(frozen=True)
class Message:
    """One training message: its text, class, how it was made (``source``) and its group (held out together)."""

    text: str
    label: str
    source: str
    group: str


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The objects of a JSON-lines file, gzipped when its name ends in ``.gz``; blank lines skipped."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def lower_first(text: str) -> str:
    """The first word lower-cased when it is a question word or an auxiliary (not a name)."""
    first = text.split(" ", 1)[0]
    return text[0].lower() + text[1:] if first.lower() in (*_WH, *_AUX) else text


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9][\w'.-]*[\w]|[A-Za-z0-9]", text)


def terse(question: str, rng: random.Random) -> str:
    """A keyword query of the question's content words (at most five, in order)."""
    words = [w for w in _words(question) if w.lower() not in _STOP]
    return " ".join(words[:5]) if len(words) >= 2 else question


def initials(text: str) -> str:
    """The first run of two or more capitalised words abbreviated to their initials ("Montana Act" -> "MA")."""
    m = re.search(r"\b(?:[A-Z][a-z]+\s+){1,3}[A-Z][a-z]+\b", text)
    return text if not m else text[:m.start()] + "".join(w[0] for w in m.group(0).split()) + text[m.end():]


def terse_question(question: str, rng: random.Random) -> str:
    """A terse query with a question mark: content words (some abbreviated), a name now and then as initials."""
    words = [_ABBREVIATIONS.get(w.lower(), w) for w in _words(question) if w.lower() not in _STOP]
    if len(words) < 2:
        return question
    words = words[:rng.randint(2, 5)]
    if rng.random() < 0.5:  # the asked-for thing first: "arrests Montana Act?"
        words = words[-1:] + words[:-1]
    text = " ".join(words)
    return (initials(text) if rng.random() < 0.3 else text) + rng.choice(("?", "?", " ?", "??"))


def framed(question: str, topic: str, rng: random.Random) -> str:
    """The question after a first-person or situational clause from `_FRAMES` (a general template)."""
    return rng.choice(_FRAMES).format(q=question, lq=lower_first(question), topic=topic)


def imperative(question: str, rng: random.Random) -> str | None:
    """The question as a request: "What is the X of Y?" -> "Tell me the X of Y"; None when it has no such shape."""
    q = question.strip().rstrip("?").strip()
    m = re.match(r"(?i)^(?:what|which)\s+(?:is|are|was|were)\s+(.+)$", q)
    if m:
        return f"{rng.choice(_REQUEST)} {m.group(1)}"
    # "Which countries border X" -> "List the countries that border X"
    m = re.match(r"(?i)^(?:what|which)\s+([a-z]+s)\s+(.+)$", q)
    if m and m.group(2).split(" ", 1)[0].lower() not in _AUX:
        return f"List the {m.group(1)} that {m.group(2)}"
    m = re.match(r"(?i)^(?:who|when|where|why|how)\s+(.+)$", q)
    if m:
        return f"{rng.choice(_REQUEST_WH)} {q[0].lower() + q[1:]}"
    return None


def _title(raw: str) -> str:
    return re.sub(r"\s*\(.*?\)", "", raw.replace("_", " ")).strip()


def _entity(answer: str) -> bool:
    """An answer that names something: capitalised, one to four words, no digits only."""
    words = answer.split()
    return 1 <= len(words) <= 4 and answer[:1].isupper() and not answer.replace(",", "").isdigit() and len(answer) >= 4


def relative(question: str) -> str | None:
    """A question as a description of its answer: "Who founded X?" -> "the person who founded X"."""
    q = question.strip().rstrip("?").strip()
    words = q.split()
    if len(words) < 3:
        return None
    head = words[0].lower()
    if head == "who":
        return "the person who " + " ".join(words[1:])
    if head in ("what", "which") and words[1].isalpha() and words[1].islower() and words[1] not in _AUX \
            and words[2].lower() not in _DO and (words[2].lower() in _AUX | {"that"} or words[2].endswith(("ed", "s"))):
        rest = words[2:] if words[2].lower() != "that" else words[3:]
        return f"the {words[1]} that " + " ".join(rest)
    return None


def technical(text: str, names: Sequence[str], rng: random.Random, *, most: int = 2) -> str:
    """``text`` with up to ``most`` of its names (runs of capitalised words, not a sentence's first word) each
    swapped for a different name from ``names``: "When was Apple founded?" -> "When was http.Client founded?".
    Both question classes get it alike, so a name from code says a question is about software, not
    which kind of question it is.

    >>> technical("Is Paris older than New York City?", ["max_retries", "card-sync"], random.Random(1))
    'Is card-sync older than max_retries?'
    """
    spans: list[tuple[int, int]] = []
    for m in _NAME_SPAN.finditer(text):
        start, words = m.start(), m.group(0).split(" ")
        while words and (not text[:start].strip() or text[:start].rstrip()[-1] in ".?!:-;"
                         or words[0].lower() in _NOT_NAMES or words[0].lower() in ("of", "the", "de", "and")):
            start += len(words.pop(0)) + 1
        if words:
            spans.append((start, m.end()))
    spans = spans[:most]
    if not spans or len(names) < len(spans):
        return text
    for (start, end), name in zip(reversed(spans), rng.sample(list(names), len(spans)), strict=True):
        text = text[:start] + name + text[end:]
    return text


def dislocated(relative_clause: str, hop: str) -> str:
    """A one-sentence bridge with its description put first and a pronoun in its place:
    "The person who founded X: where was that person born?" (`long_bridges`, now and then).

    >>> dislocated("the city that hosts X", "In which country is {rel} located?")
    'The city that hosts X: in which country is it located?'
    """
    pronoun = "that person" if relative_clause.startswith("the person") else "it"
    second = hop.format(rel=pronoun)
    return f"{relative_clause[0].upper()}{relative_clause[1:]}: {second[0].lower()}{second[1:]}"


def casual(text: str, rng: random.Random) -> str:
    """A leading question word and ``is`` typed the way people type them in a chat: ``what's``,
    ``whats``, ``wats`` (``who's``, ``whos``; ...); the text as it was when it does not open so.

    >>> casual("What is the capital of Peru?", random.Random(1))
    'whats the capital of Peru?'
    >>> casual("Where did it go?", random.Random(1))
    'Where did it go?'
    """
    found = _CASUAL.match(text)
    if not found:
        return text
    word = found.group(1).lower()
    forms = [f"{word}'s", f"{word}s"] + (["wats", "wat's"] if word == "what" else [])
    return rng.choice(forms) + text[found.end():]


def _noise(text: str, rng: random.Random, casual_share: float = 0.0) -> str:
    """Surface noise every class gets alike: lower case, no question mark, a swapped pair of letters, and
    (for a ``casual_share``) a question word contracted with ``is`` (`casual`)."""
    if casual_share and rng.random() < casual_share:
        text = casual(text, rng)
    r = rng.random()
    if r < 0.2:
        text = text.lower()
    if rng.random() < 0.2:
        text = text.rstrip("?.! ")
    if rng.random() < 0.05 and len(text) > 6:
        i = rng.randrange(1, len(text) - 2)
        if _TYPO_KEEP.match(text[i]) and _TYPO_KEEP.match(text[i + 1]):
            text = text[:i] + text[i + 1] + text[i] + text[i + 2:]
    return text


def chitchat_messages(rows: Sequence[Mapping[str, Any]], n: int, rng: random.Random, *,
                      max_chars: int = 200) -> list[Message]:
    """``n`` turns, about half of them a conversation's first two or last turn."""
    by_conv: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_conv.setdefault(str(row["id"]).rsplit("/", 1)[0], []).append(row)
    edges: list[tuple[str, str]] = []
    middle: list[tuple[str, str]] = []
    for conv in sorted(by_conv):
        turns = sorted(by_conv[conv], key=lambda r: str(r["id"]))
        for i, row in enumerate(turns):
            if len(str(row["text"])) <= max_chars:
                (edges if i <= 1 or i == len(turns) - 1 else middle).append((conv, str(row["text"])))
    take_edges = min(len(edges), n // 2)
    chosen = rng.sample(edges, take_edges) + rng.sample(middle, min(len(middle), n - take_edges))
    return [Message(text, "chitchat", "chitchat", f"conv/{conv}") for conv, text in chosen]


def simple_messages(rows: Sequence[Mapping[str, Any]], n: int, rng: random.Random) -> list[Message]:
    """``n`` one-fact messages: of SQuAD questions, up to 20 % as requests, 10 % as terse queries, 10 % as
    terse queries with a question mark, 20 % framed in a personal register, the rest as written."""
    out: list[Message] = []
    pool = rng.sample(list(rows), min(len(rows), n))
    for i, row in enumerate(pool):
        q, group = str(row["question"]).strip(), f"title/{row['title']}"
        kind = i % 10
        if kind in (4, 5):
            req = imperative(q, rng)
            if req:
                out.append(Message(req, "simple", "request", group))
                continue
        if kind == 6:
            short = terse(q, rng)
            if short != q:
                out.append(Message(short, "simple", "terse", group))
                continue
        if kind == 7:
            short = terse_question(q, rng)
            if short != q:
                out.append(Message(short, "simple", "terse_question", group))
                continue
        if kind in (8, 9):
            inner = (imperative(q, rng) if rng.random() < 0.2 else None) or q
            out.append(Message(framed(inner, _title(str(row["title"])), rng), "simple", "framed", group))
            continue
        out.append(Message(q, "simple", "squad", group))
    return out


def complex_messages(rows: Sequence[Mapping[str, Any]], n: int, rng: random.Random, *,
                     dislocate: float = 0.0) -> list[Message]:
    """``n`` multi-fact messages: 30 % two joined questions, 25 % comparisons, 15 % bridges, 15 % one-sentence
    bridges, 15 % change over time; then 15 % of them framed in a personal register (as `simple_messages`)."""
    by_title: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_title.setdefault(str(row["title"]), []).append(row)
    titles = sorted(by_title)
    if len(titles) < 2 or not n:
        return []
    entities = sorted({a for r in rows for a in r["answers"][:1] if _entity(a)})
    years = sorted({a for r in rows for a in r["answers"][:1] if re.fullmatch(r"1[5-9]\d\d|20[0-2]\d", a)}) or ["1990"]
    bridges = _bridges(by_title, rng)
    out: list[Message] = []
    want = {"two_questions": int(n * 0.30), "comparison": int(n * 0.25), "bridge": int(n * 0.15),
            "long_bridge": int(n * 0.15)}
    want["change"] = n - sum(want.values())
    for _ in range(want["two_questions"]):
        title = rng.choice(titles)
        q1, q2 = (str(r["question"]).strip() for r in rng.sample(by_title[title], 2)) if len(by_title[title]) > 1 \
            else (str(by_title[title][0]["question"]), str(rng.choice(rows)["question"]))
        joiner = rng.choice((", and ", " and ", "; ", "? ", ", and also "))
        text = q1.rstrip("?. ") + joiner + (lower_first(q2) if joiner != "? " else q2)
        out.append(Message(text, "complex", "two_questions", f"title/{title}"))
    for _ in range(want["comparison"]):
        t1, t2 = rng.sample(titles, 2)
        if rng.random() < 0.5 and len(entities) > 2:
            a, b = rng.sample(entities, 2)
        else:
            a, b = _title(t1), _title(t2)
        text = rng.choice(_COMPARE_TEMPLATES).format(a=a, b=b, attr=rng.choice(_ATTRIBUTES),
                                                     comp=rng.choice(_COMPARATIVES), kind=rng.choice(_KINDS))
        out.append(Message(text, "complex", "comparison", f"title/{t1}"))
    out += bridges[: want["bridge"]]
    want["change"] += want["bridge"] - min(len(bridges), want["bridge"])  # too few bridges: more of these instead
    for _ in range(want["change"]):
        t1 = rng.choice(titles)
        a = _title(t1) if rng.random() < 0.6 or not entities else rng.choice(entities)
        y = rng.choice(years)
        y2 = str(min(int(y) + rng.randint(5, 60), 2023))
        text = rng.choice(_CHANGE_TEMPLATES).format(a=a, y=y, y2=y2, attr=rng.choice(_ATTRIBUTES))
        out.append(Message(text, "complex", "change", f"title/{t1}"))
    out += long_bridges(by_title, want["long_bridge"], rng, dislocate=dislocate)
    for i, m in enumerate(out):
        if rng.random() < 0.15:
            topic = _title(m.group.split("/", 1)[1])
            out[i] = Message(framed(m.text, topic, rng), m.label, m.source + "+framed", m.group)
    return out


def long_bridges(by_title: Mapping[str, Sequence[Mapping[str, Any]]], n: int, rng: random.Random, *,
                 dislocate: float = 0.0) -> list[Message]:
    """``n`` one-sentence bridges: a question turned into a description of its answer (`relative`) inside a
    general second-hop template, "What nationality was the person who founded X?"."""
    described = [(title, rel) for title in sorted(by_title) for r in by_title[title]
                 for rel in [relative(str(r["question"]))] if rel]
    out: list[Message] = []
    for title, rel in rng.sample(described, min(n, len(described))):
        hops = _PERSON_HOPS if rel.startswith("the person") else _THING_HOPS
        hop = rng.choice(hops).replace("{attr}", rng.choice(_ATTRIBUTES))
        text = dislocated(rel, hop) if dislocate and rng.random() < dislocate else hop.format(rel=rel)
        out.append(Message(text, "complex", "long_bridge", f"title/{title}"))
    return out


def _bridges(by_title: Mapping[str, Sequence[Mapping[str, Any]]], rng: random.Random) -> list[Message]:
    """Bridge questions: in one article, a question naming another question's answer, that answer
    replaced by the other question as a relative clause."""
    out: list[Message] = []
    for title in sorted(by_title):
        rows = by_title[title]
        described = [(str(r["answers"][0]), rel) for r in rows if r["answers"] and _entity(str(r["answers"][0]))
                     for rel in [relative(str(r["question"]))] if rel]
        for answer, rel in described:
            hosts = [str(r["question"]) for r in rows if answer in str(r["question"]) and rel not in str(r["question"])]
            if hosts:
                host = rng.choice(hosts)
                found = re.search(rf"\b(?:[Tt]he )?{re.escape(answer)}", host)
                text = host[:found.start()] + rel + host[found.end():] if found else host.replace(answer, rel, 1)
                out.append(Message(text, "complex", "bridge", f"title/{title}"))
    rng.shuffle(out)
    return out


def held_out(group: str, share: float = 0.1) -> bool:
    """Whether a group (an article, a conversation) is in the validation part: a stable hash, not the seed."""
    return int(hashlib.sha256(group.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF < share


def multihop_messages(rows: Iterable[Mapping[str, Any]], *, val: bool) -> list[Message]:
    """Multi-hop questions people wrote (HotpotQA **train**: ``{"question": ...}`` rows), class complex; one
    question in five, by a hash of its text, is kept for validation (``val``)."""
    return [Message(str(r["question"]), "complex", "multihop", f"multihop/{r['question']}")
            for r in rows if held_out(f"multihop/{r['question']}", 0.2) == val]


def build(train_dir: Path, *, per_class: int, val_per_class: int, seed: int,
          names: Sequence[tuple[str, str]] = (), casual_share: float = 0.0,
          multihop: Sequence[Mapping[str, Any]] = ()) -> tuple[list[Message], list[Message]]:
    """Training and validation messages, ``per_class`` (``val_per_class``) of each class, shuffled, noised.

    ``names``: (document, name) pairs (`crag_lab.learned.readmes.technical_names`); when given (the token
    reader's messages), a `TECHNICAL_SHARE` of the questions get names from them (`technical`), validation
    ones only from held-out documents, a `DISLOCATE` share of the one-sentence bridges put their
    description first (`dislocated`). ``casual_share`` of every class is typed as in a chat (`casual`; tried
    for the token reader, `CASUAL_SHARE`, not shipped). ``multihop`` rows (`multihop_messages`) join the
    complex class, each training question `MULTIHOP_REPEAT` times with its own noise (measured, not yet shipped)."""
    rng = random.Random(seed)
    squad = read_jsonl(train_dir / "squad11_train.jsonl.gz")
    chat = read_jsonl(train_dir / "chitchat.jsonl.gz")
    parts: list[list[Message]] = []
    for val, n in ((False, per_class), (True, val_per_class)):
        s_rows = [r for r in squad if held_out(f"title/{r['title']}") == val]
        c_rows = [r for r in chat if held_out(f"conv/{str(r['id']).rsplit('/', 1)[0]}") == val]
        if not names:  # the head's messages, drawn in this order since it shipped
            msgs = chitchat_messages(c_rows, n, rng) + simple_messages(s_rows, n, rng) + complex_messages(s_rows, n, rng)
        else:  # the token reader's: names from code, a fifth of the one-sentence bridges with the description first
            pool = [name for doc, name in names if held_out(f"doc/{doc}", 0.2) == val]
            questions = simple_messages(s_rows, n, rng) + complex_messages(s_rows, n, rng, dislocate=DISLOCATE)
            for i, m in enumerate(questions):
                if rng.random() < TECHNICAL_SHARE:
                    swapped = technical(m.text, pool, rng)
                    if swapped != m.text:
                        questions[i] = Message(swapped, m.label, m.source + "+technical", m.group)
            msgs = chitchat_messages(c_rows, n, rng) + questions
        msgs = [Message(_noise(m.text, rng, casual_share), m.label, m.source, m.group) for m in msgs]
        seen: set[str] = set()
        unique = [m for m in msgs if not (m.text in seen or seen.add(m.text))]  # type: ignore[func-returns-value]
        unique += [Message(_noise(m.text, rng, casual_share), m.label, m.source, m.group)
                   for m in multihop_messages(multihop, val=val) for _ in range(1 if val else MULTIHOP_REPEAT)]
        rng.shuffle(unique)
        parts.append(unique)
    return parts[0], parts[1]


def counts(messages: Iterable[Message]) -> dict[str, dict[str, int]]:
    """Messages per class and source."""
    out: dict[str, dict[str, int]] = {}
    for m in messages:
        out.setdefault(m.label, {}).setdefault(m.source, 0)
        out[m.label][m.source] += 1
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}
