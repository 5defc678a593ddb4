"""Training pairs for the answer scorer: (question, unit as the offline model reads it, label).

Every pair is cut the way evidence is cut at run time (`crag_lab.offline.units.units_of`, the unit
keyed by its item's title: ``"Title: unit"``), so the scorer learns on the same shape of text it will
score. Three public sources, none of them an evaluation set or the bundled knowledge base:

- SQuAD v1.1 train: the unit holding the answer is a positive, the paragraph's other units are hard
  negatives; a question set against a paragraph of *another* article that shares its words gives an
  unanswerable group (every unit negative).
  A question set against another paragraph of its *own* article (same names, no answer) gives a
  near-miss unanswerable group.
- SQuAD 2.0 train (excerpt): its unanswerable questions against their own paragraph, every unit negative.
- Engineering documentation (the READMEs of permissively licensed Python packages): templated
  questions over table rows, ``key: value`` rows and install commands, the other rows of the same
  table as hard negatives.

>>> pairs = squad_pairs([{"id": "a/p0/q0", "title": "Port_Guide", "question": "Which port?",
...     "context": "The gateway listens on 8443. It uses TLS.", "answers": ["8443"], "is_impossible": False}])
>>> [(p.text, p.label) for p in pairs]
[('Port Guide: The gateway listens on 8443.', 1), ('Port Guide: It uses TLS.', 0)]
"""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crag_lab.kb._chunking import iter_chunks
from crag_lab.offline.reading import unit_key
from crag_lab.offline.text import content_terms
from crag_lab.offline.units import units_of


@dataclass(frozen=True)
class Pair:
    """One training example: ``label`` is 1 when ``text`` answers ``question`` on its own."""

    question: str
    text: str
    label: int
    group: str
    source: str


unit_text = unit_key
"""A unit as the offline model keys it: ``"Title: unit"`` (`crag_lab.offline.reading.unit_key`)."""


def _norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).lower().split())


def _title(raw: str) -> str:
    return raw.replace("_", " ").strip()


def squad_pairs(rows: Iterable[Mapping[str, Any]], *, negatives: int = 3, seed: int = 0) -> list[Pair]:
    """Positive and hard-negative pairs from SQuAD rows; unanswerable rows give negatives only.

    A unit is positive when it holds one of the row's answer texts; a row whose answer no unit holds
    whole (an answer spanning two sentences) is skipped rather than mislabelled.
    """
    rng = random.Random(seed)
    out: list[Pair] = []
    for row in rows:
        title = _title(str(row["title"]))
        units = units_of(1, str(row["context"]), title)
        texts = [unit_text(title, u) for u in units]
        if row.get("is_impossible"):
            chosen = rng.sample(texts, min(len(texts), negatives + 1))
            out += [Pair(row["question"], t, 0, row["id"], "squad2-unanswerable") for t in chosen]
            continue
        answers = [_norm(a) for a in row["answers"] if a.strip()]
        held = [i for i, u in enumerate(units) if any(a in _norm(u.text) for a in answers)]
        if not held:
            continue
        out += [Pair(row["question"], texts[i], 1, row["id"], "squad11") for i in held[:1]]
        others = [t for i, t in enumerate(texts) if i not in held]
        out += [Pair(row["question"], t, 0, row["id"], "squad11") for t in rng.sample(others, min(len(others), negatives))]
    return out


def other_article_pairs(rows: Sequence[Mapping[str, Any]], *, share: float, negatives: int = 3,
                        candidates: int = 200, seed: int = 0) -> list[Pair]:
    """Unanswerable groups: a question against the paragraph of another article that shares most of its words.

    For ``share`` of the questions, ``candidates`` paragraphs of other articles are drawn at random and
    the one holding most of the question's content words is used; every one of its units is a negative.
    """
    rng = random.Random(seed)
    paragraphs: dict[str, tuple[str, str]] = {}
    for row in rows:
        paragraphs.setdefault(str(row["context"]), (_title(str(row["title"])), str(row["context"])))
    pool = list(paragraphs.values())
    terms = [frozenset(content_terms(context)) for _, context in pool]
    out: list[Pair] = []
    for row in rows:
        if rng.random() >= share:
            continue
        q_terms = set(content_terms(str(row["question"])))
        title = _title(str(row["title"]))
        picks = [i for i in rng.sample(range(len(pool)), min(candidates, len(pool))) if pool[i][0] != title]
        if not picks or not q_terms:
            continue
        best = max(picks, key=lambda i: len(q_terms & terms[i]))
        other_title, context = pool[best]
        texts = [unit_text(other_title, u) for u in units_of(1, context, other_title)]
        out += [Pair(row["question"], t, 0, f"{row['id']}/other", "other-article")
                for t in rng.sample(texts, min(len(texts), negatives))]
    return out


def paragraphs_by_title(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Each article's distinct paragraphs, in the order its rows first give them."""
    by_title: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        contexts = by_title[str(row["title"])]
        if str(row["context"]) not in contexts:
            contexts.append(str(row["context"]))
    return by_title


def same_article_pairs(rows: Sequence[Mapping[str, Any]], *, share: float, negatives: int = 3,
                       seed: int = 0) -> list[Pair]:
    """Near-miss unanswerable groups: a question against *another paragraph of its own article*.

    For ``share`` of the questions, the article's other paragraph holding most of the question's
    content words (and not its answer) is used; every one of its units is a negative. Same topic,
    same names, no answer: the shape of SQuAD 2.0's written unanswerable questions.
    """
    rng = random.Random(seed)
    by_title = paragraphs_by_title(rows)
    terms = {c: frozenset(content_terms(c)) for cs in by_title.values() for c in cs}
    out: list[Pair] = []
    for row in rows:
        if rng.random() >= share:
            continue
        answers = [_norm(a) for a in row["answers"] if a.strip()]
        q_terms = set(content_terms(str(row["question"])))
        others = [c for c in by_title[str(row["title"])]
                  if c != row["context"] and not any(a in _norm(c) for a in answers)]
        if not others or not q_terms:
            continue
        context = max(others, key=lambda c: (len(q_terms & terms[c]), c))
        title = _title(str(row["title"]))
        texts = [unit_text(title, u) for u in units_of(1, context, title)]
        out += [Pair(row["question"], t, 0, f"{row['id']}/same", "same-article")
                for t in rng.sample(texts, min(len(texts), negatives))]
    return out


# Questions over documentation, in several registers: full questions, terse ones and lower-case ones.
_ROW_TEMPLATES = (
    "What is the {col} of {subject}?", "Which {col} does {subject} have?", "{subject} {col}?",
    "what's the {col} for {subject}", "Tell me the {col} of {subject}.", "{col} of {subject}?",
)
_KEY_TEMPLATES = ("What is {key}?", "What does {key} mean?", "{key}?", "What is {key} set to?", "how is {key} described")
_INSTALL_TEMPLATES = ("How do I install {name}?", "Which command installs {name}?", "install {name}?",
                      "How can I get {name} set up?")
_CODE_HEADING = re.compile(r"\b(install(?:ation|ing)?|setup|set up|getting started|quick ?start|usage)\b", re.IGNORECASE)
_INSTALL_LINE = re.compile(r"\b(?:pip|conda|uv|poetry|pipx|apt(?:-get)?|brew)\s+(?:install|add)\b")


def _table_rows(unit_texts: Sequence[str]) -> Iterator[tuple[list[tuple[str, str]], int]]:
    for i, text in enumerate(unit_texts):
        cells = [tuple(part.split(": ", 1)) for part in text.split("; ")]
        if len(cells) >= 2 and all(len(c) == 2 for c in cells):
            yield [(c[0].strip(), c[1].strip()) for c in cells], i  # type: ignore[misc]


def doc_pairs(name: str, markdown: str, *, negatives: int = 3, seed: int = 0, limit: int = 60) -> list[Pair]:
    """Templated pairs over one document: table rows, ``key: value`` rows and install commands.

    The question names a row's subject and asks another of its columns; the positive is that row,
    the negatives are other rows of the same chunk (same columns, other subject) and other units.
    """
    rng = random.Random(f"{seed}/{name}")
    out: list[Pair] = []
    lines = markdown.splitlines()
    for chunk in iter_chunks(f"{name}.md", lines, kind="markdown", title=name):
        units = units_of(1, chunk.text, chunk.title)
        texts = [unit_text(chunk.title, u) for u in units]
        raw = [u.text for u in units]
        gid = f"docs/{name}/{chunk.line_start}"
        for cells, i in _table_rows(raw):
            (_, subject), *rest = cells
            col, value = rng.choice(rest)
            if not subject or not value or len(subject) > 60 or len(col) > 40:
                continue
            question = rng.choice(_ROW_TEMPLATES).format(col=col.lower(), subject=subject)
            others = [t for j, t in enumerate(texts) if j != i]
            out.append(Pair(question, texts[i], 1, f"{gid}/{i}", "docs"))
            out += [Pair(question, t, 0, f"{gid}/{i}", "docs") for t in rng.sample(others, min(len(others), negatives))]
        for i, text in enumerate(raw):
            key, sep, value = text.partition(": ")
            if (not sep or "; " in text or not 2 < len(key) <= 40 or not value or key.startswith("`")
                    or not content_terms(key)):
                continue
            question = rng.choice(_KEY_TEMPLATES).format(key=key)
            others = [t for j, t in enumerate(texts) if j != i]
            if others:
                out.append(Pair(question, texts[i], 1, f"{gid}/k{i}", "docs"))
                out += [Pair(question, t, 0, f"{gid}/k{i}", "docs") for t in rng.sample(others, min(len(others), negatives))]
        heading = units[0].heading if units else ""
        installs = [i for i, t in enumerate(raw) if t.startswith("`") and _INSTALL_LINE.search(t)]
        if installs and _CODE_HEADING.search(heading or chunk.title):
            question = rng.choice(_INSTALL_TEMPLATES).format(name=name)
            others = [t for j, t in enumerate(texts) if j not in installs]
            out.append(Pair(question, texts[installs[0]], 1, f"{gid}/install", "docs"))
            out += [Pair(question, t, 0, f"{gid}/install", "docs") for t in rng.sample(others, min(len(others), negatives))]
    groups: dict[str, list[Pair]] = defaultdict(list)
    for pair in out:
        groups[pair.group].append(pair)
    keep = sorted(groups)
    rng.shuffle(keep)
    return [p for g in sorted(keep[:limit]) for p in groups[g]]


def cross_doc_pairs(docs: Sequence[list[Pair]], *, seed: int = 0) -> list[Pair]:
    """Unanswerable documentation groups: one document's question against another document's units."""
    rng = random.Random(seed)
    out: list[Pair] = []
    for i, pairs in enumerate(docs):
        if len(docs) < 2 or not pairs:
            continue
        other = docs[(i + 1 + rng.randrange(len(docs) - 1)) % len(docs)]
        if not other:
            continue
        question = rng.choice(pairs).question
        texts = sorted({p.text for p in other})
        out += [Pair(question, t, 0, f"{pairs[0].group}/cross", "docs-unanswerable")
                for t in rng.sample(texts, min(len(texts), 4))]
    return out


# Near-miss unanswerable questions made from answerable ones, after the rule-based baselines of Zhu et
# al. 2019 ("Learning to Ask Unanswerable Questions from Answerable Ones"): the question is changed so
# that the sentence that answered it no longer does, and the pair (changed question, that sentence)
# is a negative. SQuAD 2.0's written unanswerable questions are mostly of these kinds.
_ANTONYMS = dict(p for a, b in (
    ("first", "last"), ("largest", "smallest"), ("most", "least"), ("highest", "lowest"), ("earliest", "latest"),
    ("oldest", "youngest"), ("before", "after"), ("increase", "decrease"), ("increased", "decreased"),
    ("north", "south"), ("east", "west"), ("northern", "southern"), ("eastern", "western"),
    ("maximum", "minimum"), ("longest", "shortest"), ("biggest", "smallest"), ("best", "worst"),
    ("won", "lost"), ("win", "lose"), ("start", "end"), ("began", "ended"), ("beginning", "end"),
    ("more", "fewer"), ("larger", "smaller"), ("higher", "lower"), ("older", "newer"), ("major", "minor"),
    ("positive", "negative"), ("allowed", "banned"), ("early", "late"), ("inside", "outside"),
    ("import", "export"), ("imported", "exported"), ("accepted", "rejected"), ("strongest", "weakest"),
) for p in ((a, b), (b, a)))
_AUXILIARY = re.compile(r"\b(is|was|are|were|can|could|will|would|should)\b(?!\s+not\b)", re.I)
"""Where "not" goes without moving a verb; do-support ("when did X sail" -> "when did X not sail") needs
the verb's place, which a pattern cannot find, so those questions are not negated."""
_NEGATED = re.compile(r"\b(not|never|no|nor|none|nothing|nobody|neither|cannot|without)\b|n't\b", re.I)
_NAME = re.compile(r"\b[A-Z][\w'-]*(?:[ ](?:(?:of|the|de|von|van|del|la)[ ])?[A-Z][\w'-]*)*")
_NUMBER = re.compile(r"\b\d{1,4}\b")
_WH = frozenset({"what", "which", "who", "whom", "whose", "when", "where", "why", "how", "in", "on", "the", "a", "an"})
PERTURBATIONS = ("antonym", "negation", "entity", "number")


def _names(text: str) -> list[str]:
    return [m.group(0) for m in _NAME.finditer(text) if m.group(0).lower() not in _WH]


def perturb(question: str, answer_unit: str, paragraph: str, article_names: Sequence[str],
            rng: random.Random) -> tuple[str, str] | None:
    """The question changed so that ``answer_unit`` no longer answers it, and how; None when no change fits.

    Tried in a random order: an *antonym* (``first`` → ``last``) whose replacement the paragraph never
    uses; a *negation* (``was`` → ``was not``) when the unit negates nothing; an *entity* of the question
    that the unit names, swapped for another name of the same article that the unit does not hold; a
    *number* of the question that the unit holds, changed to one the paragraph does not hold.

    >>> perturb("Who was the first king of Poland?", "Mieszko was the first king of Poland.",
    ...         "Mieszko was the first king of Poland.", [], random.Random(1))
    ('Who was the last king of Poland?', 'antonym')
    """
    para = paragraph.lower()
    kinds = [k for k in PERTURBATIONS if k != "negation"]
    rng.shuffle(kinds)
    kinds.insert(rng.randint(0, len(kinds)) if rng.random() < 0.3 else len(kinds), "negation")  # it fits most questions
    for kind in kinds:
        if kind == "antonym":
            words = [m for m in re.finditer(r"[A-Za-z]+", question) if m.group(0).lower() in _ANTONYMS]
            words = [m for m in words if not re.search(rf"\b{_ANTONYMS[m.group(0).lower()]}\b", para)]
            if words:
                m = rng.choice(words)
                swap = _ANTONYMS[m.group(0).lower()]
                return question[:m.start()] + (swap.capitalize() if m.group(0)[0].isupper() else swap) + question[m.end():], kind
        elif kind == "negation":
            aux = _AUXILIARY.search(question)
            if aux and not _NEGATED.search(answer_unit) and not _NEGATED.search(question):
                return question[:aux.end()] + " not" + question[aux.end():], kind
        elif kind == "entity":
            named = [n for n in _names(question) if n in answer_unit]
            others = sorted({n for n in article_names if n not in answer_unit and n not in question and len(n) > 2})
            if named and others:
                return question.replace(rng.choice(named), rng.choice(others), 1), kind
        elif kind == "number":
            numbers = [n for n in _NUMBER.finditer(question) if re.search(rf"\b{n.group(0)}\b", answer_unit)]
            if numbers:
                m = rng.choice(numbers)
                value = int(m.group(0))
                for _ in range(8):
                    new = value + rng.choice((-1, 1)) * rng.randint(1, 9 if value > 1800 else max(2, value // 2))
                    if new > 0 and not re.search(rf"\b{new}\b", paragraph):
                        return question[:m.start()] + str(new) + question[m.end():], kind
    return None


def perturbed_pairs(rows: Sequence[Mapping[str, Any]], *, share: float, seed: int = 0) -> list[Pair]:
    """For ``share`` of the answerable rows, the pair (question, the unit that answers it) as a positive and
    (`perturb`-ed question, the same unit) as a negative, each in its own group: the scorer learns that a
    changed word, name or number unmakes an answer."""
    rng = random.Random(seed)
    contexts: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        contexts[str(row["title"])].add(str(row["context"]))
    names = {title: sorted({n for c in cs for n in _names(c)}) for title, cs in contexts.items()}  # once per paragraph
    out: list[Pair] = []
    for row in rows:
        if row.get("is_impossible") or rng.random() >= share:
            continue
        title = _title(str(row["title"]))
        units = units_of(1, str(row["context"]), title)
        answers = [_norm(a) for a in row["answers"] if a.strip()]
        held = [u for u in units if any(a in _norm(u.text) for a in answers)]
        if not held:
            continue
        changed = perturb(str(row["question"]), held[0].text, str(row["context"]), names[str(row["title"])], rng)
        if changed is None:
            continue
        text = unit_text(title, held[0])
        out += [Pair(str(row["question"]), text, 1, f"{row['id']}/kept", "perturbed"),
                Pair(changed[0], text, 0, f"{row['id']}/{changed[1]}", f"perturbed-{changed[1]}")]
    return out


def held_out_documents(names: Sequence[str]) -> set[str]:
    """The documents (READMEs, engineering documents) held out of training (about one in five, by a hash of the
    name): validation only."""
    return {n for n in names if int(hashlib.sha256(n.encode()).hexdigest(), 16) % 5 == 0}
