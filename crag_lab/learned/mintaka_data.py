"""Questions in eight other languages, for the learned router: the Mintaka dev set's translations.

The ChatterBot corpus (`chatterbot_data`) gives the router small talk in many languages, but it holds
about one question to six small-talk turns outside English, and a router trained on it learned the
language more than the kind of message: it sent most questions in those languages to small talk.
Mintaka (Sen et al., COLING 2022; github.com/amazon-science/mintaka, CC BY 4.0) is 20,000 questions
people wrote about Wikidata entities, each translated by people into Arabic, German, Japanese, Hindi,
Portuguese, Spanish, Italian and French, with a complexity type. Its **dev** split
(``data/mintaka_dev.json``, 2,000 questions; the train split is over the snapshot limit) is neither an
evaluation set of this project nor about the knowledge base. Only the translations are read: the router
already has English questions.

A type that needs one fact is simple (`SIMPLE`: generic, count, ordinal, superlative); one that needs
two or a comparison is complex (`COMPLEX`: multi-hop, intersection, difference, comparative). Yes/no
questions mix the two ("Did In Utero come out before Nevermind?") and are left out. Validation holds out
whole questions, all eight translations together, by the same hash as the other sources.

>>> type_class("multihop"), type_class("count"), type_class("yesno")
('complex', 'simple', None)
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from crag_lab.learned import corpora
from crag_lab.learned.router_data import Message

SIMPLE = frozenset(("generic", "count", "ordinal", "superlative"))
"""Mintaka complexity types answered by one fact."""
COMPLEX = frozenset(("multihop", "intersection", "difference", "comparative"))
"""Types that need two facts or a comparison of two."""


def type_class(kind: str) -> str | None:
    """The router class a question of Mintaka complexity type ``kind`` gets, or None for a type left out."""
    return "simple" if kind in SIMPLE else "complex" if kind in COMPLEX else None


def read(path: str | Path) -> list[Message]:
    """Every translated question of the Mintaka file at ``path``, in file order; ``source`` is
    ``mintaka/<language>``, ``group`` the question's id (its translations are held out together)."""
    rows = corpora.read_json(path, "--mintaka", "data/mintaka_dev.json of github.com/amazon-science/mintaka")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and "translations" in r for r in rows):
        raise SystemExit(f"--mintaka {path}: expected a list of questions with \"translations\" "
                         "(data/mintaka_dev.json of github.com/amazon-science/mintaka)")
    out: list[Message] = []
    for row in rows:
        label = type_class(str(row.get("complexityType", "")))
        if label is None:
            continue
        for language, text in sorted(dict(row["translations"]).items()):
            if str(text).strip():
                out.append(Message(str(text).strip(), label, f"mintaka/{language}", f"mintaka/{row['id']}"))
    return out


def split(messages: Iterable[Message], seed: int) -> tuple[list[Message], list[Message]]:
    """Training and validation messages (`corpora.split`: whole questions held out, a text once per split and under
    one class, training texts noised)."""
    return corpora.split(messages, seed)
