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
- SQuAD 2.0 train (excerpt): its annotators' unanswerable questions against their own paragraph.

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
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crag_lab.kb._chunking import iter_chunks
from crag_lab.learned.data import _INSTALL_LINE, _KEY_TEMPLATES, _ROW_TEMPLATES, _table_rows, paragraphs_by_title
from crag_lab.offline.text import content_terms
from crag_lab.offline.units import units_of

__all__ = ["SpanExample", "answerable", "build", "doc_examples", "passage", "read_examples", "write_examples"]


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
          near_share: float = 0.5, other_share: float = 0.15, seed: int = 13) -> list[SpanExample]:
    """Every answerable example of ``squad``, near misses for ``near_share`` of its questions, another
    article's paragraph for ``other_share`` of them, and ``excerpt``'s unanswerable questions."""
    rng = random.Random(seed)
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
    out += [unanswerable(row, str(row["context"]), str(row["title"]), "squad2-unanswerable")
            for row in excerpt if row.get("is_impossible")]
    return out


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
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as f:
        json.dump({"passages": list(index), "examples": rows}, f, separators=(",", ":"))


def read_examples(path: str | Path) -> list[SpanExample]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        raw = json.load(f)
    passages = raw["passages"]
    return [SpanExample(q, passages[p], int(s), a, src) for q, p, s, a, src in raw["examples"]]
