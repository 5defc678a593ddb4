"""Training examples for the span reader: (question, passage, where the answer is in it, or nowhere).

A passage is what the reader sees at run time: an evidence item's text after its title
(``"Title: text"``, `passage`). Three kinds of example, all from public training data that is
neither an evaluation set nor the bundled knowledge base:

- **answerable**: a SQuAD v1.1 train question against its own paragraph, the annotator's first
  answer span (the offset moved past the title);
- **near miss**: the same question against the paragraph of its *own* article that shares most of
  its content words and does not hold the answer: same topic, same names, no answer
  (`same_article_pairs` makes the scorer's groups the same way);
- **elsewhere**: the same question against a paragraph of another article, drawn at random;
- SQuAD 2.0 train (excerpt): its annotators' unanswerable questions against their own paragraph;
- **perturbed** (opt-in, `perturbed`; not in the reader that ships): a SQuAD v1.1 question changed
  the ways SQuAD 2.0's annotators wrote theirs, against its own paragraph — a name or number swapped
  for one of the same article that the paragraph lacks, a negation, an antonym.

An unanswerable example has ``start = -1``; a reader trained on them points at its ``[CLS]`` token
there, which is what lets it compare passages (the one that answers against those that do not)
and withhold an answer, instead of finding a confident span in every passage.

>>> ex = answerable({"title": "Port_Guide", "question": "Which port?", "context": "It listens on 8443.",
...                  "answers": ["8443"], "answer_starts": [14]})
>>> ex.passage[ex.start:ex.start + len(ex.answer)], ex.passage
('8443', 'Port Guide: It listens on 8443.')
"""

from __future__ import annotations

import gzip
import io
import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crag_lab.kb._chunking import iter_chunks
from crag_lab.learned.data import _INSTALL_LINE, _KEY_TEMPLATES, _ROW_TEMPLATES, _table_rows, paragraphs_by_title
from crag_lab.offline.text import content_terms
from crag_lab.offline.units import units_of

__all__ = ["SpanExample", "answerable", "build", "doc_examples", "passage", "perturbed", "read_examples",
           "write_examples"]


@dataclass(frozen=True)
class SpanExample:
    """``passage[start:start + len(answer)] == answer``; ``start == -1`` when the passage does not answer."""

    question: str
    passage: str
    start: int
    answer: str
    source: str


def passage(title: str | None, text: str) -> str:
    """What the reader reads for an item: its title (underscores as spaces), a colon, its text."""
    title = (title or "").replace("_", " ").strip()
    return f"{title}: {text}" if title else text


def answerable(row: Mapping[str, Any]) -> SpanExample | None:
    """A SQuAD row's question against its own paragraph, at its first answer (None when the offset
    does not hold the answer's text)."""
    text, answer = str(row["context"]), str(row["answers"][0])
    start = int(row["answer_starts"][0])
    if text[start:start + len(answer)] != answer or not answer.strip():
        return None
    head = passage(row["title"], text)
    return SpanExample(str(row["question"]), head, start + len(head) - len(text), answer, "squad11")


def unanswerable(row: Mapping[str, Any], text: str, title: str, source: str) -> SpanExample:
    return SpanExample(str(row["question"]), passage(title, text), -1, "", source)


def build(squad: Sequence[Mapping[str, Any]], excerpt: Sequence[Mapping[str, Any]] = (), *,
          near_share: float = 0.5, other_share: float = 0.15, perturb_share: float = 0.0,
          seed: int = 13) -> list[SpanExample]:
    """Every answerable example of ``squad``, near misses for ``near_share`` of its questions, another
    article's paragraph for ``other_share`` of them, a `perturbed` question for ``perturb_share`` of
    them (drawn apart, so the others do not move), and ``excerpt``'s unanswerable questions."""
    rng = random.Random(seed)
    twist = random.Random(f"perturb/{seed}")
    by_title = paragraphs_by_title(squad)
    titles = sorted(by_title)
    terms = {c: frozenset(content_terms(c)) for cs in by_title.values() for c in cs}
    out: list[SpanExample] = []
    for row in squad:
        ex = answerable(row)
        if ex is None:
            continue
        out.append(ex)
        title = str(row["title"])
        if rng.random() < near_share:
            answers = [a.lower() for a in row["answers"] if a.strip()]
            q_terms = set(content_terms(str(row["question"])))
            others = [c for c in by_title[title] if c != row["context"] and not any(a in c.lower() for a in answers)]
            if others and q_terms:
                out.append(unanswerable(row, max(others, key=lambda c: (len(q_terms & terms[c]), c)), title, "same-article"))
        if rng.random() < other_share:
            other = rng.choice([t for t in rng.sample(titles, min(3, len(titles))) if t != title] or titles)
            out.append(unanswerable(row, rng.choice(by_title[other]), other, "other-article"))
        if perturb_share and twist.random() < perturb_share:
            changed = perturbed(row, by_title[title], twist)
            if changed is not None:
                out.append(changed)
    out += [unanswerable(row, str(row["context"]), str(row["title"]), "squad2-unanswerable")
            for row in excerpt if row.get("is_impossible")]
    return out


ANTONYMS = dict(pair for a, b in (
    ("first", "last"), ("largest", "smallest"), ("biggest", "smallest"), ("most", "least"), ("before", "after"),
    ("earliest", "latest"), ("highest", "lowest"), ("longest", "shortest"), ("oldest", "youngest"),
    ("older", "younger"), ("more", "fewer"), ("increase", "decrease"), ("increased", "decreased"),
    ("maximum", "minimum"), ("best", "worst"), ("north", "south"), ("east", "west"), ("won", "lost"),
    ("start", "end"), ("began", "ended"), ("early", "late"), ("high", "low"), ("large", "small"),
    ("major", "minor"), ("positive", "negative"), ("public", "private"), ("inside", "outside"),
) for pair in ((a, b), (b, a)))
"""Word swaps that turn a question into its opposite (SQuAD 2.0's annotators' "antonym" kind)."""
_NEGATED = {"is": "isn't", "was": "wasn't", "are": "aren't", "were": "weren't", "did": "didn't", "does": "doesn't",
            "do": "don't", "can": "can't", "could": "couldn't", "has": "hasn't", "had": "hadn't", "have": "haven't",
            "will": "won't", "would": "wouldn't", "should": "shouldn't"}
_AUX = re.compile(r"\b(" + "|".join(_NEGATED) + r")\b")
_WEIGHTS = {"entity": 3, "antonym": 3, "negation": 1}
"""How often each way is picked when several apply. SQuAD 2.0's annotators swapped entities (21 %)
and antonyms (20 %) more than twice as often as they negated (9 %; Rajpurkar et al. 2018, table 3),
and a negation applies by rule to most questions, so it weighs least."""
_NAME = re.compile(r"\b(?:1[5-9]|20)\d\d\b|\b\d[\d,.]*\b|(?<!^)(?<![.?!]\s)\b[A-Z][a-z]+(?:\s[A-Z][a-z]+)*")


def perturbed(row: Mapping[str, Any], paragraphs: Sequence[str], rng: random.Random) -> SpanExample | None:
    """``row``'s question made unanswerable against its own paragraph, or None when no way applies.

    The ways of SQuAD 2.0's annotators that rules can apply: swap a name or number of the question that
    the paragraph holds for one of the same kind from another of the article's ``paragraphs`` that
    this paragraph lacks (*entity swap*); turn a word into its opposite, when the paragraph lacks the
    opposite (*antonym*, `ANTONYMS`); negate the question's verb (*negation*). Each is a guess: an
    antonym or a negation can leave a question the paragraph still answers, so the share is small.
    """
    question, text = str(row["question"]), str(row["context"])
    ways: list[tuple[str, str]] = []
    held = [m for m in _NAME.finditer(question) if m.group(0) in text]
    if held:
        m = rng.choice(held)
        digit = m.group(0)[0].isdigit()
        pool = sorted({n.group(0) for p in paragraphs if p != text for n in _NAME.finditer(p)
                       if n.group(0)[0].isdigit() == digit and n.group(0) not in text and n.group(0) not in question})
        if pool:
            ways.append(("entity", question[:m.start()] + rng.choice(pool) + question[m.end():]))
    words = [m for m in re.finditer(r"[A-Za-z]+", question) if m.group(0).lower() in ANTONYMS]
    if words:
        m = rng.choice(words)
        opposite = ANTONYMS[m.group(0).lower()]
        if not re.search(rf"\b{opposite}\b", text, re.IGNORECASE):
            ways.append(("antonym", question[:m.start()] + opposite + question[m.end():]))
    aux = _AUX.search(question)
    if aux and not re.search(r"\b(?:not|never|no)\b|n't", question, re.IGNORECASE):
        ways.append(("negation", question[:aux.start()] + _NEGATED[aux.group(1)] + question[aux.end():]))
    if not ways:
        return None
    kind, changed = rng.choices(ways, weights=[_WEIGHTS[k] for k, _ in ways])[0]
    return SpanExample(changed, passage(str(row["title"]), text), -1, "", f"perturbed-{kind}")


def _locate(text: str, anchor: str, value: str) -> int:
    """Where ``value`` starts in the first line of ``text`` holding ``anchor`` and then ``value``, or -1."""
    at = 0
    for line in text.split("\n"):
        a = line.find(anchor)
        v = line.find(value, a + len(anchor)) if a >= 0 else -1
        if v >= 0:
            return at + v
        at += len(line) + 1
    return -1


def doc_examples(name: str, markdown: str, *, seed: int = 0, limit: int = 150, near_share: float = 0.3) -> list[SpanExample]:
    """Templated questions over one document's table rows and ``key: value`` rows (the questions of
    `crag_lab.learned.data.doc_pairs`), answered by the cell or value itself in the chunk as it is
    written (markdown table, list item), and for ``near_share`` of them the same question against
    another chunk of the document that does not hold the answer."""
    rng = random.Random(f"spans/{seed}/{name}")
    chunks = [(c.title, c.text) for c in iter_chunks(f"{name}.md", markdown.splitlines(), kind="markdown", title=name)]
    found: list[tuple[str, int, str, int]] = []  # question, chunk, answer, start in the passage
    for k, (title, text) in enumerate(chunks):
        head = len(passage(title, text)) - len(text)
        raw = [u.text for u in units_of(1, text, title)]
        for cells, _ in _table_rows(raw):
            (_, subject), *rest = cells
            col, value = rng.choice(rest)
            if subject and value and len(subject) <= 60 and len(col) <= 40 and len(value) <= 80:
                start = _locate(text, subject, value)
                if start >= 0:
                    found.append((rng.choice(_ROW_TEMPLATES).format(col=col.lower(), subject=subject), k, value, head + start))
        for unit in raw:
            key, sep, value = unit.partition(": ")
            if not sep or "; " in unit or not 2 < len(key) <= 40 or not value or len(value) > 120 or key.startswith("`") \
                    or not content_terms(key):
                continue
            start = _locate(text, key, value)
            if start >= 0:
                found.append((rng.choice(_KEY_TEMPLATES).format(key=key), k, value, head + start))
        for unit in raw:
            command = unit.strip("`")
            if unit.startswith("`") and _INSTALL_LINE.search(unit) and (start := text.find(command)) >= 0:
                found.append((f"How do I install {name}?", k, command, head + start))
    rng.shuffle(found)
    out: list[SpanExample] = []
    for question, k, value, start in found[:limit]:
        out.append(SpanExample(question, passage(*chunks[k]), start, value, "docs"))
        others = [c for j, c in enumerate(chunks) if j != k and value not in c[1]]
        if others and rng.random() < near_share:
            out.append(SpanExample(question, passage(*rng.choice(others)), -1, "", "docs-unanswerable"))
    return out


def write_examples(path: str | Path, examples: Iterable[SpanExample]) -> None:
    """Gzipped JSON with every passage stored once: ``{"passages": [...], "examples": [[question,
    passage_index, start, answer, source], ...]}``."""
    index: dict[str, int] = {}
    rows = [[e.question, index.setdefault(e.passage, len(index)), e.start, e.answer, e.source] for e in examples]
    # no time stamp or file name in the gzip header: the same examples give the same bytes
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0, filename="") as packed, \
            io.TextIOWrapper(packed, encoding="utf-8") as f:
        json.dump({"passages": list(index), "examples": rows}, f, separators=(",", ":"))


def read_examples(path: str | Path) -> list[SpanExample]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        raw = json.load(f)
    passages = raw["passages"]
    return [SpanExample(q, passages[p], int(s), a, src) for q, p, s, a, src in raw["examples"]]
